// Evaluating a validated launch plan for one case: concrete grids, blocks, clusters, shared
// memory and workspace sizes, each checked against the device limits.
#include <map>
#include <string>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/launch_plan_internal.hpp"
#include "action/launch_plan_limits.hpp"
#include "tasks/task.hpp"

namespace crucible::action {

using plan_detail::invalid;

namespace {

using SymbolValues = std::map<std::string, std::int64_t, std::less<>>;

core::Result<std::int64_t> eval_field(const std::string& where, std::string_view label,
                                      const core::Expr& expr, const SymbolValues& values,
                                      const std::string& suffix) {
  auto value = expr.eval(values);
  if (!value) {
    return invalid(where + ": " + std::string(label) + " '" + expr.text() +
                   "': " + value.error().message + suffix);
  }
  return value;
}

core::Result<std::array<std::int64_t, 3>> eval_dims(const std::string& where, std::string_view base,
                                                    const Dim3Expr& dims,
                                                    const SymbolValues& values,
                                                    const std::string& suffix) {
  std::array<std::int64_t, 3> out{};
  const core::Expr* exprs[] = {&dims.x, &dims.y, &dims.z};
  for (std::size_t axis = 0; axis < 3; ++axis) {
    const std::string label =
        dims.is_dim3 ? std::string(base) + " " + "xyz"[axis] : std::string(base);
    auto value = eval_field(where, label, *exprs[axis], values, suffix);
    if (!value) return value.error();
    out[axis] = *value;
  }
  return out;
}

core::Result<std::vector<std::int64_t>> eval_list(const std::string& where,
                                                  const std::string& label,
                                                  const std::vector<core::Expr>& list,
                                                  const SymbolValues& values,
                                                  const std::string& suffix) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto value = eval_field(where, label + "[" + std::to_string(i) + "]", list[i], values, suffix);
    if (!value) return value.error();
    out.push_back(*value);
  }
  return out;
}

// Elements of tensor `index` for the case's symbol values (tasks::element_count); 0 where the
// count does not exist (a negative extent, an overflow), so that no view fits in it.
std::int64_t tensor_elements(const PlanContext& context, std::size_t index,
                             const std::map<std::string, std::int64_t>& symbols) {
  if (index >= context.tensor_shapes.size()) {
    throw core::InternalError("evaluate_plan: the plan context has no tensor shapes");
  }
  tasks::TensorSpec tensor{};
  tensor.name = context.tensors.at(index).first;
  tensor.shape = context.tensor_shapes[index];
  tasks::Case c;
  c.symbols = symbols;
  const auto count = tasks::element_count(tensor, c);
  return count ? *count : 0;
}

std::array<std::uint32_t, 3> narrow(const std::array<std::int64_t, 3>& values) {
  return {static_cast<std::uint32_t>(values[0]), static_cast<std::uint32_t>(values[1]),
          static_cast<std::uint32_t>(values[2])};
}

}  // namespace

core::Result<ConcretePlan> evaluate_plan(const LaunchPlan& plan,
                                         const std::map<std::string, std::int64_t>& symbols,
                                         const PlanContext& context) {
  const PlanLimits& limits = context.limits;
  ConcretePlan out;
  SymbolValues values;
  std::string suffix;
  for (const auto& symbol : context.symbols) {
    const auto found = symbols.find(symbol);
    if (found == symbols.end()) {
      throw core::InternalError("evaluate_plan: no value for shape symbol '" + symbol + "'");
    }
    values.emplace(symbol, found->second);
    out.symbol_values.push_back(found->second);
    suffix += (suffix.empty() ? "" : ", ") + symbol + "=" + std::to_string(found->second);
  }
  const std::string case_values = suffix;
  if (!suffix.empty()) suffix = " (for " + suffix + ")";

  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    const Launch& launch = plan.launches[i];
    if (launch.condition) {
      auto run = eval_field(launch.where, "if condition", *launch.condition, values, suffix);
      if (!run) return run.error();
      if (*run == 0) continue;
    }
    auto grid = eval_dims(launch.where, "grid", launch.grid, values, suffix);
    if (!grid) return grid.error();
    if (auto ok = plan_detail::check_grid(launch.where, launch.grid, *grid, limits, suffix); !ok) {
      return ok.error();
    }
    auto block = eval_dims(launch.where, "block", launch.block, values, suffix);
    if (!block) return block.error();
    if (auto ok = plan_detail::check_block(launch.where, launch.block, *block, limits, suffix);
        !ok) {
      return ok.error();
    }
    auto smem = eval_field(launch.where, "shared memory size", launch.smem_bytes, values, suffix);
    if (!smem) return smem.error();
    if (auto ok = plan_detail::check_smem(launch.where, *smem, limits, suffix); !ok) {
      return ok.error();
    }
    ConcreteLaunch concrete;
    concrete.launch = i;
    concrete.grid = narrow(*grid);
    concrete.block = narrow(*block);
    concrete.smem_bytes = static_cast<std::uint32_t>(*smem);
    if (launch.cluster) {
      const Cluster& cluster = plan.clusters.at(*launch.cluster);
      auto dims = eval_dims(cluster.where, "cluster", cluster.dims, values, suffix);
      if (!dims) return dims.error();
      if (auto ok = plan_detail::check_cluster(cluster.where, cluster.dims, *dims, limits, suffix);
          !ok) {
        return ok.error();
      }
      for (std::size_t axis = 0; axis < 3; ++axis) {
        if ((*grid)[axis] % (*dims)[axis] != 0) {
          const char name = "xyz"[axis];
          return invalid(launch.where + ": grid " + name + " " + std::to_string((*grid)[axis]) +
                         " is not a multiple of cluster " + name + " " +
                         std::to_string((*dims)[axis]) + " (" + cluster.where + ")" + suffix);
        }
      }
      concrete.cluster = narrow(*dims);
      concrete.has_cluster = true;
    }
    out.launches.push_back(concrete);
  }
  if (out.launches.empty()) {
    return invalid("no launch runs for " + (case_values.empty() ? "this case" : case_values) +
                   ": every launch has an if condition that is false; add a launch without a "
                   "condition or widen one");
  }

  std::int64_t total = 0;
  for (const Workspace& workspace : plan.workspaces) {
    auto count = eval_field(workspace.where, "workspace '" + workspace.name + "' count",
                            workspace.count, values, suffix);
    if (!count) return count.error();
    auto bytes = plan_detail::check_workspace(workspace, *count, limits, suffix);
    if (!bytes) return bytes.error();
    total += *bytes;  // each is at most the cap, so the sum of a few cannot overflow
    if (total > limits.max_workspace_bytes) {
      return invalid(workspace.where + ": workspaces need " + std::to_string(total) +
                     " bytes together with '" + workspace.name + "', more than the " +
                     std::to_string(limits.max_workspace_bytes) + "-byte limit" + suffix);
    }
    out.workspace_bytes.push_back(static_cast<std::uint64_t>(*bytes));
  }

  // Only the maps a running launch passes are evaluated (and encoded by the runner): a map for
  // the shapes one launch handles need not be valid where another launch runs instead.
  std::vector<bool> passed(plan.tensor_maps.size(), false);
  for (const ConcreteLaunch& run : out.launches) {
    for (const LaunchArg& arg : plan.launches[run.launch].args) {
      if (arg.kind == ArgKind::kTensorMap) passed.at(arg.index) = true;
    }
  }
  for (std::size_t m = 0; m < plan.tensor_maps.size(); ++m) {
    const TensorMap& map = plan.tensor_maps[m];
    if (!passed[m]) {
      ConcreteTensorMap unused;
      unused.tensor = map.tensor;
      unused.dtype = context.tensors.at(map.tensor).second;
      unused.rank = 0;
      out.tensor_maps.push_back(unused);
      continue;
    }
    const std::string label = "tensor map '" + map.name + "' ";
    auto dims = eval_list(map.where, label + "dims", map.dims, values, suffix);
    if (!dims) return dims.error();
    auto box = eval_list(map.where, label + "box", map.box, values, suffix);
    if (!box) return box.error();
    auto strides = eval_list(map.where, label + "strides", map.strides, values, suffix);
    if (!strides) return strides.error();
    auto concrete = plan_detail::concrete_tensor_map(
        map, context.tensors.at(map.tensor).second, *dims, *box, *strides,
        tensor_elements(context, map.tensor, symbols), suffix);
    if (!concrete) return concrete.error();
    out.tensor_maps.push_back(*concrete);
  }
  return out;
}

}  // namespace crucible::action
