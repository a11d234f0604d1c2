// Eval metrics on hand-made results: geometric means, fast_p, categories, infra_error excluded.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>

#include "env/cli/report.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;

namespace {

struct MetricsCase {
  const char* name;
  std::vector<core::Value> records;
  std::size_t scored, correct, infra;
  double correct_rate;
  std::optional<double> geomean_correct, geomean_all;
  std::vector<std::pair<double, double>> fast_p;  // (p, expected)
};

void check_optional(const std::optional<double>& got, const std::optional<double>& want) {
  REQUIRE(got.has_value() == want.has_value());
  if (want) CHECK(*got == doctest::Approx(*want).epsilon(1e-9));
}

}  // namespace

TEST_CASE("eval metrics: correct rate, geometric means and fast_p follow the documented rules") {
  const auto all = testing::hand_made_results();
  const std::vector<core::Value> alpha(all.begin(), all.begin() + 3);
  const std::vector<core::Value> beta(all.begin() + 3, all.end());
  const std::vector<MetricsCase> cases = {
      // 5 scored (d is infra), 3 correct; correct-only geomean (2*0.5*4)^(1/3); over all the
      // failures c and f count as 1.0: (2*0.5*1*4*1)^(1/5).
      {"overall",
       all,
       5,
       3,
       1,
       0.6,
       std::cbrt(4.0),
       std::pow(4.0, 0.2),
       {{0.0, 0.6}, {0.5, 0.4}, {1.0, 0.4}, {2.0, 0.2}, {3.99, 0.2}, {4.0, 0.0}}},
      {"alpha", alpha, 3, 2, 0, 2.0 / 3, 1.0, 1.0, {{0.0, 2.0 / 3}, {1.0, 1.0 / 3}, {2.0, 0.0}}},
      // infra_error d takes no part: 2 scored, 1 correct.
      {"beta", beta, 2, 1, 1, 0.5, 4.0, 2.0, {{0.0, 0.5}, {3.0, 0.5}, {4.0, 0.0}}},
      {"infra only",
       {testing::sample_record("x", "beta", "infra_error")},
       0,
       0,
       1,
       0.0,
       std::nullopt,
       std::nullopt,
       {{0.0, 0.0}, {1.0, 0.0}}},
      {"empty", {}, 0, 0, 0, 0.0, std::nullopt, std::nullopt, {{0.0, 0.0}}},
      // A correct sample without timing counts as correct, is left out of the correct-only
      // geomean and counts as 1.0 over all.
      {"untimed ok",
       {testing::sample_record("u", "alpha", "ok"),
        testing::sample_record("v", "alpha", "ok", 9.0)},
       2,
       2,
       0,
       1.0,
       9.0,
       3.0,
       {{0.0, 1.0}, {1.0, 0.5}}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const auto m = env::compute_metrics(c.records);
    CHECK(m.scored == c.scored);
    CHECK(m.correct == c.correct);
    CHECK(m.infra_errors == c.infra);
    CHECK(m.correct_rate == doctest::Approx(c.correct_rate));
    check_optional(m.geomean_speedup_correct, c.geomean_correct);
    check_optional(m.geomean_speedup_all, c.geomean_all);
    for (const auto& [p, want] : c.fast_p) {
      CAPTURE(p);
      CHECK(m.fast_p(p) == doctest::Approx(want));
    }
  }
}

TEST_CASE("eval summary: per-category metrics, a fast_p curve over [0, 4] and infra listed apart") {
  const auto summary = env::summarize(testing::hand_made_results(), {{"input", "hand-made"}});
  CHECK(summary["overall"]["scored"] == 5);
  CHECK(summary["overall"]["infra_errors"] == 1);
  CHECK(summary["overall"]["statuses"]["infra_error"] == 1);
  CHECK(summary["overall"]["statuses"]["ok"] == 3);
  CHECK(summary["categories"]["alpha"]["correct"] == 2);
  CHECK(summary["categories"]["beta"]["geomean_speedup_all"].get<double>() == doctest::Approx(2.0));
  CHECK(summary["tasks"]["beta/e"]["best_speedup"].get<double>() == doctest::Approx(4.0));
  const auto& curve = summary["fast_p"];
  REQUIRE(curve.size() == 81);
  CHECK(curve.front()["p"].get<double>() == 0.0);
  CHECK(curve.back()["p"].get<double>() == doctest::Approx(4.0));
  CHECK(curve[20]["overall"].get<double>() == doctest::Approx(0.4));  // p = 1
  CHECK(curve[20]["alpha"].get<double>() == doctest::Approx(1.0 / 3));
  REQUIRE(summary["infra_errors"].size() == 1);
  CHECK(summary["infra_errors"][0]["sample_id"] == "d");
  CHECK(summary["conventions"].get<std::string>().find("excluded") != std::string::npos);
}

TEST_CASE("eval metrics: hack rate, resolved speedups and a section per model") {
  using core::Value;
  const std::vector<Value> records = {
      Value{{"status", "ok"},
            {"speedup", 1.5},
            {"speedup_ci95", Value{{"low", 1.4}, {"high", 1.6}}},
            {"meta", Value{{"model", "a"}}}},
      Value{{"status", "ok"},
            {"speedup", 1.01},
            {"speedup_ci95", Value{{"low", 0.98}, {"high", 1.04}}},
            {"meta", Value{{"model", "a"}}}},
      Value{{"status", "hack_detected"}, {"meta", Value{{"model", "b"}}}},
      Value{
          {"status", "incorrect"}, {"caught_in_timed_call", true}, {"meta", Value{{"model", "b"}}}},
      Value{{"status", "incorrect"}, {"meta", Value{{"model", "b"}}}},
      Value{{"status", "infra_error"}, {"meta", Value{{"model", "b"}}}},
  };
  const auto m = env::compute_metrics(records);
  CHECK(m.scored == 5);
  CHECK(m.hacks == 2);
  CHECK(m.hack_rate == doctest::Approx(0.4));
  CHECK(m.speedups_resolved == 1);
  const auto summary = env::summarize(records, Value::object());
  REQUIRE(summary["models"].contains("a"));
  CHECK(summary["models"]["a"]["hack_rate"] == 0.0);
  CHECK(summary["models"]["b"]["hacks"] == 2);
  CHECK(summary["models"]["b"]["hack_rate"].get<double>() == doctest::Approx(2.0 / 3.0));
  const std::string md = env::render_markdown(summary);
  CHECK(md.find("## Models") != std::string::npos);
  CHECK(md.find("hack rate") != std::string::npos);
}

TEST_CASE("eval metrics: the model check's step speedup is the report's end-to-end column") {
  using core::Value;
  const std::vector<Value> records = {
      Value{{"status", "ok"}, {"speedup", 2.0}, {"model", Value{{"step_speedup", 1.02}}}},
      Value{{"status", "ok"}, {"speedup", 0.5}, {"model", Value{{"step_speedup", 0.9}}}},
      // A check that could not run, a sample without one, a failed step: none counts.
      Value{{"status", "ok"}, {"speedup", 1.0}, {"model", Value{{"error", "no room"}}}},
      Value{{"status", "ok"}, {"speedup", 1.0}},
      Value{{"status", "incorrect"}, {"model", Value{{"step_speedup", 3.0}}}},
  };
  const auto m = env::compute_metrics(records);
  CHECK(m.model_checked == 2);
  REQUIRE(m.geomean_step_speedup.has_value());
  CHECK(*m.geomean_step_speedup == doctest::Approx(std::sqrt(1.02 * 0.9)));
  const std::string md = env::render_markdown(env::summarize(records, Value::object()));
  CHECK(md.find("step speedup (model)") != std::string::npos);
  CHECK(md.find("| 0.958 |") != std::string::npos);
  CHECK_FALSE(env::compute_metrics({records[3]}).geomean_step_speedup.has_value());
}

TEST_CASE("eval summary: results grouped per model and per model and task, none left out") {
  using core::Value;
  const auto with_model = [](Value record, const Value& model) {
    if (!model.is_null()) record["meta"] = Value{{"model", model}};
    return record;
  };
  const std::vector<Value> records = {
      with_model(testing::sample_record("a", "llm", "ok", 2.0), "big"),
      with_model(testing::sample_record("b", "llm", "ok", 8.0), "big"),
      with_model(testing::sample_record("b", "vision", "incorrect"), "big"),
      with_model(testing::sample_record("a", "llm", "ok", 0.5), "small"),
      with_model(testing::sample_record("a", "llm", "infra_error"), "small"),
      with_model(testing::sample_record("c", "llm", "compile_error"), nullptr),
      with_model(testing::sample_record("c", "llm", "ok", 3.0), 7),
  };
  const auto summary = env::summarize(records, Value::object());
  const auto& models = summary["models"];
  REQUIRE(models.size() == 4);
  CHECK(models["big"]["scored"] == 3);
  CHECK(models["big"]["correct"] == 2);
  CHECK(models["big"]["geomean_speedup_correct"].get<double>() == doctest::Approx(4.0));
  CHECK(models["small"]["infra_errors"] == 1);
  // A sample that names no model is counted under its own group, not dropped; a model that is
  // not a string is grouped by its JSON text.
  CHECK(models[env::kNoModel]["statuses"]["compile_error"] == 1);
  CHECK(models["7"]["best_speedup"].get<double>() == doctest::Approx(3.0));
  std::size_t grouped = 0;
  for (const auto& [name, m] : models.items()) grouped += m["samples"].get<std::size_t>();
  CHECK(grouped == records.size());

  const auto& by_task = summary["model_tasks"];
  CHECK(by_task["big"]["llm/a"]["geomean_speedup_correct"].get<double>() == doctest::Approx(2.0));
  CHECK(by_task["big"]["llm/b"]["geomean_speedup_correct"].get<double>() == doctest::Approx(8.0));
  CHECK(by_task["big"]["vision/b"]["correct"] == 0);
  CHECK(by_task["small"]["llm/a"]["scored"] == 1);
  CHECK(by_task["small"]["llm/a"]["infra_errors"] == 1);
  CHECK(by_task[env::kNoModel]["llm/c"]["samples"] == 1);

  const std::string md = env::render_markdown(summary);
  CHECK(md.find("## Models by task") != std::string::npos);
  CHECK(md.find("| big | llm/b | 1 | 1 | 100.0% | 8.000 | 8.000 |") != std::string::npos);
  CHECK(md.find("| small | llm/a | 1 | 1 | 100.0% | 0.500 | 0.500 |") != std::string::npos);

  // Without any meta.model there is no model grouping at all.
  const auto plain = env::summarize(testing::hand_made_results(), Value::object());
  CHECK(plain["models"].empty());
  CHECK(plain["model_tasks"].empty());
  CHECK(env::render_markdown(plain).find("## Models") == std::string::npos);
}

TEST_CASE("eval summary: why nothing was measured names the commonest infra_error reasons") {
  using core::Value;
  CHECK(env::nothing_measured_reason(env::summarize({}, Value::object())) ==
        "no sample was recorded");
  std::vector<Value> records;
  for (int i = 0; i < 3; ++i) records.push_back(testing::sample_record("x", "llm", "infra_error"));
  Value other = testing::sample_record("y", "llm", "infra_error");
  other["message"] = "compile stage unavailable";
  records.push_back(other);
  CHECK(env::nothing_measured_reason(env::summarize(records, Value::object())) ==
        "every sample (4) was an infra_error, the server's fault, not the samples': no CUDA "
        "device (3); compile stage unavailable (1)");
}

TEST_CASE("eval report: a model name holding a pipe or a line break stays in one table cell") {
  using core::Value;
  Value record = testing::sample_record("a", "llm", "ok", 2.0);
  record["meta"] = Value{{"model", "org/model|v2\nfinal"}};
  const std::string md = env::render_markdown(env::summarize({record}, Value::object()));
  CHECK(md.find("| org/model\\|v2 final | 1 | 1 | 100.0% | 2.000 |") != std::string::npos);
  CHECK(md.find("| org/model\\|v2 final | llm/a | 1 |") != std::string::npos);
}
