// The CUDA driver's launch configuration, parameters and tensor maps for one concrete launch of
// a plan. Header-only, so the runner and the GPU tests (which load the driver at run time) build
// them the same way.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
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

// The TMA's element type for a tensor's dtype: fp8, bool and the 8-bit integers travel as bytes.
inline CUtensorMapDataType tensor_map_data_type(core::DType dtype) {
  switch (dtype) {
    case core::DType::kBF16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case core::DType::kF16:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case core::DType::kF32:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case core::DType::kF64:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case core::DType::kI16:
      return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case core::DType::kI32:
      return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case core::DType::kI64:
      return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case core::DType::kFP8E4M3:
    case core::DType::kFP8E5M2:
    case core::DType::kI8:
    case core::DType::kU8:
    case core::DType::kBool:
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

inline CUtensorMapSwizzle tensor_map_swizzle(std::uint32_t bytes) {
  switch (bytes) {
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

static_assert(sizeof(CUtensorMap) == action::kTensorMapBytes, "a tensor map is 128 bytes");

// Encodes the tensor maps of one call over the call's tensor addresses into `out` (one per
// plan tensor map; those of rank 0, which no launch of the call passes, stay zero) with
// `encode`: cuTensorMapEncodeTiled, or the same entry point loaded at run time. Boxes are dense
// (element strides 1), elements outside the view read as zero, and L2 promotion is 128 bytes. On a
// failure `failed` holds the index of the map the driver refused.
template <class Encode>
CUresult encode_tensor_maps(const std::vector<action::ConcreteTensorMap>& maps,
                            const std::vector<CUdeviceptr>& tensors, std::vector<CUtensorMap>& out,
                            Encode encode, std::size_t* failed = nullptr) {
  out.assign(maps.size(), CUtensorMap{});
  for (std::size_t m = 0; m < maps.size(); ++m) {
    const action::ConcreteTensorMap& map = maps[m];
    if (map.rank == 0) continue;  // no launch of the call passes it
    const cuuint32_t element_strides[action::TensorMap::kMaxRank] = {1, 1, 1, 1, 1};
    const CUresult rc =
        encode(&out[m], tensor_map_data_type(map.dtype), map.rank,
               reinterpret_cast<void*>(static_cast<std::uintptr_t>(tensors.at(map.tensor))),
               map.dims.data(), map.stride_bytes.data(), map.box.data(), element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, tensor_map_swizzle(map.swizzle),
               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) {
      if (failed != nullptr) *failed = m;
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

// The kernel parameter pointers of `launch`: each packed slot, or the call's encoded map for a
// tensor-map argument.
inline std::vector<void*> param_pointers(const action::Launch& launch,
                                         std::vector<action::ParamBytes>& packed,
                                         std::vector<CUtensorMap>& maps) {
  std::vector<void*> params(packed.size());
  for (std::size_t a = 0; a < params.size(); ++a) {
    const action::LaunchArg& arg = launch.args.at(a);
    params[a] = arg.kind == action::ArgKind::kTensorMap ? static_cast<void*>(&maps.at(arg.index))
                                                        : static_cast<void*>(packed[a].data());
  }
  return params;
}

// Launches `function` with `step`'s configuration and the packed parameters (and the call's
// tensor maps) on `stream`, allowing a non-portable cluster size where the plan asks for more
// than 8 blocks a cluster.
inline CUresult launch_packed(CUfunction function, const action::Launch& launch,
                              const action::ConcreteLaunch& step,
                              std::vector<action::ParamBytes>& packed,
                              std::vector<CUtensorMap>& maps, CUstream stream) {
  std::vector<void*> params = param_pointers(launch, packed, maps);
  CUlaunchAttribute attribute{};
  const CUlaunchConfig config = launch_config(step, stream, attribute);
  if (step.has_cluster && step.cluster[0] * step.cluster[1] * step.cluster[2] > 8) {
    cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
  }
  return cuLaunchKernelEx(&config, function, params.data(), nullptr);
}

}  // namespace crucible::runner::child
