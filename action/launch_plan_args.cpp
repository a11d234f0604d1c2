// Kernel arguments of a launch: parameter sizes checked against the plan's arguments, and shape
// symbols encoded in the width the kernel declares.
#include <cstring>
#include <limits>

#include "action/launch_plan.hpp"
#include "action/launch_plan_internal.hpp"

namespace crucible::action {

using plan_detail::invalid;

core::Status check_kernel_params(const Launch& launch, const std::vector<std::size_t>& param_bytes,
                                 const PlanContext& context) {
  std::vector<std::string> arg_names;
  for (const auto& arg : launch.args) arg_names.push_back(arg.name);
  if (param_bytes.size() != launch.args.size()) {
    return invalid(launch.where + ": kernel '" + launch.name_expression + "' takes " +
                   std::to_string(param_bytes.size()) + " parameters but the launch passes " +
                   std::to_string(launch.args.size()) + " arguments (" +
                   (arg_names.empty() ? std::string("none") : plan_detail::join(arg_names)) + ")");
  }
  for (std::size_t i = 0; i < launch.args.size(); ++i) {
    const LaunchArg& arg = launch.args[i];
    const std::size_t got = param_bytes[i];
    const std::string head =
        launch.where + ": argument " + std::to_string(i + 1) + " '" + arg.name + "' is ";
    const std::string tail = " but parameter " + std::to_string(i + 1) + " of '" +
                             launch.name_expression + "' is " + std::to_string(got) + " bytes";
    switch (arg.kind) {
      case ArgKind::kTensor:
      case ArgKind::kWorkspace:
        if (got != sizeof(void*)) {
          const std::string fix =
              arg.kind == ArgKind::kTensor
                  ? std::string(core::dtype_cuda_type(context.tensors.at(arg.index).second)) + "*"
                  : std::string("a pointer to its element type");
          return invalid(head + "a device pointer (8 bytes)" + tail + "; declare it as " + fix);
        }
        break;
      case ArgKind::kScalar: {
        const core::DType dtype = context.scalars.at(arg.index).second;
        if (got != core::dtype_size(dtype)) {
          const std::string type(core::dtype_cuda_type(dtype));
          return invalid(head + "a " + std::string(core::dtype_name(dtype)) + " scalar passed as " +
                         type + " (" + std::to_string(core::dtype_size(dtype)) + " bytes)" + tail +
                         "; declare it as " + type);
        }
        break;
      }
      case ArgKind::kSymbol:
        if (got != 4 && got != 8) {
          return invalid(head + "a shape symbol passed as int (4 bytes) or int64_t (8 bytes)" +
                         tail + "; declare it as int or int64_t");
        }
        break;
      case ArgKind::kTensorMap:
        if (got != kTensorMapBytes) {
          return invalid(head + "a tensor map (" + std::to_string(kTensorMapBytes) + " bytes)" +
                         tail + "; declare it as const __grid_constant__ CUtensorMap");
        }
        break;
    }
  }
  return {};
}

core::Result<std::vector<std::byte>> encode_symbol_arg(const Launch& launch, std::size_t arg,
                                                       std::int64_t value,
                                                       std::size_t param_bytes) {
  if (arg >= launch.args.size() || launch.args[arg].kind != ArgKind::kSymbol) {
    throw core::InternalError("encode_symbol_arg: argument is not a shape symbol");
  }
  std::vector<std::byte> out(param_bytes);
  if (param_bytes == 8) {
    std::memcpy(out.data(), &value, sizeof(value));
    return out;
  }
  if (param_bytes != 4) {
    throw core::InternalError("encode_symbol_arg: parameter size not checked");
  }
  if (value < std::numeric_limits<std::int32_t>::min() ||
      value > std::numeric_limits<std::int32_t>::max()) {
    return invalid(launch.where + ": shape symbol '" + launch.args[arg].name + "' = " +
                   std::to_string(value) + " does not fit parameter " + std::to_string(arg + 1) +
                   " of '" + launch.name_expression + "', a 4-byte int; declare it as int64_t");
  }
  const auto narrow_value = static_cast<std::int32_t>(value);
  std::memcpy(out.data(), &narrow_value, sizeof(narrow_value));
  return out;
}

}  // namespace crucible::action
