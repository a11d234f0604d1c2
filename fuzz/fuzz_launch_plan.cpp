// Fuzz target: launch plans (directives and the structured form) parsed against a real task and
// evaluated for its cases and for extreme symbol values.
// Input: byte 0 picks the task (registry order, modulo the task count), byte 1 the form:
//   'S'  the rest is the msgpack of a structured plan (decoded with the server's limits),
//   'A'  an action: source text, a NUL byte, then a structured plan's msgpack (parse_action_plan),
//   else the rest is kernel source whose // @launch, @workspace, @cluster and @tensormap comments
//   are parsed.
// Findings: any crash, leak, UB or uncaught exception; an error message that is not valid UTF-8;
// an accepted plan whose arguments point outside the context, whose kernel parameters of the
// documented sizes are refused, or which evaluates to a launch outside the device limits or a
// tensor map outside the TMA's rules or its tensor.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/dtype.hpp"
#include "core/msgpack_codec.hpp"
#include "core/protocol.hpp"
#include "fuzz/fuzz_checks.hpp"
#include "tasks/registry.hpp"

namespace {

namespace core = crucible::core;
namespace fuzz = crucible::fuzz;
namespace action = crucible::action;
namespace tasks = crucible::tasks;

struct TaskPlans {
  action::PlanContext context;
  std::vector<std::map<std::string, std::int64_t>> symbol_sets;  // every case, then extremes
};

// Every task of the repository's registry with an H200's shared-memory limit, as the server
// builds them; symbol values of every case, then every symbol at one extreme value at a time.
const std::vector<TaskPlans>& all_tasks() {
  static const std::vector<TaskPlans> loaded = [] {
    auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
    if (!registry) fuzz::fail("the registry does not load", registry.error().message);
    std::vector<TaskPlans> out;
    for (const tasks::Task& task : registry->all()) {
      TaskPlans plans{action::make_plan_context(task, 232448), {}};
      for (const auto& c : task.cases) plans.symbol_sets.push_back(c.symbols);
      for (const std::int64_t extreme :
           {std::int64_t{0}, std::int64_t{-1}, std::int64_t{1} << 31,
            std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()}) {
        std::map<std::string, std::int64_t> values;
        for (const auto& symbol : task.symbols) values[symbol] = extreme;
        plans.symbol_sets.push_back(std::move(values));
      }
      out.push_back(std::move(plans));
    }
    if (out.empty()) fuzz::fail("the registry has no task");
    return out;
  }();
  return loaded;
}

void require_error(const core::Error& error, std::string_view where) {
  fuzz::require_utf8(error.message, where);
}

std::size_t arg_count(const action::LaunchArg& arg, const action::PlanContext& context,
                      const action::LaunchPlan& plan) {
  switch (arg.kind) {
    case action::ArgKind::kTensor:
      return context.tensors.size();
    case action::ArgKind::kScalar:
      return context.scalars.size();
    case action::ArgKind::kSymbol:
      return context.symbols.size();
    case action::ArgKind::kWorkspace:
      return plan.workspaces.size();
    case action::ArgKind::kTensorMap:
      return plan.tensor_maps.size();
  }
  return 0;
}

// The kernel parameter sizes docs/launch_plan.md asks for; symbols alternate int and int64_t.
std::vector<std::size_t> documented_params(const action::Launch& launch,
                                           const action::PlanContext& context) {
  std::vector<std::size_t> bytes;
  for (std::size_t i = 0; i < launch.args.size(); ++i) {
    const auto& arg = launch.args[i];
    switch (arg.kind) {
      case action::ArgKind::kTensor:
      case action::ArgKind::kWorkspace:
        bytes.push_back(8);
        break;
      case action::ArgKind::kScalar:
        bytes.push_back(core::dtype_size(context.scalars[arg.index].second));
        break;
      case action::ArgKind::kSymbol:
        bytes.push_back(i % 2 == 0 ? 4 : 8);
        break;
      case action::ArgKind::kTensorMap:
        bytes.push_back(action::kTensorMapBytes);
        break;
    }
  }
  return bytes;
}

void check_concrete(const action::ConcretePlan& concrete, const action::LaunchPlan& plan,
                    const action::PlanContext& context) {
  const action::PlanLimits& limits = context.limits;
  if (concrete.launches.empty()) fuzz::fail("evaluate_plan accepted a case where nothing runs");
  if (concrete.symbol_values.size() != context.symbols.size() ||
      concrete.workspace_bytes.size() != plan.workspaces.size()) {
    fuzz::fail("evaluate_plan returned the wrong number of symbols or workspaces");
  }
  std::uint64_t workspace_total = 0;
  for (const auto bytes : concrete.workspace_bytes) workspace_total += bytes;
  if (workspace_total > static_cast<std::uint64_t>(limits.max_workspace_bytes)) {
    fuzz::fail("evaluate_plan accepted workspaces over the limit");
  }
  if (concrete.tensor_maps.size() != plan.tensor_maps.size()) {
    fuzz::fail("evaluate_plan returned the wrong number of tensor maps");
  }
  for (const auto& launch : concrete.launches) {
    for (const auto& arg : plan.launches.at(launch.launch).args) {
      if (arg.kind == action::ArgKind::kTensorMap && concrete.tensor_maps.at(arg.index).rank == 0) {
        fuzz::fail("evaluate_plan left a tensor map a running launch passes unevaluated");
      }
    }
  }
  for (const auto& map : concrete.tensor_maps) {
    if (map.rank == 0) continue;  // passed by no launch of this case
    if (map.tensor >= context.tensors.size() || map.dtype != context.tensors[map.tensor].second ||
        map.rank > action::TensorMap::kMaxRank) {
      fuzz::fail("evaluate_plan accepted a tensor map of no tensor or a bad rank");
    }
    const std::uint64_t element = core::dtype_size(map.dtype);
    if (map.box[0] * element % 16 != 0 ||
        (map.swizzle != 0 && map.box[0] * element > map.swizzle)) {
      fuzz::fail("evaluate_plan accepted an innermost box the TMA refuses");
    }
    for (std::uint32_t i = 0; i < map.rank; ++i) {
      if (map.box[i] < 1 || map.box[i] > action::TensorMap::kMaxBox || map.dims[i] < 1 ||
          map.dims[i] > (std::uint64_t{1} << 32) ||
          (i > 0 && (map.stride_bytes[i - 1] % 16 != 0 || map.stride_bytes[i - 1] == 0 ||
                     map.stride_bytes[i - 1] >= (std::uint64_t{1} << 40)))) {
        fuzz::fail("evaluate_plan accepted a tensor map extent, box or stride the TMA refuses");
      }
    }
  }
  for (const auto& launch : concrete.launches) {
    if (launch.launch >= plan.launches.size()) fuzz::fail("a concrete launch of no launch");
    std::int64_t threads = 1;
    for (std::size_t axis = 0; axis < 3; ++axis) {
      const std::int64_t grid = launch.grid[axis];
      const std::int64_t block = launch.block[axis];
      const std::int64_t cluster = launch.cluster[axis];
      if (grid < 1 || grid > limits.max_grid_dims[axis] || block < 1 ||
          block > limits.max_block_dims[axis] || cluster < 1 || grid % cluster != 0) {
        fuzz::fail("evaluate_plan accepted a grid, block or cluster outside the limits");
      }
      threads *= block;
    }
    if (threads > limits.max_threads_per_block) {
      fuzz::fail("evaluate_plan accepted a block over the thread limit");
    }
    if (launch.smem_bytes > limits.max_smem_bytes) {
      fuzz::fail("evaluate_plan accepted shared memory over the limit");
    }
    if (launch.has_cluster) {
      const std::int64_t blocks =
          std::int64_t{launch.cluster[0]} * launch.cluster[1] * launch.cluster[2];
      if (blocks > limits.max_cluster_size) fuzz::fail("evaluate_plan accepted a large cluster");
    }
  }
}

void check_plan(const action::LaunchPlan& plan, const TaskPlans& task) {
  const action::PlanContext& context = task.context;
  if (plan.launches.empty()) fuzz::fail("a plan without launches was accepted");
  for (const auto& name : plan.name_expressions()) fuzz::require_utf8(name, "name expression");
  for (const auto& launch : plan.launches) {
    if (launch.cluster && *launch.cluster >= plan.clusters.size()) {
      fuzz::fail("a launch points past the clusters");
    }
    for (const auto& arg : launch.args) {
      if (arg.index >= arg_count(arg, context, plan))
        fuzz::fail("an argument points past its list");
    }
    const auto params =
        action::check_kernel_params(launch, documented_params(launch, context), context);
    if (!params) fuzz::fail("documented parameter sizes refused", params.error().message);
    for (std::size_t i = 0; i < launch.args.size(); ++i) {
      if (launch.args[i].kind != action::ArgKind::kSymbol) continue;
      for (const std::int64_t value : {std::int64_t{7}, std::int64_t{1} << 40}) {
        const auto narrow = action::encode_symbol_arg(launch, i, value, 4);
        if (!narrow) require_error(narrow.error(), "encode_symbol_arg");
        const auto wide = action::encode_symbol_arg(launch, i, value, 8);
        if (!wide || wide->size() != 8) fuzz::fail("an int64 symbol argument was refused");
      }
    }
  }
  for (const auto& symbols : task.symbol_sets) {
    const auto concrete = action::evaluate_plan(plan, symbols, context);
    if (concrete) {
      check_concrete(*concrete, plan, context);
    } else {
      require_error(concrete.error(), "evaluate_plan");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& tasks = all_tasks();
  if (size < 2) return 0;
  const TaskPlans& task = tasks[data[0] % tasks.size()];
  const char form = static_cast<char>(data[1]);
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  static const core::DecodeLimits limits = core::ProtocolLimits{}.decode_limits();

  core::Result<action::LaunchPlan> plan = core::Error{core::ErrorCode::kInvalidArgument, ""};
  if (form == 'S' || form == 'A') {
    const std::size_t split = form == 'A' ? body.find('\0') : 0;
    if (split == std::string_view::npos) return 0;
    const std::string_view source = body.substr(0, split);
    auto value = core::decode_msgpack(body.substr(form == 'A' ? split + 1 : 0), limits);
    if (!value) return 0;
    plan = form == 'A' ? action::parse_action_plan(source, *value, task.context)
                       : action::parse_structured_plan(*value, task.context);
  } else {
    plan = action::parse_launch_plan(body, task.context);
  }
  if (!plan) {
    require_error(plan.error(), "parse");
    return 0;
  }
  check_plan(*plan, task);
  return 0;
}
