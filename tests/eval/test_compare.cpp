// crucible eval compare: correct rates, geometric-mean speedups, their ratio and its timing
// noise, worked out by hand on small result sets.
#include <doctest/doctest.h>

#include <cmath>

#include "env/cli/compare.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;
using core::Value;

namespace {

constexpr double kZ = 1.959963984540054;

// A result record whose speedup's 95 % interval has log-sigma `sigma`.
Value record(const std::string& id, const std::string& task, const std::string& status,
             double speedup = 0.0, double sigma = 0.0) {
  Value r{{"sample_id", id},
          {"task", task},
          {"category", task.substr(0, task.find('/'))},
          {"status", status},
          {"message", ""}};
  if (speedup > 0.0) {
    r["speedup"] = speedup;
    r["speedup_ci95"] = {{"low", speedup * std::exp(-kZ * sigma)},
                         {"high", speedup * std::exp(kZ * sigma)}};
  }
  return r;
}

// A: t/one ok 2.0, 2.0 (sigma 0.05); t/two ok 1.0 (0.01), incorrect; t/three only here.
// B: t/one ok 2.2, 2.2 (0.05) and an infra_error; t/two ok 0.8, 0.8 (0.01); t/four only here.
std::vector<Value> side_a() {
  return {record("a1", "t/one", "ok", 2.0, 0.05), record("a2", "t/one", "ok", 2.0, 0.05),
          record("x1", "t/two", "ok", 1.0, 0.01), record("x2", "t/two", "incorrect"),
          record("a5", "t/three", "ok", 3.0, 0.01)};
}
std::vector<Value> side_b() {
  return {record("b1", "t/one", "ok", 2.2, 0.05), record("b2", "t/one", "ok", 2.2, 0.05),
          record("b3", "t/one", "infra_error"),   record("x1", "t/two", "ok", 0.8, 0.01),
          record("x2", "t/two", "ok", 0.8, 0.01), record("b6", "t/four", "compile_error")};
}

double num(const Value& v) { return v.get<double>(); }

}  // namespace

TEST_CASE("eval compare: per-task ratios, their noise and the verdict follow the documented math") {
  const auto c = env::compare_results(side_a(), side_b(), {{"path", "A"}}, {{"path", "B"}});
  CHECK(c["only_in_a"] == Value::array({"t/three"}));
  CHECK(c["only_in_b"] == Value::array({"t/four"}));
  REQUIRE(c["tasks"].size() == 2);

  // t/one: 2.2 / 2.0 = +10 %, but each side's geomean has sigma sqrt(2 * 0.05^2) / 2, so the
  // ratio's sigma is 0.05 and its interval (0.997, 1.213) holds 1: within noise.
  const Value& one = c["tasks"]["t/one"]["speedup_correct"];
  CHECK(num(one["ratio"]) == doctest::Approx(1.1));
  CHECK(num(one["difference"]) == doctest::Approx(0.2));
  CHECK(num(one["ratio_ci95"]["low"]) == doctest::Approx(1.1 * std::exp(-kZ * 0.05)));
  CHECK(num(one["ratio_ci95"]["high"]) == doctest::Approx(1.1 * std::exp(kZ * 0.05)));
  CHECK(num(one["noise_pct"]) == doctest::Approx(100 * (std::exp(kZ * 0.05) - 1)));
  CHECK(one["verdict"] == "within noise");
  CHECK(c["tasks"]["t/one"]["b"]["scored"] == 2);  // the infra_error takes no part

  // t/two: 0.8 against 1.0, sigma sqrt(0.01^2 + 2 * 0.01^2 / 4): B is slower beyond noise;
  // B's correct rate is 50 points higher and one sample of the same id turned correct.
  const Value& two = c["tasks"]["t/two"];
  const double sigma_two = std::sqrt(0.0001 + 0.0002 / 4);
  CHECK(num(two["speedup_correct"]["ratio"]) == doctest::Approx(0.8));
  CHECK(num(two["speedup_correct"]["ratio_ci95"]["high"]) ==
        doctest::Approx(0.8 * std::exp(kZ * sigma_two)));
  CHECK(two["speedup_correct"]["verdict"] == "B slower");
  CHECK(num(two["correct_rate_delta"]) == doctest::Approx(0.5));
  CHECK(two["pairs"]["matched"] == 2);
  CHECK(two["pairs"]["ok_only_in_b"] == 1);
  CHECK(two["pairs"]["ok_only_in_a"] == 0);
  // Over all scored samples A's failure counts as 1.0: A = sqrt(1 * 1) = 1, B = 0.8.
  CHECK(num(two["speedup_all"]["a"]) == doctest::Approx(1.0));
  CHECK(num(two["speedup_all"]["ratio"]) == doctest::Approx(0.8));

  // Overall, over the two common tasks only: A = (2 * 2 * 1)^(1/3), B = (2.2^2 * 0.8^2)^(1/4).
  const Value& overall = c["overall"]["speedup_correct"];
  const double a = std::cbrt(4.0), b = std::sqrt(2.2 * 0.8);
  const double sigma = std::sqrt((2 * 0.0025 + 0.0001) / 9 + (2 * 0.0025 + 2 * 0.0001) / 16);
  CHECK(num(overall["a"]) == doctest::Approx(a));
  CHECK(num(overall["b"]) == doctest::Approx(b));
  CHECK(num(overall["ratio_ci95"]["low"]) == doctest::Approx(b / a * std::exp(-kZ * sigma)));
  CHECK(overall["verdict"] == "B slower");
  CHECK(c["overall"]["a"]["scored"] == 4);
  CHECK(c["overall"]["b"]["scored"] == 4);
  CHECK(num(c["overall"]["correct_rate_delta"]) == doctest::Approx(1.0 - 0.75));
}

TEST_CASE("eval compare: missing data and missing intervals are said, never guessed at") {
  // No correct sample on one side: no ratio, verdict "no data".
  auto c = env::compare_results({record("a", "t/x", "incorrect")}, {record("b", "t/x", "ok", 1.5)},
                                {}, {});
  CHECK(c["tasks"]["t/x"]["speedup_correct"]["verdict"] == "no data");
  CHECK(c["tasks"]["t/x"]["speedup_correct"]["ratio"].is_null());
  // Speedups without any interval: a ratio, but the noise is unknown.
  Value bare_a = record("a", "t/x", "ok", 1.0);
  Value bare_b = record("b", "t/x", "ok", 1.5);
  bare_a.erase("speedup_ci95");
  bare_b.erase("speedup_ci95");
  c = env::compare_results({bare_a}, {bare_b}, {}, {});
  CHECK(num(c["tasks"]["t/x"]["speedup_correct"]["ratio"]) == doctest::Approx(1.5));
  CHECK(c["tasks"]["t/x"]["speedup_correct"]["verdict"] == "noise unknown");
  CHECK(c["tasks"]["t/x"]["a"]["without_interval"] == 1);
  // One sample without an interval next to one with: it is given the other's noise.
  c = env::compare_results({record("a1", "t/x", "ok", 1.0, 0.02), bare_a},
                           {record("b1", "t/x", "ok", 1.0, 0.02)}, {}, {});
  const double sigma = std::sqrt(2 * 0.0004 / 4 + 0.0004);
  CHECK(num(c["tasks"]["t/x"]["speedup_correct"]["noise_pct"]) ==
        doctest::Approx(100 * (std::exp(kZ * sigma) - 1)));
}

TEST_CASE("eval compare: a sample's noise comes from its interval, else its per-case intervals") {
  CHECK(*env::speedup_log_sigma(record("a", "t/x", "ok", 2.0, 0.03)) == doctest::Approx(0.03));
  // Per-case intervals combined with normalised weights 1/4 and 3/4, as the runner combines them.
  Value cases = Value::array();
  for (const auto& [speedup, weight, sigma] :
       {std::tuple{2.0, 1.0, 0.04}, std::tuple{1.0, 3.0, 0.02}}) {
    cases.push_back(Value{
        {"speedup", speedup},
        {"weight", weight},
        {"speedup_ci95",
         {{"low", speedup * std::exp(-kZ * sigma)}, {"high", speedup * std::exp(kZ * sigma)}}}});
  }
  Value r = record("a", "t/x", "ok", 1.2);
  r.erase("speedup_ci95");
  r["result"] = {{"timing", {{"cases", cases}}}};
  CHECK(*env::speedup_log_sigma(r) ==
        doctest::Approx(std::sqrt(0.0625 * 0.0016 + 0.5625 * 0.0004)));
  r["result"]["timing"]["speedup_ci95"] = {{"low", 1.0}, {"high", 1.0 * std::exp(2 * kZ * 0.1)}};
  CHECK(*env::speedup_log_sigma(r) == doctest::Approx(0.1));
  r.erase("result");
  CHECK_FALSE(env::speedup_log_sigma(r).has_value());
}

TEST_CASE("eval compare: the Markdown says each verdict, dashes stand for absent values") {
  const auto md = env::render_compare_markdown(
      env::compare_results(side_a(), side_b(), {{"path", "runs/a"}}, {{"path", "runs/b"}}));
  CHECK(md.find("- A: `runs/a` (5 samples)") != std::string::npos);
  CHECK(md.find("## Overall (the 2 tasks both evaluated)") != std::string::npos);
  CHECK(md.find("| correct rate | 75.0% | 100.0% | +25.0 pts | | | |") != std::string::npos);
  CHECK(md.find("| t/one | 2 | 2 | 100.0% | 100.0% | +0.0 pts | 2.000 | 2.200 | +10.0% | ±10.3% "
                "| within noise |") != std::string::npos);
  CHECK(md.find("| t/two | 2 | 2 | 50.0% | 100.0% | +50.0 pts | 1.000 | 0.800 | -20.0% |") !=
        std::string::npos);
  CHECK(md.find("B slower") != std::string::npos);
  CHECK(md.find("Only in A (left out of the overall figures): t/three") != std::string::npos);
  CHECK(md.find("Only in B (left out of the overall figures): t/four") != std::string::npos);
  CHECK(md.find("correct only in B: 1") != std::string::npos);
  CHECK(md.find("n/a") == std::string::npos);

  const auto empty = env::render_compare_markdown(env::compare_results(
      {record("a", "t/x", "incorrect")}, {record("b", "t/x", "compile_error")}, {}, {}));
  CHECK(empty.find("| t/x | 1 | 1 | 0.0% | 0.0% | +0.0 pts | - | - | - | - | no data |") !=
        std::string::npos);
}

#ifdef CRUCIBLE_EXE
TEST_CASE(
    "eval compare CLI: folders or results.jsonl files, Markdown or --json, exit 2 on bad "
    "input") {
  const auto dir = testing::fresh_dir("cli-compare");
  std::string a_text, b_text;
  for (const auto& r : side_a()) a_text += r.dump() + "\n";
  for (const auto& r : side_b()) b_text += r.dump() + "\n";
  testing::write_file(dir / "a" / "results.jsonl", a_text);
  testing::write_file(dir / "b.jsonl", b_text);
  const std::string cli = std::string(CRUCIBLE_EXE) + " eval compare ";
  std::string output;
  int rc = testing::run_command(
      cli + "'" + (dir / "a").string() + "' '" + (dir / "b.jsonl").string() + "'", &output);
  REQUIRE_MESSAGE(rc == 0, output);
  CHECK(output.find("# crucible eval compare") != std::string::npos);
  CHECK(output.find("| t/one | 2 | 2 |") != std::string::npos);

  rc = testing::run_command(
      cli + "--json '" + (dir / "a").string() + "' '" + (dir / "b.jsonl").string() + "'", &output);
  REQUIRE_MESSAGE(rc == 0, output);
  const auto json = Value::parse(output, nullptr, false);
  REQUIRE(json.is_object());
  CHECK(json["tasks"]["t/one"]["speedup_correct"]["verdict"] == "within noise");
  CHECK(json["a"]["path"] == (dir / "a").string());

  rc = testing::run_command(
      cli + "'" + (dir / "nowhere").string() + "' '" + (dir / "b.jsonl").string() + "'", &output);
  CHECK(rc == 2);
  CHECK(output.find("crucible eval compare: " + (dir / "nowhere").string() + " does not exist") !=
        std::string::npos);
  std::filesystem::create_directories(dir / "empty");
  rc = testing::run_command(
      cli + "'" + (dir / "empty").string() + "' '" + (dir / "b.jsonl").string() + "'", &output);
  CHECK(rc == 2);
  CHECK(output.find("holds no results.jsonl") != std::string::npos);
  testing::write_file(dir / "bad.jsonl", "{\"sample_id\": 1, \"status\": \"ok\"}\n");
  rc = testing::run_command(
      cli + "'" + (dir / "bad.jsonl").string() + "' '" + (dir / "b.jsonl").string() + "'", &output);
  CHECK(rc == 2);
  CHECK(output.find("bad.jsonl:1: field 'sample_id' must be a string") != std::string::npos);
}
#endif
