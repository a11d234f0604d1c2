// Runs one RunJob on the runner's device: correctness on every case, then CUPTI timing.
#pragma once

#include "runner/child/device.hpp"
#include "runner/child/kernel_timer.hpp"
#include "runner/runner_job.hpp"
#include "tasks/registry.hpp"

namespace crucible::runner::child {

// Never throws for anything a candidate kernel does: launch failures, faults, wrong answers and
// implausible timings all become the report's status. A RunReport with context_lost set means
// the CUDA context hit a sticky error and the process must exit after sending it.
RunReport run_job(const RunJob& job, const tasks::Registry& registry, Device& device,
                  KernelTimer& timer);

}  // namespace crucible::runner::child
