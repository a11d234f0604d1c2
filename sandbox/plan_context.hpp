// The launch-plan context of a task: which names an action's launches may pass to kernels.
#pragma once

#include <cstdint>

#include "sandbox/launch_plan.hpp"
#include "tasks/task.hpp"

namespace crucible::sandbox {

// Tensors, scalars and shape symbols of `task` in manifest order, with the default device
// limits; `max_smem_bytes` overrides the shared-memory limit when > 0 (the runner knows the
// device's exact figure).
PlanContext make_plan_context(const tasks::Task& task, std::int64_t max_smem_bytes = 0);

}  // namespace crucible::sandbox
