// The structured form of a launch plan: the `plan` field of step/score, read into a LaunchPlan.
#include <algorithm>
#include <limits>

#include "action/launch_plan.hpp"
#include "action/launch_plan_internal.hpp"
#include "core/protocol.hpp"
#include "core/text.hpp"

namespace crucible::action {

namespace {

using core::Value;
using plan_detail::invalid;

std::string type_of(const Value& value) { return std::string(core::value_type_name(value)); }

// Rejects keys outside `known`, suggesting the closest one.
core::Status check_keys(const std::string& where, const Value& map,
                        const std::vector<std::string>& known) {
  for (const auto& item : map.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string message = where + ": unknown field '" + core::excerpt(key, 64) + "'";
    if (const auto suggestion = plan_detail::closest(key, known)) {
      return invalid(message + "; did you mean '" + *suggestion + "'?");
    }
    return invalid(message + "; the fields are " + plan_detail::join(known));
  }
  return {};
}

const Value* find(const Value& map, std::string_view key) {
  const auto it = map.find(key);
  return it == map.end() ? nullptr : &*it;
}

core::Result<std::string> string_field(const std::string& where, const Value& map,
                                       std::string_view key, std::size_t max_bytes, bool required) {
  const Value* field = find(map, key);
  if (field == nullptr) {
    if (!required) return std::string();
    return invalid(where + ": missing field '" + std::string(key) + "'");
  }
  if (!field->is_string()) {
    return invalid(where + ": '" + std::string(key) + "' must be a string, got " + type_of(*field));
  }
  const auto& text = field->get_ref<const std::string&>();
  if (text.size() > max_bytes) {
    return invalid(where + ": '" + std::string(key) + "' is " + std::to_string(text.size()) +
                   " bytes; the limit is " + std::to_string(max_bytes));
  }
  return text;
}

core::Result<core::Expr> expr_value(const std::string& where, const std::string& label,
                                    const Value& value, bool allow_bool) {
  if (value.is_string()) {
    return plan_detail::parse_field(where, label, value.get_ref<const std::string&>());
  }
  if (value.is_number_unsigned()) {
    const auto number = value.get<std::uint64_t>();
    if (number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return invalid(where + ": " + label + " " + std::to_string(number) +
                     " does not fit in a signed 64-bit integer");
    }
    return core::Expr::constant(static_cast<std::int64_t>(number));
  }
  if (value.is_number_integer()) return core::Expr::constant(value.get<std::int64_t>());
  if (allow_bool && value.is_boolean()) return core::Expr::constant(value.get<bool>() ? 1 : 0);
  return invalid(where + ": " + label + " must be an expression string or an integer, got " +
                 type_of(value));
}

core::Result<Dim3Expr> dims_value(const std::string& where, const std::string& base,
                                  const Value& value, bool always_dim3) {
  Dim3Expr dims;
  dims.y = core::Expr::constant(1);
  dims.z = core::Expr::constant(1);
  if (!value.is_array()) {
    auto expr = expr_value(where, base, value, false);
    if (!expr) return expr.error();
    dims.x = std::move(expr).value();
    dims.is_dim3 = always_dim3;
    return dims;
  }
  if (value.empty() || value.size() > 3) {
    return invalid(where + ": " + base + " must have 1 to 3 values (x, y, z), got " +
                   std::to_string(value.size()));
  }
  dims.is_dim3 = true;
  core::Expr* axes[] = {&dims.x, &dims.y, &dims.z};
  for (std::size_t axis = 0; axis < value.size(); ++axis) {
    auto expr = expr_value(where, base + " " + "xyz"[axis], value[axis], false);
    if (!expr) return expr.error();
    *axes[axis] = std::move(expr).value();
  }
  return dims;
}

const std::vector<std::string> kPlanKeys = {"launches", "workspaces", "clusters", "tensor_maps"};
const std::vector<std::string> kLaunchKeys = {"kernel", "template_args", "grid", "block",
                                              "smem",   "args",          "if"};
const std::vector<std::string> kWorkspaceKeys = {"name", "type", "count"};
const std::vector<std::string> kClusterKeys = {"kernel", "dims"};
const std::vector<std::string> kTensorMapKeys = {"name", "tensor",  "dims",
                                                 "box",  "strides", "swizzle"};

core::Result<Launch> parse_launch(const std::string& where, const Value& map,
                                  const PlanLimits& limits) {
  if (!map.is_object()) return invalid(where + " must be a map, got " + type_of(map));
  if (auto ok = check_keys(where, map, kLaunchKeys); !ok) return ok.error();
  Launch launch;
  launch.where = where;
  auto kernel = string_field(where, map, "kernel", limits.max_directive_bytes, true);
  if (!kernel) return kernel.error();
  if (!plan_detail::is_qualified_name(*kernel)) {
    return invalid(where +
                   ": 'kernel' must be a kernel name like rms_norm_kernel or ns::gemm "
                   "(template arguments go in 'template_args'), got '" +
                   core::excerpt(*kernel, 64) + "'");
  }
  launch.kernel = *kernel;
  auto template_args = string_field(where, map, "template_args", limits.max_directive_bytes, false);
  if (!template_args) return template_args.error();
  launch.template_args = std::string(plan_detail::trim(*template_args));
  auto expression = plan_detail::name_expression(where, launch.kernel, launch.template_args);
  if (!expression) return expression.error();
  launch.name_expression = *expression;

  for (const char* key : {"grid", "block"}) {
    const Value* field = find(map, key);
    if (field == nullptr) return invalid(where + ": missing field '" + key + "'");
    auto dims = dims_value(where, key, *field, false);
    if (!dims) return dims.error();
    (std::string_view(key) == "grid" ? launch.grid : launch.block) = std::move(dims).value();
  }
  if (const Value* smem = find(map, "smem")) {
    auto expr = expr_value(where, "shared memory size", *smem, false);
    if (!expr) return expr.error();
    launch.smem_bytes = std::move(expr).value();
  }
  if (const Value* condition = find(map, "if")) {
    auto expr = expr_value(where, "if condition", *condition, true);
    if (!expr) return expr.error();
    launch.condition = std::move(expr).value();
  }
  const Value* args = find(map, "args");
  if (args == nullptr) return invalid(where + ": missing field 'args'");
  if (!args->is_array()) {
    return invalid(where + ": 'args' must be an array of names, got " + type_of(*args));
  }
  if (args->size() > limits.max_args) {
    return invalid(where + ": " + std::to_string(args->size()) +
                   " arguments; a launch may pass at most " + std::to_string(limits.max_args));
  }
  for (std::size_t i = 0; i < args->size(); ++i) {
    const Value& arg = (*args)[i];
    if (!arg.is_string() || !plan_detail::is_identifier(arg.get_ref<const std::string&>())) {
      const std::string got = arg.is_string()
                                  ? "'" + core::excerpt(arg.get_ref<const std::string&>(), 64) + "'"
                                  : type_of(arg);
      return invalid(where + ": argument " + std::to_string(i + 1) +
                     " must be the name of a "
                     "tensor, scalar, shape symbol or workspace, got " +
                     got);
    }
    launch.args.push_back(LaunchArg{arg.get<std::string>(), ArgKind::kTensor, 0});
  }
  return launch;
}

core::Result<Workspace> parse_workspace(const std::string& where, const Value& map,
                                        const PlanLimits& limits) {
  if (!map.is_object()) return invalid(where + " must be a map, got " + type_of(map));
  if (auto ok = check_keys(where, map, kWorkspaceKeys); !ok) return ok.error();
  Workspace workspace;
  workspace.where = where;
  auto name = string_field(where, map, "name", limits.max_directive_bytes, true);
  if (!name) return name.error();
  workspace.name = *name;
  auto type = string_field(where, map, "type", limits.max_directive_bytes, true);
  if (!type) return type.error();
  workspace.type = plan_detail::normalize_spaces(*type);
  const auto bytes = plan_detail::element_bytes(workspace.type);
  if (!bytes) return plan_detail::unknown_element_type(where, workspace.type);
  workspace.element_bytes = *bytes;
  const Value* count = find(map, "count");
  if (count == nullptr) return invalid(where + ": missing field 'count'");
  auto expr = expr_value(where, "workspace '" + workspace.name + "' count", *count, false);
  if (!expr) return expr.error();
  workspace.count = std::move(expr).value();
  return workspace;
}

core::Result<Cluster> parse_cluster(const std::string& where, const Value& map,
                                    const PlanLimits& limits) {
  if (!map.is_object()) return invalid(where + " must be a map, got " + type_of(map));
  if (auto ok = check_keys(where, map, kClusterKeys); !ok) return ok.error();
  Cluster cluster;
  cluster.where = where;
  auto kernel = string_field(where, map, "kernel", limits.max_directive_bytes, true);
  if (!kernel) return kernel.error();
  cluster.kernel = std::string(plan_detail::trim(*kernel));
  const Value* dims = find(map, "dims");
  if (dims == nullptr) return invalid(where + ": missing field 'dims'");
  auto parsed = dims_value(where, "cluster", *dims, true);
  if (!parsed) return parsed.error();
  cluster.dims = std::move(parsed).value();
  return cluster;
}

// An array of 1 to TensorMap::kMaxRank expressions (`required`), or absent.
core::Result<std::vector<core::Expr>> expr_list(const std::string& where, const Value& map,
                                                std::string_view key, bool required) {
  std::vector<core::Expr> out;
  const Value* field = find(map, key);
  if (field == nullptr) {
    if (!required) return out;
    return invalid(where + ": missing field '" + std::string(key) + "'");
  }
  if (!field->is_array() || field->empty() || field->size() > TensorMap::kMaxRank) {
    return invalid(
        where + ": '" + std::string(key) + "' must be an array of 1 to " +
        std::to_string(TensorMap::kMaxRank) + " expressions, got " +
        (field->is_array() ? std::to_string(field->size()) + " values" : type_of(*field)));
  }
  for (std::size_t i = 0; i < field->size(); ++i) {
    auto expr =
        expr_value(where, std::string(key) + "[" + std::to_string(i) + "]", (*field)[i], false);
    if (!expr) return expr.error();
    out.push_back(std::move(expr).value());
  }
  return out;
}

core::Result<TensorMap> parse_tensor_map(const std::string& where, const Value& map,
                                         const PlanLimits& limits) {
  if (!map.is_object()) return invalid(where + " must be a map, got " + type_of(map));
  if (auto ok = check_keys(where, map, kTensorMapKeys); !ok) return ok.error();
  TensorMap out;
  out.where = where;
  auto name = string_field(where, map, "name", limits.max_directive_bytes, true);
  if (!name) return name.error();
  out.name = *name;
  auto tensor = string_field(where, map, "tensor", limits.max_directive_bytes, true);
  if (!tensor) return tensor.error();
  out.tensor_name = *tensor;
  auto dims = expr_list(where, map, "dims", true);
  if (!dims) return dims.error();
  out.dims = std::move(dims).value();
  auto box = expr_list(where, map, "box", true);
  if (!box) return box.error();
  out.box = std::move(box).value();
  auto strides = expr_list(where, map, "strides", false);
  if (!strides) return strides.error();
  out.strides = std::move(strides).value();
  if (const Value* swizzle = find(map, "swizzle")) {
    const std::int64_t bytes = swizzle->is_number_integer() ? swizzle->get<std::int64_t>() : -1;
    if (bytes != 0 && bytes != 32 && bytes != 64 && bytes != 128) {
      return invalid(where + ": 'swizzle' is 0 (none), 32, 64 or 128 (bytes), got " +
                     (swizzle->is_number() ? swizzle->dump() : type_of(*swizzle)));
    }
    out.swizzle = static_cast<std::uint32_t>(bytes);
  }
  return out;
}

// Reads `field` (an array) with `parse`, one item per `name[i]`.
template <class T, class Parse>
core::Status read_items(const Value* field, std::string_view name, std::size_t max_items,
                        const PlanLimits& limits, std::vector<T>& out, Parse parse) {
  if (field == nullptr) return {};
  if (!field->is_array()) {
    return invalid("plan: '" + std::string(name) + "' must be an array, got " + type_of(*field));
  }
  if (field->size() > max_items) {
    return invalid("plan: " + std::to_string(field->size()) + " " + std::string(name) +
                   "; a plan may have at most " + std::to_string(max_items));
  }
  for (std::size_t i = 0; i < field->size(); ++i) {
    const std::string where = std::string(name) + "[" + std::to_string(i) + "]";
    auto item = parse(where, (*field)[i], limits);
    if (!item) return item.error();
    out.push_back(std::move(item).value());
  }
  return {};
}

}  // namespace

core::Result<LaunchPlan> parse_structured_plan(const core::Value& plan,
                                               const PlanContext& context) {
  const PlanLimits& limits = context.limits;
  const Value* launches = nullptr;
  const Value* workspaces = nullptr;
  const Value* clusters = nullptr;
  const Value* tensor_maps = nullptr;
  if (plan.is_array()) {
    launches = &plan;
  } else if (plan.is_object()) {
    if (auto ok = check_keys("plan", plan, kPlanKeys); !ok) return ok.error();
    launches = find(plan, "launches");
    if (launches == nullptr) return invalid("plan: missing field 'launches'");
    workspaces = find(plan, "workspaces");
    clusters = find(plan, "clusters");
    tensor_maps = find(plan, "tensor_maps");
  } else {
    return invalid(
        "the plan must be an array of launches or a map {launches, workspaces, "
        "clusters, tensor_maps}, got " +
        type_of(plan));
  }
  LaunchPlan out;
  if (auto ok =
          read_items(launches, "launches", limits.max_launches, limits, out.launches, parse_launch);
      !ok) {
    return ok.error();
  }
  if (auto ok = read_items(workspaces, "workspaces", limits.max_workspaces, limits, out.workspaces,
                           parse_workspace);
      !ok) {
    return ok.error();
  }
  if (auto ok = read_items(clusters, "clusters", limits.max_launches, limits, out.clusters,
                           parse_cluster);
      !ok) {
    return ok.error();
  }
  if (auto ok = read_items(tensor_maps, "tensor_maps", limits.max_tensor_maps, limits,
                           out.tensor_maps, parse_tensor_map);
      !ok) {
    return ok.error();
  }
  return plan_detail::finish_plan(std::move(out), context, false);
}

}  // namespace crucible::action
