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

}  // namespace crucible::action::plan_detail
