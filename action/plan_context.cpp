// make_plan_context.
#include "action/plan_context.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace crucible::action {

PlanContext make_plan_context(const tasks::Task& task, std::int64_t max_smem_bytes) {
  PlanContext context;
  for (const auto& tensor : task.tensors) {
    context.tensors.emplace_back(tensor.name, tensor.dtype);
    context.tensor_shapes.push_back(tensor.shape);
  }
  for (const auto& scalar : task.scalars) context.scalars.emplace_back(scalar.name, scalar.dtype);
  context.symbols = task.symbols;
  if (max_smem_bytes > 0) context.limits.max_smem_bytes = max_smem_bytes;
  return context;
}

namespace {

ParamBytes scalar_bytes(core::DType dtype, double value) {
  ParamBytes out{};
  switch (dtype) {
    case core::DType::kF32: {
      const auto v = static_cast<float>(value);
      std::memcpy(out.data(), &v, sizeof v);
      break;
    }
    case core::DType::kF64:
      std::memcpy(out.data(), &value, sizeof value);
      break;
    case core::DType::kI32: {
      const auto v = static_cast<std::int32_t>(value);
      std::memcpy(out.data(), &v, sizeof v);
      break;
    }
    case core::DType::kI64: {
      const auto v = static_cast<std::int64_t>(value);
      std::memcpy(out.data(), &v, sizeof v);
      break;
    }
    default:
      throw std::logic_error("scalar dtype without an encoding");
  }
  return out;
}

ParamBytes address_bytes(DeviceAddress address) {
  ParamBytes out{};
  std::memcpy(out.data(), &address, sizeof address);
  return out;
}

}  // namespace

core::Result<std::vector<ParamBytes>> pack_launch_args(
    const Launch& launch, const tasks::Task& task, const tasks::Case& c,
    const std::vector<std::size_t>& param_bytes, const std::vector<DeviceAddress>& tensors,
    const std::vector<DeviceAddress>& workspaces) {
  std::vector<ParamBytes> params(launch.args.size());
  for (std::size_t a = 0; a < launch.args.size(); ++a) {
    const LaunchArg& arg = launch.args[a];
    switch (arg.kind) {
      case ArgKind::kTensor:
        params[a] = address_bytes(tensors.at(arg.index));
        break;
      case ArgKind::kWorkspace:
        params[a] = address_bytes(workspaces.at(arg.index));
        break;
      case ArgKind::kScalar: {
        const auto& scalar = task.scalars.at(arg.index);
        params[a] = scalar_bytes(scalar.dtype, c.scalars.at(scalar.name));
        break;
      }
      case ArgKind::kSymbol: {
        const auto value = c.symbols.at(task.symbols.at(arg.index));
        auto encoded = encode_symbol_arg(launch, a, value, param_bytes.at(a));
        if (!encoded) return encoded.error();
        std::memcpy(params[a].data(), encoded->data(), std::min<std::size_t>(encoded->size(), 8));
        break;
      }
      case ArgKind::kTensorMap:
        break;  // 128 bytes: the runner passes the case's encoded map (launch_config.hpp)
    }
  }
  return params;
}

}  // namespace crucible::action
