// EvaluatedPlan: evaluation on every case, and the wire form the runner reads.
#include "action/evaluated_plan.hpp"

#include <utility>

namespace crucible::action {
namespace {

using core::Value;

core::Error bad(const std::string& message) {
  return core::Error{core::ErrorCode::kBadRequest, "evaluated plan: " + message};
}

Value dims(const std::array<std::uint32_t, 3>& d) { return Value::array({d[0], d[1], d[2]}); }

bool read_dims(const Value& value, std::array<std::uint32_t, 3>& out) {
  if (!value.is_array() || value.size() != 3) return false;
  for (std::size_t i = 0; i < 3; ++i) {
    if (!value[i].is_number_unsigned()) return false;
    const auto v = value[i].get<std::uint64_t>();
    if (v == 0 || v > 0xFFFFFFFFu) return false;
    out[i] = static_cast<std::uint32_t>(v);
  }
  return true;
}

Value tensor_map_value(const ConcreteTensorMap& map) {
  Value dims = Value::array(), strides = Value::array(), box = Value::array();
  for (std::uint32_t i = 0; i < map.rank; ++i) {
    dims.push_back(map.dims[i]);
    box.push_back(map.box[i]);
    if (i > 0) strides.push_back(map.stride_bytes[i - 1]);
  }
  return Value{{"tensor", map.tensor},    {"dtype", std::string(core::dtype_name(map.dtype))},
               {"dims", std::move(dims)}, {"stride_bytes", std::move(strides)},
               {"box", std::move(box)},   {"swizzle", map.swizzle}};
}

// The structure a runner relies on; the values were checked by evaluate_plan on the server.
core::Result<ConcreteTensorMap> read_tensor_map(const Value& value) {
  ConcreteTensorMap map;
  map.tensor = value.at("tensor").get<std::size_t>();
  const auto dtype = core::dtype_from_name(value.at("dtype").get<std::string>());
  if (!dtype) return bad("a tensor map has an unknown dtype");
  map.dtype = *dtype;
  const auto dims = value.at("dims").get<std::vector<std::uint64_t>>();
  const auto strides = value.at("stride_bytes").get<std::vector<std::uint64_t>>();
  const auto box = value.at("box").get<std::vector<std::uint32_t>>();
  map.rank = static_cast<std::uint32_t>(dims.size());
  if (map.rank == 0 && box.empty() && strides.empty()) {
    map.swizzle = 0;
    return map;  // not passed by any launch of the case
  }
  if (dims.empty() || dims.size() > TensorMap::kMaxRank || box.size() != dims.size() ||
      strides.size() + 1 != dims.size()) {
    return bad("a tensor map needs 1 to 5 dims, as many box extents and one stride fewer");
  }
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 || box[i] == 0 || box[i] > TensorMap::kMaxBox) {
      return bad("a tensor map has an empty extent or a box over 256");
    }
    map.dims[i] = dims[i];
    map.box[i] = box[i];
    if (i > 0) map.stride_bytes[i - 1] = strides[i - 1];
  }
  map.swizzle = value.at("swizzle").get<std::uint32_t>();
  if (map.swizzle != 0 && map.swizzle != 32 && map.swizzle != 64 && map.swizzle != 128) {
    return bad("a tensor map's swizzle is 0, 32, 64 or 128");
  }
  return map;
}

std::size_t arg_bound(ArgKind kind, const PlanContext& context, std::size_t workspaces,
                      std::size_t tensor_maps) {
  switch (kind) {
    case ArgKind::kTensor:
      return context.tensors.size();
    case ArgKind::kScalar:
      return context.scalars.size();
    case ArgKind::kSymbol:
      return context.symbols.size();
    case ArgKind::kWorkspace:
      return workspaces;
    case ArgKind::kTensorMap:
      return tensor_maps;
  }
  return 0;
}

}  // namespace

core::Result<EvaluatedPlan> evaluate_on_cases(LaunchPlan plan, const tasks::Task& task,
                                              const PlanContext& context,
                                              std::size_t* failed_case) {
  EvaluatedPlan out;
  out.cases.reserve(task.cases.size());
  for (std::size_t i = 0; i < task.cases.size(); ++i) {
    auto concrete = evaluate_plan(plan, task.cases[i].symbols, context);
    if (!concrete) {
      if (failed_case != nullptr) *failed_case = i;
      return concrete.error();
    }
    out.cases.push_back(std::move(concrete).value());
  }
  out.plan = std::move(plan);
  return out;
}

Value to_value(const EvaluatedPlan& evaluated) {
  Value launches = Value::array();
  for (const auto& launch : evaluated.plan.launches) {
    Value args = Value::array();
    for (const auto& arg : launch.args) {
      args.push_back(Value::array({arg.name, static_cast<std::uint8_t>(arg.kind), arg.index}));
    }
    launches.push_back(Value{{"kernel", launch.kernel},
                             {"name_expression", launch.name_expression},
                             {"where", launch.where},
                             {"args", std::move(args)}});
  }
  Value workspaces = Value::array();
  for (const auto& workspace : evaluated.plan.workspaces) {
    workspaces.push_back(Value{{"name", workspace.name},
                               {"type", workspace.type},
                               {"element_bytes", workspace.element_bytes},
                               {"where", workspace.where}});
  }
  Value tensor_maps = Value::array();
  for (const auto& map : evaluated.plan.tensor_maps) {
    tensor_maps.push_back(Value{{"name", map.name}, {"tensor", map.tensor}, {"where", map.where}});
  }
  Value cases = Value::array();
  for (const auto& concrete : evaluated.cases) {
    Value runs = Value::array();
    for (const auto& run : concrete.launches) {
      runs.push_back(Value{{"launch", run.launch},
                           {"grid", dims(run.grid)},
                           {"block", dims(run.block)},
                           {"cluster", run.has_cluster ? dims(run.cluster) : Value(nullptr)},
                           {"smem", run.smem_bytes}});
    }
    Value maps = Value::array();
    for (const auto& map : concrete.tensor_maps) maps.push_back(tensor_map_value(map));
    cases.push_back(Value{{"launches", std::move(runs)},
                          {"workspace_bytes", concrete.workspace_bytes},
                          {"symbol_values", concrete.symbol_values},
                          {"tensor_maps", std::move(maps)}});
  }
  return Value{{"launches", std::move(launches)},
               {"workspaces", std::move(workspaces)},
               {"tensor_maps", std::move(tensor_maps)},
               {"cases", std::move(cases)}};
}

core::Result<EvaluatedPlan> evaluated_plan_from_value(const Value& value) {
  try {
    EvaluatedPlan out;
    const Value& launches = value.at("launches");
    const Value& workspaces = value.at("workspaces");
    const Value& tensor_maps = value.at("tensor_maps");
    const Value& case_list = value.at("cases");
    if (!launches.is_array() || !workspaces.is_array() || !tensor_maps.is_array() ||
        !case_list.is_array()) {
      return bad("launches, workspaces, tensor_maps and cases must be arrays");
    }
    for (const auto& m : tensor_maps) {
      TensorMap map;
      map.name = m.at("name").get<std::string>();
      map.tensor = m.at("tensor").get<std::size_t>();
      map.where = m.at("where").get<std::string>();
      out.plan.tensor_maps.push_back(std::move(map));
    }
    for (const auto& w : workspaces) {
      Workspace workspace;
      workspace.name = w.at("name").get<std::string>();
      workspace.type = w.at("type").get<std::string>();
      workspace.element_bytes = w.at("element_bytes").get<std::size_t>();
      workspace.where = w.at("where").get<std::string>();
      out.plan.workspaces.push_back(std::move(workspace));
    }
    for (const auto& l : launches) {
      Launch launch;
      launch.kernel = l.at("kernel").get<std::string>();
      launch.name_expression = l.at("name_expression").get<std::string>();
      launch.where = l.at("where").get<std::string>();
      for (const auto& a : l.at("args")) {
        if (!a.is_array() || a.size() != 3) return bad("an argument must be [name, kind, index]");
        LaunchArg arg;
        arg.name = a[0].get<std::string>();
        const auto kind = a[1].get<std::uint8_t>();
        if (kind > static_cast<std::uint8_t>(ArgKind::kTensorMap)) return bad("unknown kind");
        arg.kind = static_cast<ArgKind>(kind);
        arg.index = a[2].get<std::size_t>();
        launch.args.push_back(std::move(arg));
      }
      out.plan.launches.push_back(std::move(launch));
    }
    for (const auto& c : case_list) {
      ConcretePlan concrete;
      for (const auto& r : c.at("launches")) {
        ConcreteLaunch run;
        run.launch = r.at("launch").get<std::size_t>();
        if (run.launch >= out.plan.launches.size()) return bad("a run names no launch");
        if (!read_dims(r.at("grid"), run.grid) || !read_dims(r.at("block"), run.block)) {
          return bad("grid and block must be three positive 32-bit integers");
        }
        const Value& cluster = r.at("cluster");
        run.has_cluster = !cluster.is_null();
        if (run.has_cluster && !read_dims(cluster, run.cluster)) return bad("bad cluster");
        run.smem_bytes = r.at("smem").get<std::uint32_t>();
        concrete.launches.push_back(run);
      }
      concrete.workspace_bytes = c.at("workspace_bytes").get<std::vector<std::uint64_t>>();
      concrete.symbol_values = c.at("symbol_values").get<std::vector<std::int64_t>>();
      for (const auto& m : c.at("tensor_maps")) {
        auto map = read_tensor_map(m);
        if (!map) return map.error();
        concrete.tensor_maps.push_back(*map);
      }
      if (concrete.tensor_maps.size() != out.plan.tensor_maps.size()) {
        return bad("a case's tensor maps do not match the plan's tensor maps");
      }
      if (concrete.workspace_bytes.size() != out.plan.workspaces.size()) {
        return bad("a case's workspace sizes do not match the plan's workspaces");
      }
      if (concrete.launches.empty()) return bad("a case runs no launch");
      out.cases.push_back(std::move(concrete));
    }
    return out;
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

core::Status fits(const EvaluatedPlan& plan, const PlanContext& context, std::size_t cases) {
  if (plan.cases.size() != cases) {
    return bad(std::to_string(plan.cases.size()) + " cases for a task of " + std::to_string(cases));
  }
  for (const auto& launch : plan.plan.launches) {
    for (const auto& arg : launch.args) {
      if (arg.index >=
          arg_bound(arg.kind, context, plan.plan.workspaces.size(), plan.plan.tensor_maps.size())) {
        return bad(launch.where + ": argument '" + arg.name + "' points past its list");
      }
    }
  }
  for (const auto& concrete : plan.cases) {
    if (concrete.symbol_values.size() != context.symbols.size()) {
      return bad("a case's symbol values do not match the task's symbols");
    }
    for (std::size_t m = 0; m < concrete.tensor_maps.size(); ++m) {
      const auto& map = concrete.tensor_maps[m];
      if (map.tensor >= context.tensors.size() || context.tensors[map.tensor].second != map.dtype ||
          map.tensor != plan.plan.tensor_maps.at(m).tensor) {
        return bad(
            "a tensor map names no tensor of the task, another dtype or another tensor "
            "than the plan's");
      }
    }
    for (const auto& run : concrete.launches) {
      for (const auto& arg : plan.plan.launches[run.launch].args) {
        if (arg.kind == ArgKind::kTensorMap && concrete.tensor_maps[arg.index].rank == 0) {
          return bad("a launch passes a tensor map the case does not encode");
        }
      }
    }
  }
  return {};
}

}  // namespace crucible::action
