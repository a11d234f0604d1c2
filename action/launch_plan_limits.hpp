// Launch shapes against the device limits: grid, block, shared memory, cluster and workspace
// checks shared by plan validation (sizes that are already constants) and per-case evaluation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "action/launch_plan.hpp"
#include "core/expr.hpp"
#include "core/result.hpp"

namespace crucible::action::plan_detail {

// "grid" for a shape written as one expression, "grid x" (y, z) for a dim3 or an array.
std::string dim_label(const Dim3Expr& dims, std::string_view base, std::size_t axis);
// The three dimensions when all are constants; nullopt when any uses a symbol.
std::optional<std::array<std::int64_t, 3>> constant_dims(const Dim3Expr& dims);
const core::Expr& axis_expr(const Dim3Expr& dims, std::size_t axis);

// Each check returns kInvalidArgument starting with `where` and ending with `suffix` (the case's
// symbol values, or empty for a constant).
core::Status check_grid(const std::string& where, const Dim3Expr& dims,
                        const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                        const std::string& suffix);
core::Status check_block(const std::string& where, const Dim3Expr& dims,
                         const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                         const std::string& suffix);
core::Status check_smem(const std::string& where, std::int64_t bytes, const PlanLimits& limits,
                        const std::string& suffix);
core::Status check_cluster(const std::string& where, const Dim3Expr& dims,
                           const std::array<std::int64_t, 3>& values, const PlanLimits& limits,
                           const std::string& suffix);
// The bytes of `count` elements of the workspace, checked against the cap on all workspaces.
core::Result<std::int64_t> check_workspace(const Workspace& workspace, std::int64_t count,
                                           const PlanLimits& limits, const std::string& suffix);

// A tensor map's box for the map's element type: every extent 1 to TensorMap::kMaxBox, the
// innermost a multiple of 16 bytes and, with a swizzle, within the swizzle's span.
core::Status check_tensor_map_box(const TensorMap& map, core::DType dtype,
                                  const std::vector<std::int64_t>& box, const std::string& suffix);

// A tensor map for one case: the box, every extent and stride against the TMA's rules, and the
// view within the tensor (`tensor_elements` of the case).
core::Result<ConcreteTensorMap> concrete_tensor_map(const TensorMap& map, core::DType dtype,
                                                    const std::vector<std::int64_t>& dims,
                                                    const std::vector<std::int64_t>& box,
                                                    const std::vector<std::int64_t>& strides,
                                                    std::int64_t tensor_elements,
                                                    const std::string& suffix);

}  // namespace crucible::action::plan_detail
