// The evaluated plan the server sends the GPU runner: evaluation on every case, the wire form,
// and the checks that refuse a damaged or mismatched plan instead of following it.
#include <doctest/doctest.h>

#include <string>

#include "action/evaluated_plan.hpp"
#include "action/plan_context.hpp"
#include "tasks/registry.hpp"

using namespace crucible;
using namespace crucible::action;

namespace {

const tasks::Registry& registry() {
  static const auto loaded = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  return *loaded;
}

EvaluatedPlan evaluated(const tasks::Task& task, const std::string& source) {
  const auto context = make_plan_context(task);
  auto plan = parse_launch_plan(source, context);
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  auto out = evaluate_on_cases(std::move(plan).value(), task, context);
  REQUIRE_MESSAGE(out.ok(), out.error().message);
  return std::move(out).value();
}

}  // namespace

TEST_CASE("evaluated plan: every task's reference survives the wire unchanged, case by case") {
  for (const auto& task : registry().all()) {
    CAPTURE(task.id);
    const auto context = make_plan_context(task);
    const auto sent = evaluated(task, task.reference_source);
    REQUIRE(sent.cases.size() == task.cases.size());
    const auto got = evaluated_plan_from_value(to_value(sent));
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    CHECK(fits(*got, context, task.cases.size()).ok());
    REQUIRE(got->plan.launches.size() == sent.plan.launches.size());
    for (std::size_t l = 0; l < sent.plan.launches.size(); ++l) {
      const auto& a = sent.plan.launches[l];
      const auto& b = got->plan.launches[l];
      CHECK(a.kernel == b.kernel);
      CHECK(a.name_expression == b.name_expression);
      CHECK(a.where == b.where);
      REQUIRE(a.args.size() == b.args.size());
      for (std::size_t i = 0; i < a.args.size(); ++i) {
        CHECK(a.args[i].name == b.args[i].name);
        CHECK(a.args[i].kind == b.args[i].kind);
        CHECK(a.args[i].index == b.args[i].index);
      }
    }
    REQUIRE(got->plan.workspaces.size() == sent.plan.workspaces.size());
    for (std::size_t w = 0; w < sent.plan.workspaces.size(); ++w) {
      CHECK(got->plan.workspaces[w].element_bytes == sent.plan.workspaces[w].element_bytes);
    }
    for (std::size_t c = 0; c < sent.cases.size(); ++c) {
      const auto& a = sent.cases[c];
      const auto& b = got->cases[c];
      CHECK(a.workspace_bytes == b.workspace_bytes);
      CHECK(a.symbol_values == b.symbol_values);
      REQUIRE(a.launches.size() == b.launches.size());
      for (std::size_t r = 0; r < a.launches.size(); ++r) {
        CHECK(a.launches[r].launch == b.launches[r].launch);
        CHECK(a.launches[r].grid == b.launches[r].grid);
        CHECK(a.launches[r].block == b.launches[r].block);
        CHECK(a.launches[r].has_cluster == b.launches[r].has_cluster);
        if (a.launches[r].has_cluster) CHECK(a.launches[r].cluster == b.launches[r].cluster);
        CHECK(a.launches[r].smem_bytes == b.launches[r].smem_bytes);
      }
    }
  }
}

TEST_CASE("evaluated plan: the failing case is named so a hidden one can be kept from the agent") {
  const auto* task = registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const auto context = make_plan_context(*task);
  // A block of num_tokens threads is too large for the prefill cases only.
  auto plan = parse_launch_plan("// @launch k<<<1, num_tokens>>>(out)\n", context);
  REQUIRE(plan.ok());
  std::size_t failed = task->cases.size();
  const auto out = evaluate_on_cases(std::move(plan).value(), *task, context, &failed);
  REQUIRE_FALSE(out.ok());
  REQUIRE(failed < task->cases.size());
  CHECK(task->cases[failed].symbols.at("num_tokens") > 1024);
  CHECK(out.error().message.find("1024") != std::string::npos);
}

TEST_CASE("evaluated plan: damaged or mismatched wire forms are refused, never followed") {
  const auto* task = registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const auto context = make_plan_context(*task);
  const auto good = to_value(evaluated(*task, task->reference_source));
  REQUIRE(evaluated_plan_from_value(good).ok());

  auto damaged = [&](auto edit) {
    core::Value copy = good;
    edit(copy);
    return copy;
  };
  const core::Value structural[] = {
      core::Value(5),
      damaged([](core::Value& v) { v.erase("cases"); }),
      damaged([](core::Value& v) { v["launches"] = "x"; }),
      damaged([](core::Value& v) { v["cases"][0]["launches"][0]["launch"] = 7; }),
      damaged([](core::Value& v) {
        v["cases"][0]["launches"][0]["grid"] = {0, 1, 1};
      }),
      damaged([](core::Value& v) {
        v["cases"][0]["launches"][0]["block"] = {1, 1};
      }),
      damaged([](core::Value& v) { v["cases"][0]["launches"][0]["grid"][0] = 1LL << 33; }),
      damaged([](core::Value& v) { v["cases"][0]["launches"] = core::Value::array(); }),
      damaged([](core::Value& v) { v["cases"][0]["workspace_bytes"].push_back(16); }),
      damaged([](core::Value& v) {
        v["launches"][0]["args"][0] = {"out", 9, 0};
      }),
  };
  for (const auto& value : structural) {
    CAPTURE(value.dump());
    const auto got = evaluated_plan_from_value(value);
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().code == core::ErrorCode::kBadRequest);
  }

  // Well formed, but not for this task.
  const core::Value mismatched[] = {
      damaged([](core::Value& v) { v["cases"].erase(v["cases"].size() - 1); }),
      damaged([](core::Value& v) { v["launches"][0]["args"][0][2] = 99; }),
      damaged([](core::Value& v) { v["cases"][1]["symbol_values"].push_back(3); }),
  };
  for (const auto& value : mismatched) {
    CAPTURE(value.dump());
    const auto got = evaluated_plan_from_value(value);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    const auto ok = fits(*got, context, task->cases.size());
    REQUIRE_FALSE(ok.ok());
    CHECK(ok.error().message.rfind("evaluated plan: ", 0) == 0);
  }
}
