// Launch-plan validation against a task and device: argument names resolved, expressions
// checked for symbols, clusters matched to kernels, sizes that are already constants checked.
#include <algorithm>
#include <map>

#include "action/launch_plan_internal.hpp"
#include "action/launch_plan_limits.hpp"

namespace crucible::action::plan_detail {

namespace {

enum class NameKind { kTensor, kScalar, kSymbol, kWorkspace, kTensorMap };

std::string_view kind_word(NameKind kind) {
  switch (kind) {
    case NameKind::kTensor:
      return "tensor";
    case NameKind::kScalar:
      return "scalar";
    case NameKind::kSymbol:
      return "shape symbol";
    case NameKind::kWorkspace:
      return "workspace";
    case NameKind::kTensorMap:
      return "tensor map";
  }
  return "name";
}

class Names {
 public:
  Names(const PlanContext& context, const LaunchPlan& plan) : context_(context) {
    for (std::size_t i = 0; i < context.tensors.size(); ++i) {
      add(context.tensors[i].first, NameKind::kTensor, i);
    }
    for (std::size_t i = 0; i < context.scalars.size(); ++i) {
      add(context.scalars[i].first, NameKind::kScalar, i);
    }
    for (std::size_t i = 0; i < context.symbols.size(); ++i) {
      add(context.symbols[i], NameKind::kSymbol, i);
    }
    for (std::size_t i = 0; i < plan.workspaces.size(); ++i) {
      add(plan.workspaces[i].name, NameKind::kWorkspace, i);
      workspaces_.push_back(plan.workspaces[i].name);
    }
    for (std::size_t i = 0; i < plan.tensor_maps.size(); ++i) {
      add(plan.tensor_maps[i].name, NameKind::kTensorMap, i);
      tensor_maps_.push_back(plan.tensor_maps[i].name);
    }
  }

  struct Entry {
    NameKind kind;
    std::size_t index;
  };
  std::optional<Entry> find(const std::string& name) const {
    const auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  std::string listing() const {
    std::vector<std::string> tensors;
    std::vector<std::string> scalars;
    for (const auto& [name, dtype] : context_.tensors) tensors.push_back(name);
    for (const auto& [name, dtype] : context_.scalars) scalars.push_back(name);
    std::string out = "the task's tensors are " + join(tensors) + "; scalars: " + join(scalars) +
                      "; symbols: " + join(context_.symbols);
    if (!workspaces_.empty()) out += "; workspaces: " + join(workspaces_);
    if (!tensor_maps_.empty()) out += "; tensor maps: " + join(tensor_maps_);
    return out;
  }

  // Every symbol of `expr` must be a shape symbol of the task.
  core::Status check_expr(const std::string& where, std::string_view label,
                          const core::Expr& expr) const {
    for (const auto& symbol : expr.symbols()) {
      const auto entry = find(symbol);
      if (entry && entry->kind == NameKind::kSymbol) continue;
      if (entry) {
        return invalid(where + ": " + std::string(label) + " uses '" + symbol + "', which is a " +
                       std::string(kind_word(entry->kind)) +
                       "; sizes and conditions may use only the shape symbols " +
                       join(context_.symbols));
      }
      std::string message = where + ": unknown symbol '" + symbol + "' in " + std::string(label) +
                            "; the task's shape symbols are " + join(context_.symbols);
      if (const auto suggestion = closest(symbol, context_.symbols)) {
        message += "; did you mean '" + *suggestion + "'?";
      }
      return invalid(message);
    }
    return {};
  }

 private:
  void add(const std::string& name, NameKind kind, std::size_t index) {
    entries_.emplace(name, Entry{kind, index});  // the first meaning of a name wins
  }

  const PlanContext& context_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> workspaces_;
  std::vector<std::string> tensor_maps_;
};

core::Status check_dims_symbols(const Names& names, const std::string& where, std::string_view base,
                                const Dim3Expr& dims) {
  for (std::size_t axis = 0; axis < 3; ++axis) {
    if (auto ok = names.check_expr(where, dim_label(dims, base, axis), axis_expr(dims, axis));
        !ok) {
      return ok;
    }
  }
  return {};
}

// Resolves the tensor a map views and checks what is known before any case: its rank, the
// symbols of its expressions, and the box when all its extents are constants.
core::Status check_tensor_map(const Names& names, const PlanContext& context, TensorMap& map) {
  const std::string head = map.where + ": tensor map '" + map.name + "'";
  const auto entry = names.find(map.tensor_name);
  if (!entry || entry->kind != NameKind::kTensor) {
    std::vector<std::string> tensors;
    for (const auto& [name, dtype] : context.tensors) tensors.push_back(name);
    std::string message = head + " views '" + map.tensor_name +
                          "', which is not a tensor of the task; the tensors are " + join(tensors);
    if (const auto suggestion = closest(map.tensor_name, tensors)) {
      message += "; did you mean '" + *suggestion + "'?";
    }
    return invalid(message);
  }
  map.tensor = entry->index;
  const std::size_t rank = map.dims.size();
  if (rank == 0 || rank > TensorMap::kMaxRank) {
    return invalid(head + " has " + std::to_string(rank) + " dimensions; it takes 1 to " +
                   std::to_string(TensorMap::kMaxRank));
  }
  if (map.box.size() != rank) {
    return invalid(head + " has " + std::to_string(rank) + " dims but " +
                   std::to_string(map.box.size()) + " box extents; give one per dimension");
  }
  if (!map.strides.empty() && map.strides.size() != rank - 1) {
    return invalid(head + " has " + std::to_string(rank) + " dims and " +
                   std::to_string(map.strides.size()) +
                   " strides; give one per dimension after the first (the first is 1 element), "
                   "or none for a packed view");
  }
  const auto list_check = [&](const std::vector<core::Expr>& list,
                              std::string_view label) -> core::Status {
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string field =
          "tensor map '" + map.name + "' " + std::string(label) + "[" + std::to_string(i) + "]";
      if (auto ok = names.check_expr(map.where, field, list[i]); !ok) return ok;
    }
    return {};
  };
  if (auto ok = list_check(map.dims, "dims"); !ok) return ok;
  if (auto ok = list_check(map.box, "box"); !ok) return ok;
  if (auto ok = list_check(map.strides, "strides"); !ok) return ok;
  std::vector<std::int64_t> box;
  for (const auto& extent : map.box) {
    const auto value = extent.constant_value();
    if (!value) return {};
    box.push_back(*value);
  }
  return check_tensor_map_box(map, context.tensors.at(map.tensor).second, box, "");
}

std::string no_launch_message(const PlanContext& context, bool from_directives) {
  std::vector<std::string> tensors;
  for (const auto& [name, dtype] : context.tensors) tensors.push_back(name);
  const std::string grid = context.symbols.empty() ? "1" : context.symbols.front();
  const std::string args = tensors.empty() ? "" : join(tensors);
  if (from_directives) {
    return "no @launch directive found: declare at least one launch, e.g. // @launch my_kernel<<<" +
           grid + ", 256>>>(" + args + ")";
  }
  return "the plan has no launches: give at least one, e.g. {\"kernel\": \"my_kernel\", "
         "\"grid\": \"" +
         grid + "\", \"block\": 256, \"args\": [" +
         [&] {
           std::string quoted;
           for (const auto& name : tensors)
             quoted += (quoted.empty() ? "\"" : ", \"") + name + "\"";
           return quoted;
         }() +
         "]}";
}

}  // namespace

core::Result<LaunchPlan> finish_plan(LaunchPlan plan, const PlanContext& context,
                                     bool from_directives) {
  const PlanLimits& limits = context.limits;
  if (plan.launches.empty()) return invalid(no_launch_message(context, from_directives));
  if (plan.launches.size() > limits.max_launches) {
    const auto& extra = plan.launches[limits.max_launches];
    return invalid(extra.where + ": launch " + std::to_string(limits.max_launches + 1) +
                   " is one too many; a plan may have at most " +
                   std::to_string(limits.max_launches) +
                   " launches (do more work per kernel, or loop inside one)");
  }
  if (plan.workspaces.size() > limits.max_workspaces) {
    const auto& extra = plan.workspaces[limits.max_workspaces];
    return invalid(extra.where + ": workspace " + std::to_string(limits.max_workspaces + 1) +
                   " is one too many; a plan may have at most " +
                   std::to_string(limits.max_workspaces) + " workspaces");
  }

  if (plan.tensor_maps.size() > limits.max_tensor_maps) {
    const auto& extra = plan.tensor_maps[limits.max_tensor_maps];
    return invalid(extra.where + ": tensor map " + std::to_string(limits.max_tensor_maps + 1) +
                   " is one too many; a plan may have at most " +
                   std::to_string(limits.max_tensor_maps) + " tensor maps");
  }

  // Workspace and tensor map names: fresh identifiers, each declared once.
  {
    struct Declared {
      std::string_view what;
      const std::string& name;
      const std::string& where;
    };
    std::vector<Declared> declared;
    for (const Workspace& workspace : plan.workspaces) {
      declared.push_back({"workspace", workspace.name, workspace.where});
    }
    for (const TensorMap& map : plan.tensor_maps) {
      declared.push_back({"tensor map", map.name, map.where});
    }
    const Names context_names(context, LaunchPlan{});
    for (std::size_t i = 0; i < declared.size(); ++i) {
      const Declared& item = declared[i];
      const std::string head = item.where + ": " + std::string(item.what) + " '" + item.name + "'";
      if (!is_identifier(item.name)) {
        return invalid(item.where + ": " + std::string(item.what) + " name '" + item.name +
                       "' is not an identifier");
      }
      if (const auto entry = context_names.find(item.name)) {
        return invalid(head + " has the same name as the task's " +
                       std::string(kind_word(entry->kind)) + "; pick another name");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (declared[j].name == item.name) {
          return invalid(head +
                         (declared[j].what == item.what
                              ? " is declared twice (first at " + declared[j].where + ")"
                              : " has the same name as the " + std::string(declared[j].what) +
                                    " at " + declared[j].where));
        }
      }
    }
  }

  const Names names(context, plan);
  for (Launch& launch : plan.launches) {
    if (launch.condition) {
      if (auto ok = names.check_expr(launch.where, "if condition", *launch.condition); !ok) {
        return ok.error();
      }
    }
    if (auto ok = check_dims_symbols(names, launch.where, "grid", launch.grid); !ok) {
      return ok.error();
    }
    if (auto ok = check_dims_symbols(names, launch.where, "block", launch.block); !ok) {
      return ok.error();
    }
    if (auto ok = names.check_expr(launch.where, "shared memory size", launch.smem_bytes); !ok) {
      return ok.error();
    }
    if (launch.args.size() > limits.max_args) {
      return invalid(launch.where + ": " + std::to_string(launch.args.size()) +
                     " arguments; a launch may pass at most " + std::to_string(limits.max_args));
    }
    for (LaunchArg& arg : launch.args) {
      const auto entry = names.find(arg.name);
      if (!entry) {
        return invalid(launch.where + ": unknown argument '" + arg.name + "'; " + names.listing());
      }
      arg.index = entry->index;
      switch (entry->kind) {
        case NameKind::kTensor:
          arg.kind = ArgKind::kTensor;
          break;
        case NameKind::kScalar:
          arg.kind = ArgKind::kScalar;
          break;
        case NameKind::kSymbol:
          arg.kind = ArgKind::kSymbol;
          break;
        case NameKind::kWorkspace:
          arg.kind = ArgKind::kWorkspace;
          break;
        case NameKind::kTensorMap:
          arg.kind = ArgKind::kTensorMap;
          break;
      }
    }
    // Sizes that are already constants fail now, before anything compiles.
    if (const auto grid = constant_dims(launch.grid)) {
      if (auto ok = check_grid(launch.where, launch.grid, *grid, limits, ""); !ok) {
        return ok.error();
      }
    }
    if (const auto block = constant_dims(launch.block)) {
      if (auto ok = check_block(launch.where, launch.block, *block, limits, ""); !ok) {
        return ok.error();
      }
    }
    if (const auto smem = launch.smem_bytes.constant_value()) {
      if (auto ok = check_smem(launch.where, *smem, limits, ""); !ok) return ok.error();
    }
  }

  for (const Workspace& workspace : plan.workspaces) {
    if (auto ok = names.check_expr(workspace.where, "workspace '" + workspace.name + "' count",
                                   workspace.count);
        !ok) {
      return ok.error();
    }
    if (const auto count = workspace.count.constant_value()) {
      if (auto bytes = check_workspace(workspace, *count, limits, ""); !bytes) {
        return bytes.error();
      }
    }
  }

  for (TensorMap& map : plan.tensor_maps) {
    if (auto ok = check_tensor_map(names, context, map); !ok) return ok.error();
  }

  for (std::size_t c = 0; c < plan.clusters.size(); ++c) {
    const Cluster& cluster = plan.clusters[c];
    if (auto ok = check_dims_symbols(names, cluster.where, "cluster", cluster.dims); !ok) {
      return ok.error();
    }
    if (const auto dims = constant_dims(cluster.dims)) {
      if (auto ok = check_cluster(cluster.where, cluster.dims, *dims, limits, ""); !ok) {
        return ok.error();
      }
    }
    const std::string wanted = without_spaces(cluster.kernel);
    bool matched = false;
    for (Launch& launch : plan.launches) {
      if (launch.kernel != wanted && without_spaces(launch.name_expression) != wanted) continue;
      matched = true;
      if (launch.cluster && *launch.cluster != c) {
        return invalid(cluster.where + ": kernel '" + cluster.kernel +
                       "' already has a cluster shape (" + plan.clusters[*launch.cluster].where +
                       ")");
      }
      launch.cluster = c;
    }
    if (!matched) {
      std::vector<std::string> kernels;
      for (const Launch& launch : plan.launches) {
        if (std::find(kernels.begin(), kernels.end(), launch.name_expression) == kernels.end()) {
          kernels.push_back(launch.name_expression);
        }
      }
      return invalid(cluster.where + ": the cluster shape names kernel '" + cluster.kernel +
                     "', which no launch runs; the launched kernels are " + join(kernels));
    }
  }
  return plan;
}

}  // namespace crucible::action::plan_detail
