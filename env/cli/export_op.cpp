// `crucible export-op` (export_op.hpp).
#include "env/cli/export_op.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/dtype.hpp"
#include "core/msgpack_codec.hpp"
#include "core/value.hpp"

namespace crucible::embedded {
extern const char kExportOpTemplatePy[];  // env/cli/export_op_template.py
}  // namespace crucible::embedded

namespace crucible::cli {
namespace {

using core::Value;

bool is_identifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string python_type(core::DType dtype) {
  return dtype == core::DType::kF32 || dtype == core::DType::kF64 ? "float" : "int";
}

std::string python_number(core::DType dtype, double value) {
  if (python_type(dtype) == "int") return std::to_string(static_cast<long long>(value));
  return Value(value).dump();
}

const char* kind_name(action::ArgKind kind) {
  switch (kind) {
    case action::ArgKind::kTensor:
      return "tensor";
    case action::ArgKind::kScalar:
      return "scalar";
    case action::ArgKind::kSymbol:
      return "symbol";
    case action::ArgKind::kWorkspace:
      return "workspace";
    case action::ArgKind::kTensorMap:
      return "tensor_map";
  }
  return "tensor";
}

void replace_once(std::string& text, const std::string& marker, const std::string& with) {
  const auto at = text.find(marker);
  if (at != std::string::npos) text.replace(at, marker.size(), with);
}

}  // namespace

std::string default_op_name(const tasks::Task& task) {
  const auto slash = task.id.rfind('/');
  return slash == std::string::npos ? task.id : task.id.substr(slash + 1);
}

core::Result<std::string> export_op_module(const tasks::Task& task, const std::string& source,
                                           const std::string& name,
                                           const std::string& source_label) {
  const auto refuse = [](const std::string& why) {
    return core::Error{core::ErrorCode::kInvalidArgument, why};
  };
  if (!is_identifier(name)) return refuse("'" + name + "' is not a Python identifier");
  const auto context = action::make_plan_context(task);
  auto plan = action::parse_launch_plan(source, context);
  if (!plan) return refuse("the launch plan: " + plan.error().message);
  Value tensors = Value::array();
  std::set<std::string> in_shapes;
  std::vector<std::string> mutated;
  for (const auto& tensor : task.tensors) {
    Value shape = Value::array();
    for (const auto& dim : tensor.shape) {
      shape.push_back(dim);
      in_shapes.insert(dim);
    }
    tensors.push_back(Value{{"name", tensor.name},
                            {"dtype", std::string(core::dtype_name(tensor.dtype))},
                            {"shape", shape},
                            {"role", std::string(tasks::role_name(tensor.role))}});
    if (tasks::is_output(tensor.role)) mutated.push_back(tensor.name);
  }
  Value scalars = Value::array();
  for (const auto& scalar : task.scalars) {
    scalars.push_back(
        Value{{"name", scalar.name},
              {"dtype", std::string(core::dtype_name(scalar.dtype))},
              {"default", scalar.default_value ? Value(*scalar.default_value) : Value(nullptr)}});
  }
  // The symbols the plan uses (as arguments or in its expressions); those in no tensor's shape
  // are the op's parameters.
  std::set<std::string> used;
  const auto use = [&](const core::Expr& expr) {
    for (const auto& symbol : expr.symbols()) used.insert(symbol);
  };
  for (const auto& launch : plan->launches) {
    std::vector<const action::Dim3Expr*> shapes{&launch.grid, &launch.block};
    if (launch.cluster) shapes.push_back(&plan->clusters[*launch.cluster].dims);
    for (const auto* dims : shapes) {
      use(dims->x);
      use(dims->y);
      use(dims->z);
    }
    use(launch.smem_bytes);
    if (launch.condition) use(*launch.condition);
    for (const auto& arg : launch.args) {
      if (arg.kind == action::ArgKind::kSymbol) used.insert(arg.name);
    }
  }
  for (const auto& workspace : plan->workspaces) use(workspace.count);
  for (const auto& map : plan->tensor_maps) {
    for (const auto* list : {&map.dims, &map.box, &map.strides}) {
      for (const auto& expr : *list) use(expr);
    }
  }
  Value symbols = Value::array();
  Value needed = Value::array();
  std::vector<std::string> keyword_symbols;
  for (const auto& symbol : task.symbol_specs) {
    symbols.push_back(
        Value{{"name", symbol.name}, {"dtype", std::string(core::dtype_name(symbol.dtype))}});
    if (!used.contains(symbol.name)) continue;
    needed.push_back(symbol.name);
    if (!in_shapes.contains(symbol.name)) keyword_symbols.push_back(symbol.name);
  }
  const Value task_value{{"id", task.id},
                         {"module", task.module},
                         {"tensors", tensors},
                         {"scalars", scalars},
                         {"symbols", symbols}};

  const auto dims = [](const action::Dim3Expr& d) {
    return Value::array({d.x.text(), d.y.text(), d.z.text()});
  };
  Value launches = Value::array();
  for (const auto& launch : plan->launches) {
    Value args = Value::array();
    for (const auto& arg : launch.args)
      args.push_back(Value::array({kind_name(arg.kind), arg.name}));
    launches.push_back(Value{
        {"name_expression", launch.name_expression},
        {"grid", dims(launch.grid)},
        {"block", dims(launch.block)},
        {"smem", launch.smem_bytes.text()},
        {"condition", launch.condition ? Value(launch.condition->text()) : Value(nullptr)},
        {"cluster", launch.cluster ? dims(plan->clusters[*launch.cluster].dims) : Value(nullptr)},
        {"args", args}});
  }
  Value workspaces = Value::array();
  for (const auto& workspace : plan->workspaces) {
    workspaces.push_back(Value{{"name", workspace.name},
                               {"element_bytes", workspace.element_bytes},
                               {"count", workspace.count.text()}});
  }
  const auto texts = [](const std::vector<core::Expr>& list) {
    Value out = Value::array();
    for (const auto& expr : list) out.push_back(expr.text());
    return out;
  };
  Value tensor_maps = Value::array();
  for (const auto& map : plan->tensor_maps) {
    const auto& tensor = task.tensors.at(map.tensor);
    tensor_maps.push_back(Value{{"name", map.name},
                                {"tensor", tensor.name},
                                {"dtype", std::string(core::dtype_name(tensor.dtype))},
                                {"element_bytes", core::dtype_size(tensor.dtype)},
                                {"dims", texts(map.dims)},
                                {"box", texts(map.box)},
                                {"strides", texts(map.strides)},
                                {"swizzle", map.swizzle}});
  }
  const Value plan_value{{"launches", launches},
                         {"workspaces", workspaces},
                         {"tensor_maps", tensor_maps},
                         {"symbols", needed}};

  // The op's signature: the task's tensors in the production module's order, then any symbol
  // the plan needs that no tensor's shape gives, then the scalars (with their defaults).
  std::string params;
  std::string fake_params;
  std::string tensor_map;
  std::string scalar_map;
  std::string symbol_map;
  const auto add_param = [&](const std::string& text, const std::string& fake) {
    params += (params.empty() ? "" : ", ") + text;
    fake_params += (fake_params.empty() ? "" : ", ") + fake;
  };
  for (const auto& tensor : task.tensors) {
    add_param(tensor.name + ": torch.Tensor", tensor.name);
    tensor_map += (tensor_map.empty() ? "" : ", ") + Value(tensor.name).dump() + ": " + tensor.name;
  }
  for (const auto& symbol : keyword_symbols) {
    add_param(symbol + ": int", symbol);
    symbol_map += (symbol_map.empty() ? "" : ", ") + Value(symbol).dump() + ": " + symbol;
  }
  for (const auto& scalar : task.scalars) {
    std::string text = scalar.name + ": " + python_type(scalar.dtype);
    if (scalar.default_value) text += " = " + python_number(scalar.dtype, *scalar.default_value);
    add_param(
        text,
        text.substr(0, text.find(':')) +
            (scalar.default_value ? "=" + python_number(scalar.dtype, *scalar.default_value) : ""));
    scalar_map += (scalar_map.empty() ? "" : ", ") + Value(scalar.name).dump() + ": " + scalar.name;
  }
  std::string mutates;
  for (const auto& tensor : mutated) mutates += Value(tensor).dump() + ", ";
  const std::string op = "@torch.library.custom_op(\"crucible::" + name + "\", mutates_args=(" +
                         mutates +
                         "))\n"
                         "    def " +
                         name + "(" + params +
                         ") -> None:\n"
                         "        \"\"\"" +
                         task.id + " (" + task.module.substr(0, task.module.find('(')) +
                         "'s argument order); outputs are written in place.\"\"\"\n"
                         "        run({" +
                         tensor_map + "}, {" + scalar_map + "}, {" + symbol_map +
                         "})\n\n"
                         "    @" +
                         name +
                         ".register_fake\n"
                         "    def _(" +
                         fake_params +
                         ") -> None:\n"
                         "        return None";

  std::string text(embedded::kExportOpTemplatePy);
  replace_once(text, "@DOC@",
               task.id + " as a PyTorch custom op: torch.ops.crucible." + name +
                   ", exported by `crucible export-op` from " + source_label + ".");
  replace_once(text, "\"@TASK@\"", Value(core::to_json_text(task_value)).dump());
  replace_once(text, "\"@PLAN@\"", Value(core::to_json_text(plan_value)).dump());
  replace_once(text, "\"@SOURCE@\"", Value(source).dump());
  replace_once(text, "\"@NAME@\"", Value(name).dump());
  replace_once(text, "pass  # @OP@", op);
  return text;
}

}  // namespace crucible::cli
