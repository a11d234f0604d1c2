// The CUDA driver's launch configuration for one concrete launch of a plan. Header-only, so the
// runner and the GPU tests (which load the driver at run time) build it the same way.
#pragma once

#include <cuda.h>

#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"

namespace crucible::runner::child {

// Grid, block, dynamic shared memory and stream of `step`; when the plan declares a cluster,
// its shape goes in `attribute`, which the configuration points to (it must outlive the
// launch).
inline CUlaunchConfig launch_config(const action::ConcreteLaunch& step, CUstream stream,
                                    CUlaunchAttribute& attribute) {
  CUlaunchConfig config{};
  config.gridDimX = step.grid[0];
  config.gridDimY = step.grid[1];
  config.gridDimZ = step.grid[2];
  config.blockDimX = step.block[0];
  config.blockDimY = step.block[1];
  config.blockDimZ = step.block[2];
  config.sharedMemBytes = step.smem_bytes;
  config.hStream = stream;
  attribute = CUlaunchAttribute{};
  if (step.has_cluster) {
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = step.cluster[0];
    attribute.value.clusterDim.y = step.cluster[1];
    attribute.value.clusterDim.z = step.cluster[2];
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return config;
}

// Launches `function` with `step`'s configuration and the packed parameters on `stream`,
// allowing a non-portable cluster size where the plan asks for more than 8 blocks a cluster.
inline CUresult launch_packed(CUfunction function, const action::ConcreteLaunch& step,
                              std::vector<action::ParamBytes>& packed, CUstream stream) {
  std::vector<void*> params(packed.size());
  for (std::size_t a = 0; a < params.size(); ++a) params[a] = packed[a].data();
  CUlaunchAttribute attribute{};
  const CUlaunchConfig config = launch_config(step, stream, attribute);
  if (step.has_cluster && step.cluster[0] * step.cluster[1] * step.cluster[2] > 8) {
    cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
  }
  return cuLaunchKernelEx(&config, function, params.data(), nullptr);
}

}  // namespace crucible::runner::child
