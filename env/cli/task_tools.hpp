// `crucible tasks new` and `crucible tasks check`: making a task folder and holding it to
// everything that can be checked, with or without a GPU.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "env/step_result.hpp"
#include "sandbox/compile_pool.hpp"
#include "tasks/registry.hpp"

namespace crucible::env {

// Creates the task `id` ("<category>/<name>") under `home` as a copy of the task `from`: its
// folder (task.toml, oracle.cpp, test_oracle.cpp, solution.cu, parity.py and any other file of
// the folder) becomes tasks/<id>/ and its reference kernel kernels/<id>.cu, with `from`'s id
// replaced by `id` everywhere and its category by the new one. The copy is a valid task from
// the start (`tasks check` passes on it), to be edited into the new one. Returns the files
// written, relative to `home`. Errors: kInvalidArgument (a malformed id, an unknown category,
// an id that exists, an unknown `from`), kIo.
core::Result<std::vector<std::filesystem::path>> create_task(const std::filesystem::path& home,
                                                             const tasks::Registry& registry,
                                                             std::string_view id,
                                                             std::string_view from);

// One line of a check: what was checked, and "" when it held or why it did not.
struct CheckLine {
  enum class Outcome { kOk, kFailed, kSkipped };
  Outcome outcome = Outcome::kOk;
  std::string what;    // "reference plan on 17 cases"
  std::string detail;  // why it failed or was skipped
};

// What a check may use beyond the task itself.
struct CheckTools {
  std::filesystem::path home;
  sandbox::CompilePool* compile = nullptr;  // NVRTC through the real compile workers
  // Scores a source against the task on the GPU through the real pipeline (correctness on
  // every case, then timing); nullopt where this machine has no GPU (the reason goes to
  // `no_gpu_reason`).
  std::function<env::StepResult(const tasks::Task&, const std::string&)> score_on_gpu;
  std::string no_gpu_reason;
};

// Runs every check of one task: the manifest as loaded, the reference's and the solution's
// launch plans on every case, both compiled with NVRTC, the float64 oracle on the smallest
// case, the checker's name, the parity anchors, the folder's files; on a GPU machine, the
// reference and the solution scored through the pipeline (both must be `ok`).
std::vector<CheckLine> check_task(const tasks::Task& task, const CheckTools& tools);

// The lines as a report: "  ok    reference plan on 17 cases".
std::string format_check(const tasks::Task& task, const std::vector<CheckLine>& lines);

bool check_passed(const std::vector<CheckLine>& lines);

}  // namespace crucible::env
