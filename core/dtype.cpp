// DType tables.
#include "core/dtype.hpp"

#include <array>

namespace crucible::core {
namespace {
struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
  std::string_view cuda_type;
  bool floating;
};
constexpr std::array kInfo{
    DTypeInfo{DType::kBF16, 2, "bf16", "__nv_bfloat16", true},
    DTypeInfo{DType::kF16, 2, "f16", "__half", true},
    DTypeInfo{DType::kF32, 4, "f32", "float", true},
    DTypeInfo{DType::kF64, 8, "f64", "double", true},
    DTypeInfo{DType::kFP8E4M3, 1, "fp8_e4m3", "__nv_fp8_e4m3", true},
    DTypeInfo{DType::kFP8E5M2, 1, "fp8_e5m2", "__nv_fp8_e5m2", true},
    DTypeInfo{DType::kI8, 1, "i8", "int8_t", false},
    DTypeInfo{DType::kU8, 1, "u8", "uint8_t", false},
    DTypeInfo{DType::kI16, 2, "i16", "int16_t", false},
    DTypeInfo{DType::kI32, 4, "i32", "int32_t", false},
    DTypeInfo{DType::kI64, 8, "i64", "int64_t", false},
    DTypeInfo{DType::kBool, 1, "bool", "bool", false},
};
const DTypeInfo& info(DType dtype) { return kInfo.at(static_cast<std::size_t>(dtype)); }
}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_cuda_type(DType dtype) { return info(dtype).cuda_type; }
bool dtype_is_floating(DType dtype) { return info(dtype).floating; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kInfo) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

}  // namespace crucible::core
