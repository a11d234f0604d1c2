// The launch-plan context of a task: which names an action's launches may pass to kernels.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "action/launch_plan.hpp"
#include "core/result.hpp"
#include "tasks/task.hpp"

namespace crucible::action {

// Tensors, scalars and shape symbols of `task` in manifest order, with the default device
// limits; `max_smem_bytes` overrides the shared-memory limit when > 0 (the runner knows the
// device's exact figure).
PlanContext make_plan_context(const tasks::Task& task, std::int64_t max_smem_bytes = 0);

// One kernel parameter's bytes: every argument a plan can pass is at most 8 bytes, except a
// tensor map, whose slot stays zero (the runner passes the map it encodes for the call).
using ParamBytes = std::array<std::byte, 8>;
// A device address: the CUDA driver's CUdeviceptr type, named here without the driver's header
// (the runner checks the two agree), so the runner's buffer lists pass as they are.
using DeviceAddress = unsigned long long;

// The parameters of one launch of a plan for case `c`: tensor and workspace device addresses
// (by index, as the plan's arguments name them), scalars in their dtype with the case's value,
// symbols in the width the kernel declares (`param_bytes`, from the loaded function); tensor maps
// are left to the caller.
// kInvalidArgument when a symbol's value does not fit its parameter.
core::Result<std::vector<ParamBytes>> pack_launch_args(
    const Launch& launch, const tasks::Task& task, const tasks::Case& c,
    const std::vector<std::size_t>& param_bytes, const std::vector<DeviceAddress>& tensors,
    const std::vector<DeviceAddress>& workspaces);

}  // namespace crucible::action
