// Launch shapes against the device limits (launch_plan_limits.hpp).
#include "action/launch_plan_limits.hpp"

#include <limits>

#include "action/launch_plan_internal.hpp"

namespace crucible::action::plan_detail {

std::string dim_label(const Dim3Expr& dims, std::string_view base, std::size_t axis) {
  if (!dims.is_dim3) return std::string(base);
  return std::string(base) + " " + "xyz"[axis];
}

std::optional<std::array<std::int64_t, 3>> constant_dims(const Dim3Expr& dims) {
  const auto x = dims.x.constant_value();
  const auto y = dims.y.constant_value();
  const auto z = dims.z.constant_value();
  if (!x || !y || !z) return std::nullopt;
  return std::array<std::int64_t, 3>{*x, *y, *z};
}

const core::Expr& axis_expr(const Dim3Expr& dims, std::size_t axis) {
  return axis == 0 ? dims.x : axis == 1 ? dims.y : dims.z;
}

namespace {

core::Status check_positive(const std::string& where, const Dim3Expr& dims, std::string_view base,
                            const std::array<std::int64_t, 3>& values, const std::string& suffix) {
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (values[axis] < 1) {
      return invalid(where + ": " + dim_label(dims, base, axis) + " is " +
                     std::to_string(values[axis]) +
                     "; every grid, block and cluster dimension must be at least 1" + suffix);
    }
  }
  return {};
}

std::string spelled_dims(const std::array<std::int64_t, 3>& values) {
  return std::to_string(values[0]) + " x " + std::to_string(values[1]) + " x " +
         std::to_string(values[2]);
}

// Product of three positive values, saturated at int64 max.
std::int64_t product(const std::array<std::int64_t, 3>& values) {
  std::int64_t out = 1;
  for (const auto value : values) {
    if (__builtin_mul_overflow(out, value, &out)) return std::numeric_limits<std::int64_t>::max();
  }
  return out;
}

}  // namespace

core::Status check_grid(const std::string& where, const Dim3Expr& dims,
                        const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                        const std::string& suffix) {
  if (auto ok = check_positive(where, dims, "grid", values, suffix); !ok) return ok;
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (values[axis] > limits.max_grid_dims[axis]) {
      return invalid(where + ": " + dim_label(dims, "grid", axis) + " " +
                     std::to_string(values[axis]) + " exceeds the device limit of " +
                     std::to_string(limits.max_grid_dims[axis]) +
                     (axis == 0 ? "" : "; put the largest dimension in x") + suffix);
    }
  }
  return {};
}

core::Status check_block(const std::string& where, const Dim3Expr& dims,
                         const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                         const std::string& suffix) {
  if (auto ok = check_positive(where, dims, "block", values, suffix); !ok) return ok;
  const std::int64_t threads = product(values);
  if (threads > limits.max_threads_per_block) {
    const std::string size = dims.is_dim3 && threads != std::numeric_limits<std::int64_t>::max()
                                 ? spelled_dims(values) + " = " + std::to_string(threads)
                             : dims.is_dim3 ? spelled_dims(values)
                                            : std::to_string(threads);
    return invalid(where + ": block size " + size + " exceeds the " +
                   std::to_string(limits.max_threads_per_block) + " threads a block may have" +
                   suffix);
  }
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (values[axis] > limits.max_block_dims[axis]) {
      return invalid(where + ": " + dim_label(dims, "block", axis) + " " +
                     std::to_string(values[axis]) + " exceeds the device limit of " +
                     std::to_string(limits.max_block_dims[axis]) + suffix);
    }
  }
  return {};
}

core::Status check_smem(const std::string& where, std::int64_t bytes, const PlanLimits& limits,
                        const std::string& suffix) {
  if (bytes < 0) {
    return invalid(where + ": shared memory size " + std::to_string(bytes) + " is negative" +
                   suffix);
  }
  if (bytes > limits.max_smem_bytes) {
    return invalid(where + ": shared memory size " + std::to_string(bytes) + " bytes exceeds the " +
                   std::to_string(limits.max_smem_bytes) +
                   " bytes of dynamic shared memory a block may use" + suffix);
  }
  return {};
}

core::Status check_cluster(const std::string& where, const Dim3Expr& dims,
                           const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                           const std::string& suffix) {
  if (auto ok = check_positive(where, dims, "cluster", values, suffix); !ok) return ok;
  const std::int64_t blocks = product(values);
  if (blocks > limits.max_cluster_size) {
    return invalid(where + ": cluster " + spelled_dims(values) + " = " + std::to_string(blocks) +
                   " blocks exceeds the " + std::to_string(limits.max_cluster_size) +
                   " blocks a cluster may have" + suffix);
  }
  return {};
}

core::Result<std::int64_t> check_workspace(const Workspace& workspace, std::int64_t count,
                                           const PlanLimits& limits, const std::string& suffix) {
  const std::string head = workspace.where + ": workspace '" + workspace.name + "'";
  if (count < 0) {
    return invalid(head + " count " + std::to_string(count) + " is negative" + suffix);
  }
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<std::int64_t>(workspace.element_bytes), &bytes) ||
      bytes > limits.max_workspace_bytes) {
    return invalid(head + " needs " + std::to_string(count) + " x " +
                   std::to_string(workspace.element_bytes) + " bytes, more than the " +
                   std::to_string(limits.max_workspace_bytes) +
                   " bytes all workspaces together may use" + suffix);
  }
  return bytes;
}

core::Status check_tensor_map_box(const TensorMap& map, core::DType dtype,
                                  const std::vector<std::int64_t>& box, const std::string& suffix) {
  const std::string head = map.where + ": tensor map '" + map.name + "'";
  for (std::size_t i = 0; i < box.size(); ++i) {
    if (box[i] < 1 || box[i] > TensorMap::kMaxBox) {
      return invalid(head + " box[" + std::to_string(i) + "] is " + std::to_string(box[i]) +
                     "; each box extent is 1 to " + std::to_string(TensorMap::kMaxBox) + suffix);
    }
  }
  const auto element = static_cast<std::int64_t>(core::dtype_size(dtype));
  const std::int64_t inner = box.front() * element;
  if (inner % 16 != 0) {
    return invalid(head + " box[0] is " + std::to_string(box.front()) + " elements of " +
                   std::to_string(element) + " bytes = " + std::to_string(inner) +
                   " bytes; the innermost box extent must be a multiple of 16 bytes" + suffix);
  }
  if (map.swizzle != 0 && inner > map.swizzle) {
    return invalid(head + " box[0] is " + std::to_string(inner) + " bytes, more than its " +
                   std::to_string(map.swizzle) +
                   "-byte swizzle span; with a swizzle the innermost box extent is at most the "
                   "span" +
                   suffix);
  }
  return {};
}

core::Result<ConcreteTensorMap> concrete_tensor_map(const TensorMap& map, core::DType dtype,
                                                    const std::vector<std::int64_t>& dims,
                                                    const std::vector<std::int64_t>& box,
                                                    const std::vector<std::int64_t>& strides,
                                                    std::int64_t tensor_elements,
                                                    const std::string& suffix) {
  const std::string head = map.where + ": tensor map '" + map.name + "'";
  if (auto ok = check_tensor_map_box(map, dtype, box, suffix); !ok) return ok.error();
  ConcreteTensorMap out;
  out.tensor = map.tensor;
  out.dtype = dtype;
  out.rank = static_cast<std::uint32_t>(dims.size());
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 32;
  constexpr std::int64_t kMaxStrideBytes = std::int64_t{1} << 40;
  const auto element = static_cast<std::int64_t>(core::dtype_size(dtype));
  // The element stride of each dimension: 1, then the given strides or the packed ones.
  std::vector<std::int64_t> element_strides{1};
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1 || dims[i] > kMaxDim) {
      return invalid(head + " dims[" + std::to_string(i) + "] is " + std::to_string(dims[i]) +
                     "; each extent is 1 to 2^32" + suffix);
    }
    out.dims[i] = static_cast<std::uint64_t>(dims[i]);
    out.box[i] = static_cast<std::uint32_t>(box[i]);
    if (i == 0) continue;
    std::int64_t stride = 0;
    if (!strides.empty()) {
      stride = strides[i - 1];
    } else if (__builtin_mul_overflow(element_strides[i - 1], dims[i - 1], &stride)) {
      stride = kMaxStrideBytes;  // reported as too large below
    }
    std::int64_t bytes = 0;
    std::string problem;
    if (stride < 1) {
      problem = "not positive";
    } else if (__builtin_mul_overflow(stride, element, &bytes) || bytes >= kMaxStrideBytes) {
      problem = "2^40 bytes or more";
    } else if (bytes % 16 != 0) {
      problem = std::to_string(bytes) + " bytes, not a multiple of 16";
    }
    if (!problem.empty()) {
      return invalid(head + " stride of dimension " + std::to_string(i) + " is " +
                     std::to_string(stride) + " elements (" + problem +
                     "); each stride is a positive multiple of 16 bytes below 2^40 bytes" +
                     (strides.empty() ? " (this is the packed stride over dims; give "
                                        "strides(...) for a padded or strided view)"
                                      : "") +
                     suffix);
    }
    element_strides.push_back(stride);
    out.stride_bytes[i - 1] = static_cast<std::uint64_t>(bytes);
  }
  // The view reaches element 1 + sum (dims[i] - 1) * stride[i] of the tensor.
  std::int64_t reach = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    std::int64_t term = 0;
    overflow = overflow || __builtin_mul_overflow(dims[i] - 1, element_strides[i], &term) ||
               __builtin_add_overflow(reach, term, &reach);
  }
  if (overflow || reach > tensor_elements) {
    return invalid(
        head + " reaches " + (overflow ? std::string("more than 2^63") : std::to_string(reach)) +
        " elements of '" + map.tensor_name + "', which has " + std::to_string(tensor_elements) +
        "; the view (dims and strides) must lie inside the tensor" + suffix);
  }
  out.swizzle = map.swizzle;
  return out;
}

}  // namespace crucible::action::plan_detail
