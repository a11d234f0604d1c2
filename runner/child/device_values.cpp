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
enum Type : int { kBf16, kF16, kF32, kF64, kI8, kU8, kI16, kI32, kI64, kBool };

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
    case core::DType::kFP8E5M2:
      break;
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
    case tasks::GeneratorKind::kCaptured:
    case tasks::GeneratorKind::kRopeCache:
      break;
  }
  return -1;
}

// Every function below is the device twin of one in tasks/random.hpp or tasks/generators.cpp,
// statement for statement: the same operations in the same order, so that each double rounds
// as on the host (the module is compiled with --fmad=false).
const char* const kSource = R"(
typedef unsigned long long crucible_u64;

__device__ __forceinline__ crucible_u64 crucible_splitmix64(crucible_u64 x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
__device__ __forceinline__ crucible_u64 crucible_keyed_bits(crucible_u64 key, crucible_u64 k) {
  return crucible_splitmix64(key ^ (k * 0xD1B54A32D192ED03ULL));
}
__device__ __forceinline__ crucible_u64 crucible_stream_bits(crucible_u64 seed, crucible_u64 k) {
  return crucible_keyed_bits(crucible_splitmix64(seed), k);
}
__device__ __forceinline__ double crucible_unit_double(crucible_u64 bits) {
  return (double)(bits >> 11) * 0x1.0p-53;
}

__device__ crucible_u64 crucible_mix_bits(crucible_u64 x, crucible_u64 seed, unsigned bits) {
  const crucible_u64 mask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1;
  const unsigned shift = bits > 1 ? (bits + 1) / 2 : 1;
  for (crucible_u64 round = 0; round < 4; ++round) {
    const crucible_u64 key = crucible_stream_bits(seed, round);
    x = (x + key) & mask;
    x = (x * (key | 1)) & mask;
    x ^= x >> shift;
  }
  return x;
}

__device__ crucible_u64 crucible_permuted_index(crucible_u64 seed, crucible_u64 index,
                                                crucible_u64 max) {
  unsigned bits = 1;
  while (bits < 64 && (1ULL << bits) < max) ++bits;
  crucible_u64 x = crucible_mix_bits(index, seed, bits);
  while (x >= max) x = crucible_mix_bits(x, seed, bits);
  return x;
}

__device__ double crucible_portable_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -__longlong_as_double(0x7FF0000000000000LL)
                                  : __longlong_as_double(0x7FF8000000000000LL);
  if (isinf(x)) return x;
  int exponent = 0;
  double mantissa = frexp(x, &exponent);
  if (mantissa < 0.70710678118654752440) {
    mantissa *= 2.0;
    --exponent;
  }
  const double s = (mantissa - 1.0) / (mantissa + 1.0);
  const double s2 = s * s;
  double series = 1.0 / 27;
  for (int k = 25; k >= 1; k -= 2) series = 1.0 / k + s2 * series;
  return (double)exponent * 0.6931471805599453094 + 2.0 * s * series;
}

// Element `index` of a randn stream (mean, std): one of the pair (index & ~1, index | 1).
__device__ double crucible_randn(crucible_u64 key, crucible_u64 index, double mean,
                                 double std_dev) {
  const crucible_u64 pair = index >> 1;
  for (crucible_u64 attempt = 0; attempt < 64; ++attempt) {
    const crucible_u64 counter = (pair * 64 + attempt) * 2;
    const double u = 2.0 * crucible_unit_double(crucible_keyed_bits(key, counter)) - 1.0;
    const double v = 2.0 * crucible_unit_double(crucible_keyed_bits(key, counter + 1)) - 1.0;
    const double radius2 = u * u + v * v;
    if (radius2 <= 0.0 || radius2 >= 1.0) continue;
    const double factor = sqrt(-2.0 * crucible_portable_log(radius2) / radius2);
    return (index & 1) == 0 ? mean + std_dev * (u * factor) : mean + std_dev * (v * factor);
  }
  return mean;
}

struct crucible_list { double values[64]; };

__device__ unsigned short crucible_bf16(float value) {
  const unsigned int bits = __float_as_uint(value);
  if (isnan(value)) return (unsigned short)((bits >> 16) | 0x0040);
  const unsigned int rounding = 0x7FFF + ((bits >> 16) & 1);
  return (unsigned short)((bits + rounding) >> 16);
}

__device__ unsigned short crucible_f16(float value) {
  const unsigned int bits = __float_as_uint(value);
  const unsigned short sign = (unsigned short)((bits >> 16) & 0x8000);
  const unsigned int magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return (unsigned short)(sign | 0x7E00);
  if (magnitude >= 0x477FF000) return (unsigned short)(sign | 0x7C00);
  if (magnitude < 0x38800000) {
    if (magnitude < 0x33000000) return sign;
    const unsigned int exponent = magnitude >> 23;
    const unsigned int mantissa = (magnitude & 0x7FFFFF) | 0x800000;
    const unsigned int shift = 126 - exponent;
    unsigned int half = mantissa >> shift;
    const unsigned int rest = mantissa & ((1u << shift) - 1);
    const unsigned int halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1) != 0)) ++half;
    return (unsigned short)(sign | half);
  }
  unsigned int rebased = magnitude - (112u << 23);
  rebased += 0x0FFF + ((rebased >> 13) & 1);
  return (unsigned short)(sign | (rebased >> 13));
}

// clamp_to<T>(value) for a T spanning [lo, hi].
__device__ __forceinline__ double crucible_clamped(double value, double lo, double hi) {
  if (isnan(value)) return 0.0;
  if (value <= lo) return lo;
  if (value >= hi) return hi;
  return value;
}

extern "C" __global__ void crucible_generate(unsigned char* out, crucible_u64 first,
                                             crucible_u64 count, int kind, int type,
                                             crucible_u64 seed, double a, double b,
                                             long long max, crucible_list list,
                                             crucible_u64 list_length) {
  const crucible_u64 key = crucible_splitmix64(seed);
  for (crucible_u64 i = blockIdx.x * (crucible_u64)blockDim.x + threadIdx.x; i < count;
       i += (crucible_u64)gridDim.x * blockDim.x) {
    const crucible_u64 index = first + i;
    double value = 0.0;
    switch (kind) {
      case 0: value = crucible_randn(key, index, a, b); break;
      case 1: value = a + (b - a) * crucible_unit_double(crucible_stream_bits(seed, index)); break;
      case 2: value = a; break;
      case 3: value = 1.0; break;
      case 4: value = 0.0; break;
      case 5: {
        const crucible_u64 m = (crucible_u64)(max > 0 ? max : 1);
        const crucible_u64 start = crucible_stream_bits(seed, ~0ULL) % m;
        value = (double)((start + index % m) % m);
        break;
      }
      case 6:
        if (a > 0.0 &&
            crucible_unit_double(crucible_stream_bits(seed ^ 0x5A17ED0DDBA11ULL, index)) < a) {
          value = -1.0;
        } else {
          value = (double)crucible_permuted_index(seed, index, (crucible_u64)max);
        }
        break;
      default: value = list.values[index % list_length]; break;
    }
    if (type >= 4) {
      // integer_value: a uniform draw floors into [lo, hi); everything else rounds to nearest.
      if (kind == 1) {
        const double floored = floor(value);
        const double top = ceil(b) - 1.0;
        value = floored > top ? top : floored;
      } else {
        value = round(value);
      }
    }
    switch (type) {
      case 0: ((unsigned short*)out)[i] = crucible_bf16((float)value); break;
      case 1: ((unsigned short*)out)[i] = crucible_f16((float)value); break;
      case 2: ((float*)out)[i] = (float)value; break;
      case 3: ((double*)out)[i] = value; break;
      case 4: ((signed char*)out)[i] = (signed char)crucible_clamped(value, -128.0, 127.0); break;
      case 5: out[i] = (unsigned char)crucible_clamped(value, 0.0, 255.0); break;
      case 6: ((short*)out)[i] = (short)crucible_clamped(value, -32768.0, 32767.0); break;
      case 7:
        ((int*)out)[i] = (int)crucible_clamped(value, -2147483648.0, 2147483647.0);
        break;
      case 8: {
        long long v;
        if (isnan(value)) v = 0;
        else if (value <= -9223372036854775808.0) v = (-9223372036854775807LL - 1);
        else if (value >= 9223372036854775807.0) v = 9223372036854775807LL;
        else v = (long long)value;
        ((long long*)out)[i] = v;
        break;
      }
      default: out[i] = value != 0.0 ? 1 : 0; break;
    }
  }
}
)";

}  // namespace

const char* device_values_source() { return kSource; }

bool generates_on_device(const tasks::GeneratorSpec& spec, core::DType dtype) {
  return type_code(dtype) >= 0 && kind_code(spec) >= 0;
}

void generate_on_device(Device& device, const tasks::GeneratorSpec& spec, core::DType dtype,
                        std::uint64_t seed, std::uint64_t first_index, std::uint64_t count,
                        CUdeviceptr out) {
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
  void* params[] = {&out, &first, &n, &kind, &type, &key_seed, &a, &b, &max, &list, &list_length};
  const unsigned int threads = 256;
  const auto blocks = static_cast<unsigned int>(std::min<std::uint64_t>(
      (count + threads - 1) / threads, static_cast<std::uint64_t>(device.sm_count) * 16));
  check(cuLaunchKernel(device.generate_kernel, blocks, 1, 1, threads, 1, 1, 0, device.stream,
                       params, nullptr),
        "crucible_generate");
}

}  // namespace crucible::runner::child
