#include "runner/child/loaded_module.hpp"

#include "runner/child/cuda_check.hpp"
#include "runner/child/step_failure.hpp"

namespace crucible::runner::child {

using core::StepStatus;

LoadedModule::LoadedModule(const CompiledModule& compiled, const LaunchPlan& plan,
                           const PlanContext& context, bool candidate) {
  const StepStatus blame = candidate ? StepStatus::kInvalidAction : StepStatus::kInfraError;
  const std::string who = candidate ? "your kernel" : "the reference";
  CUresult rc = cuModuleLoadData(&module_, compiled.cubin.data());
  if (rc != CUDA_SUCCESS) {
    fail(candidate ? StepStatus::kLaunchError : StepStatus::kInfraError,
         "loading " + who + "'s module failed: " + cuda_error_text(rc), is_sticky(rc));
  }
  for (const auto& launch : plan.launches) {
    if (kernels_.count(launch.name_expression) > 0) continue;
    const auto lowered = compiled.lowered_names.find(launch.name_expression);
    if (lowered == compiled.lowered_names.end()) {
      fail(blame, launch.where + ": kernel '" + launch.name_expression +
                      "' was not found in the compiled source; declare it as a __global__ "
                      "function (extern \"C\" or a template instantiated by the launch)");
    }
    LoadedKernel kernel;
    rc = cuModuleGetFunction(&kernel.function, module_, lowered->second.c_str());
    if (rc != CUDA_SUCCESS) {
      fail(blame, launch.where + ": kernel '" + launch.name_expression +
                      "' is not in the module: " + cuda_error_text(rc));
    }
    for (std::size_t index = 0;; ++index) {
      std::size_t offset = 0;
      std::size_t size = 0;
      if (cuFuncGetParamInfo(kernel.function, index, &offset, &size) != CUDA_SUCCESS) break;
      kernel.param_bytes.push_back(size);
    }
    cuFuncGetAttribute(&kernel.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                       kernel.function);
    cuFuncGetAttribute(&kernel.static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function);
    cuFuncGetAttribute(&kernel.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel.function);
    kernels_.emplace(launch.name_expression, kernel);
  }
  for (const auto& launch : plan.launches) {
    if (auto ok =
            check_kernel_params(launch, kernels_.at(launch.name_expression).param_bytes, context);
        !ok) {
      fail(blame, ok.error().message);
    }
  }
}

}  // namespace crucible::runner::child
