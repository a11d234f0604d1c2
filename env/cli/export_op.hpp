// `crucible export-op`: a kernel for a task written out as a PyTorch custom op with the task's
// (the production module's) argument order, so that a winning kernel can replace the op it
// mirrors. The module is self-contained Python: the source, the launch plan and the task's
// signature as data, NVRTC and the CUDA driver through ctypes (env/cli/export_op_template.py).
#pragma once

#include <string>

#include "core/result.hpp"
#include "tasks/task.hpp"

namespace crucible::cli {

// The op's default name: the task id's last part ("llm/rms_norm" -> "rms_norm").
std::string default_op_name(const tasks::Task& task);

// The module text for `source` (a kernel for `task`, with its launch directives) registered as
// torch.ops.crucible.<name>. Errors (kInvalidArgument): a name that is not a Python identifier,
// a launch plan that does not parse against the task, thread-block clusters (not exported yet).
core::Result<std::string> export_op_module(const tasks::Task& task, const std::string& source,
                                           const std::string& name,
                                           const std::string& source_label);

}  // namespace crucible::cli
