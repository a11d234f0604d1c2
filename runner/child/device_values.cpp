// Input values generated on the GPU: the host side of kernels/runner/device_values.cu.
#include "runner/child/device_values.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "tasks/generators.hpp"

namespace crucible::runner::child {
namespace {

// Stream kinds and element types as the kernel numbers them.
enum Kind : int { kRandn, kUniform, kConstant, kOnes, kZeros, kPositions, kPermutation, kList };
enum Type : int { kBf16, kF16, kF32, kF64, kI8, kU8, kI16, kI32, kI64, kBool, kE4m3, kE5m2 };

// A list generator's values travel by value in the kernel's parameters.
constexpr std::size_t kMaxList = 64;
struct ListValues {
  double values[kMaxList];
};

int type_code(core::DType dtype) {
  switch (dtype) {
    case core::DType::kBF16:
      return kBf16;
    case core::DType::kF16:
      return kF16;
    case core::DType::kF32:
      return kF32;
    case core::DType::kF64:
      return kF64;
    case core::DType::kI8:
      return kI8;
    case core::DType::kU8:
      return kU8;
    case core::DType::kI16:
      return kI16;
    case core::DType::kI32:
      return kI32;
    case core::DType::kI64:
      return kI64;
    case core::DType::kBool:
      return kBool;
    case core::DType::kFP8E4M3:
      return kE4m3;
    case core::DType::kFP8E5M2:
      return kE5m2;
  }
  return -1;
}

int kind_code(const tasks::GeneratorSpec& spec) {
  switch (spec.kind) {
    case tasks::GeneratorKind::kRandn:
      return kRandn;
    case tasks::GeneratorKind::kUniform:
      return kUniform;
    case tasks::GeneratorKind::kConstant:
      return kConstant;
    case tasks::GeneratorKind::kOnes:
      return kOnes;
    case tasks::GeneratorKind::kZeros:
      return kZeros;
    case tasks::GeneratorKind::kPositions:
      return kPositions;
    case tasks::GeneratorKind::kPermutation:
      return kPermutation;
    case tasks::GeneratorKind::kList:
      return spec.list.empty() || spec.list.size() > kMaxList ? -1 : kList;
    case tasks::GeneratorKind::kRouting:
    case tasks::GeneratorKind::kPowerLawOffsets:
    case tasks::GeneratorKind::kZipf:
    case tasks::GeneratorKind::kSurfacePoints:
    case tasks::GeneratorKind::kDetections:
    case tasks::GeneratorKind::kMropePositions:
    case tasks::GeneratorKind::kCaptured:
    case tasks::GeneratorKind::kRopeCache:
      break;
  }
  return -1;
}

}  // namespace

bool generates_on_device(const tasks::GeneratorSpec& spec, core::DType dtype) {
  return type_code(dtype) >= 0 && kind_code(spec) >= 0;
}

void generate_on_device(Device& device, const tasks::GeneratorSpec& spec, core::DType dtype,
                        std::uint64_t seed, std::uint64_t first_index, std::uint64_t count,
                        CUdeviceptr out, Draw draw) {
  if (count == 0) return;
  if (auto status = tasks::check_stream_range(spec, first_index, count); !status) {
    throw CudaFailure(CUDA_ERROR_INVALID_VALUE, status.error().message);
  }
  int kind = kind_code(spec);
  int type = type_code(dtype);
  if (kind < 0 || type < 0) {
    throw CudaFailure(CUDA_ERROR_INVALID_VALUE, "generate_on_device: not a device generator");
  }
  double a = 0.0, b = 0.0;
  long long max = 0;
  ListValues list{};
  unsigned long long list_length = 1;
  switch (spec.kind) {
    case tasks::GeneratorKind::kRandn:
      a = spec.mean, b = spec.std;
      break;
    case tasks::GeneratorKind::kUniform:
      a = spec.lo, b = spec.hi;
      break;
    case tasks::GeneratorKind::kConstant:
      a = spec.value;
      break;
    case tasks::GeneratorKind::kPositions:
      max = spec.max;
      break;
    case tasks::GeneratorKind::kPermutation:
      a = spec.pad, max = spec.max;
      break;
    case tasks::GeneratorKind::kList:
      std::copy(spec.list.begin(), spec.list.end(), list.values);
      list_length = spec.list.size();
      break;
    default:
      break;
  }
  unsigned long long first = first_index, n = count, key_seed = seed;
  int draw_code = draw == Draw::kFast ? 1 : 0;
  void* params[] = {&out, &first, &n,   &kind, &type,        &key_seed,
                    &a,   &b,     &max, &list, &list_length, &draw_code};
  const unsigned int threads = 256;
  const auto blocks = static_cast<unsigned int>(std::min<std::uint64_t>(
      (count + threads - 1) / threads, static_cast<std::uint64_t>(device.sm_count) * 16));
  check(cuLaunchKernel(device.generate_kernel, blocks, 1, 1, threads, 1, 1, 0, device.stream,
                       params, nullptr),
        "crucible_generate");
}

}  // namespace crucible::runner::child
