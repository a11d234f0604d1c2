// A compiled module loaded into the runner's context, with what every launch of its plan needs.
#pragma once

#include <cuda.h>

#include <map>
#include <string>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "runner/child/device.hpp"
#include "runner/runner_job.hpp"

namespace crucible::runner::child {

using action::LaunchPlan;
using action::PlanContext;

// One compiled module and, for every launch of its plan, the function and parameter sizes.
struct LoadedKernel {
  CUfunction function = nullptr;
  std::vector<std::size_t> param_bytes;
  int max_threads = 0;
  int static_smem = 0;
  int registers = 0;
  int configured_smem = 0;  // dynamic shared memory limit set so far
};

// Whether a launch of `kernel` with `dynamic` bytes of dynamic shared memory must first raise
// the kernel's dynamic limit (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): a block may use
// 48 KiB of static and dynamic shared memory together without it, so a kernel with static
// memory needs the opt-in below 48 KiB of dynamic memory too (40 KiB static and 16 KiB dynamic
// fail to launch without it). Once raised, the limit holds for smaller launches.
inline bool needs_dynamic_smem_optin(const LoadedKernel& kernel, std::size_t dynamic) {
  return dynamic > static_cast<std::size_t>(kernel.configured_smem) &&
         static_cast<std::size_t>(kernel.static_smem) + dynamic > 48 * 1024;
}

class LoadedModule {
 public:
  // Loads the cubin and finds every kernel the plan launches, with its parameter sizes and
  // limits. Throws StepFailure: the candidate's problems are its own (launch_error,
  // invalid_action), the reference's are infra errors.
  LoadedModule(const CompiledModule& compiled, const LaunchPlan& plan, const PlanContext& context,
               bool candidate);
  ~LoadedModule() {
    if (module_ != nullptr && !context_abandoned()) cuModuleUnload(module_);
  }
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  LoadedKernel& kernel(const std::string& name_expression) { return kernels_.at(name_expression); }

 private:
  CUmodule module_ = nullptr;
  std::map<std::string, LoadedKernel> kernels_;
};

}  // namespace crucible::runner::child
