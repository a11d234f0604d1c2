// Element types of task tensors and scalars, with their sizes and manifest/wire names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace crucible::core {

enum class DType : std::uint8_t {
  kBF16,
  kF16,
  kF32,
  kF64,
  kFP8E4M3,
  kFP8E5M2,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
std::size_t dtype_size(DType dtype);
// Manifest and wire name: "bf16", "f16", "f32", "f64", "fp8_e4m3", "fp8_e5m2", "i8", "u8",
// "i16", "i32", "i64", "bool".
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
// The CUDA C++ type an agent's kernel sees for a pointer to this dtype ("__nv_bfloat16", ...).
std::string_view dtype_cuda_type(DType dtype);
bool dtype_is_floating(DType dtype);

}  // namespace crucible::core
