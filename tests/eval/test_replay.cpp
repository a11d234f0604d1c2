// crucible replay: rewards re-scored from logged measurements, re-measurement drift, log versions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/checksum.hpp"
#include "env/cli/replay.hpp"
#include "env/trajectory_log.hpp"
#include "tests/env/server_fixture.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;

namespace {

const std::string kRmsNormSource =
    testing::read_file(CRUCIBLE_SOURCE_DIR "/tasks/llm/rms_norm/solution.cu");

core::Value logged_step(int step, const std::string& status, double speedup = 0.0) {
  const auto spec = rewards::default_reward_spec();
  rewards::Measurement m;
  m.status = *core::step_status_from_name(status);
  if (speedup > 0) m.speedup = speedup;
  const auto reward = rewards::compute_reward(spec, m);
  core::Value result{{"status", status}, {"message", ""}, {"reward", reward.to_value()}};
  if (speedup > 0) result["speedup"] = speedup;
  return core::Value{{"kind", "step"},       {"task", "llm/rms_norm"},
                     {"seed", 11},           {"source", kRmsNormSource},
                     {"plan", nullptr},      {"reward_spec", rewards::reward_spec_to_value(spec)},
                     {"result", result},     {"reward", reward.total},
                     {"episode", "ep-test"}, {"step", step}};
}

std::filesystem::path write_log(const std::vector<core::Value>& records) {
  const auto path = testing::fresh_dir("log") / "trajectories.log";
  auto log = env::TrajectoryLog::open(path, false);
  REQUIRE(log.ok());
  for (const auto& record : records) REQUIRE((*log)->append(record).ok());
  return path;
}

std::vector<core::Value> three_steps() {
  return {logged_step(1, "ok", 2.0), logged_step(2, "incorrect"), logged_step(3, "infra_error")};
}

double new_reward(const core::Value& replay, std::size_t i) {
  return replay["steps"][i]["new_reward"].get<double>();
}

}  // namespace

TEST_CASE("replay --rescore: the same spec reproduces the logged rewards exactly") {
  auto loaded = env::load_log(write_log(three_steps()));
  REQUIRE(loaded.ok());
  REQUIRE(loaded->records.size() == 3);
  const auto replay = env::rescore_log(loaded->records, rewards::default_reward_spec());
  CHECK(replay["summary"]["changed"] == 0);
  CHECK(replay["summary"]["mean_delta"].get<double>() == doctest::Approx(0.0));
  CHECK(new_reward(replay, 0) == doctest::Approx(1.5));  // 1 + 0.5 * log2(2)
}

TEST_CASE("replay --rescore: another spec changes the rewards as that spec says") {
  auto loaded = env::load_log(write_log(three_steps()));
  REQUIRE(loaded.ok());
  struct Case {
    const char* spec;
    double ok, incorrect, infra;
  };
  const std::vector<Case> cases = {
      {R"({"speed_weight": 1.0})", 2.0, -1e9, 0.0},  // 1 + 1 * log2(2)
      {R"({"correct": 3.0, "speed_weight": 0.0})", 3.0, -1e9, 0.0},
      {R"({"penalty": {"incorrect": -0.7}})", 1.5, -0.7, 0.0},
      {R"({"speed_cap": 0.5})", 1.25, -1e9, 0.0},  // log2(2) capped at 0.5
  };
  for (const auto& c : cases) {
    CAPTURE(c.spec);
    auto spec = rewards::parse_reward_spec(core::Value::parse(c.spec));
    REQUIRE(spec.ok());
    const auto replay = env::rescore_log(loaded->records, *spec);
    CHECK(new_reward(replay, 0) == doctest::Approx(c.ok));
    if (c.incorrect > -1e8) CHECK(new_reward(replay, 1) == doctest::Approx(c.incorrect));
    CHECK(new_reward(replay, 2) == doctest::Approx(c.infra));  // infra_error is never penalised
    CHECK(replay["steps"][0]["delta"].get<double>() ==
          doctest::Approx(c.ok - replay["steps"][0]["old_reward"].get<double>()));
    CHECK(replay["summary"]["by_status"]["ok"]["mean_new"].get<double>() == doctest::Approx(c.ok));
  }
  const auto table = env::format_replay(env::rescore_log(
      loaded->records,
      *rewards::parse_reward_spec(core::Value::parse(R"({"speed_weight": 1.0})"))));
  CHECK(table.find("mean reward") != std::string::npos);
  CHECK(table.find("2.000") != std::string::npos);
}

namespace {

// A logged ok step whose timing report has two cases, weights 1 and 1: candidate medians 100
// and 400 ns, reference 200 and 800 ns, floors 50 and 200 ns. Their weighted geometric means
// are 200, 400 and 100 ns, so the sol score is (400 - 200) / (400 - 100) = 2/3.
core::Value timed_step(int step) {
  core::Value record = logged_step(step, "ok", 2.0);
  core::Value cases = core::Value::array();
  for (const auto& [candidate, reference, floor] :
       {std::tuple{100.0, 200.0, 50.0}, std::tuple{400.0, 800.0, 200.0}}) {
    cases.push_back(core::Value{{"case", "c"},
                                {"weight", 1.0},
                                {"candidate", {{"median_ns", candidate}}},
                                {"reference", {{"median_ns", reference}}},
                                {"floor_ns", floor},
                                {"speedup", reference / candidate}});
  }
  record["result"]["timing"] = {{"cases", cases}, {"speedup", 2.0}};
  return record;
}

rewards::RewardSpec sol_spec() {
  auto spec = rewards::parse_reward_spec(core::Value{{"preset", "sol"}});
  REQUIRE(spec.ok());
  return *spec;
}

}  // namespace

TEST_CASE("replay --rescore: the sol preset scores from the logged timing, no GPU needed") {
  auto loaded = env::load_log(
      write_log({timed_step(1), logged_step(2, "ok", 2.0), logged_step(3, "incorrect")}));
  REQUIRE(loaded.ok());
  const auto replay = env::rescore_log(loaded->records, sol_spec());
  const auto& timed = replay["steps"][0];
  CHECK(timed["new_reward"].get<double>() == doctest::Approx(2.0 / 3.0));
  CHECK(timed["terms"]["candidate_ns"].get<double>() == doctest::Approx(200.0));
  CHECK(timed["terms"]["reference_ns"].get<double>() == doctest::Approx(400.0));
  CHECK(timed["terms"]["floor_ns"].get<double>() == doctest::Approx(100.0));
  CHECK_FALSE(timed["terms"].contains("missing"));
  // A correct step logged without its timing report cannot be scored by sol: 0, and said so.
  CHECK(replay["steps"][1]["new_reward"].get<double>() == 0.0);
  CHECK(replay["steps"][1]["terms"]["missing"].size() == 3);  // all three times
  CHECK(replay["steps"][2]["new_reward"].get<double>() ==
        rewards::compute_reward(sol_spec(), {core::StepStatus::kIncorrect}).total);
  CHECK(replay["summary"]["ok_with_times"] == 1);
  CHECK(replay["summary"]["ok_without_times"] == 1);
  const auto table = env::format_replay(replay);
  CHECK(table.find("1 correct step logged no reference and floor times") != std::string::npos);
}

TEST_CASE("replay: the step table shows task ids whole, however long") {
  const std::string task = "llm/a_task_id_that_is_much_longer_than_twenty_characters";
  core::Value step = logged_step(1, "ok", 2.0);
  step["task"] = task;
  auto loaded = env::load_log(write_log({step, logged_step(2, "incorrect")}));
  REQUIRE(loaded.ok());
  const auto table = env::format_replay(env::rescore_log(loaded->records, sol_spec()));
  CHECK(table.find(" " + task + " ok ") != std::string::npos);
  // The columns stay aligned: every row's status starts where the header's does.
  const auto header_status = table.find("status");
  const auto first_row = table.find('\n') + 1;
  CHECK(table.find(" ok ", first_row) - first_row + 1 == header_status);
}

TEST_CASE("replay: re-measuring without a GPU reports every step's drift truthfully") {
  auto loaded = env::load_log(write_log(three_steps()));
  REQUIRE(loaded.ok());
  const auto pipeline = testing::no_gpu_pipeline(false);
  const auto replay = env::remeasure_log(loaded->records, testing::shared_registry(), pipeline, 2);
  const auto& summary = replay["summary"];
  CHECK(summary["compared"] == 3);
  CHECK(summary["status_flips"] == 2);  // ok -> infra_error, incorrect -> infra_error
  CHECK(summary["correct_flips"] == 1);
  CHECK(summary["new_infra_errors"] == 2);
  CHECK(summary["flips"]["ok->infra_error"] == 1);
  CHECK(summary["speedup_ratio"]["count"] == 0);
  CHECK(summary["reward_delta"]["max_abs"].get<double>() == doctest::Approx(1.5));
  CHECK(replay["steps"][2]["flipped"] == false);
  const auto table = env::format_replay(replay);
  CHECK(table.find("status flips 2 (correct kernels that flipped: 1") != std::string::npos);
}

TEST_CASE("replay: a log of a newer format is refused with a message saying so") {
  const auto path = write_log(three_steps());
  std::string bytes = testing::read_file(path);
  bytes[8] = 42;  // format version, then a valid header checksum so only the version is wrong
  const std::uint32_t crc = core::crc32c(std::string_view(bytes.data(), 12));
  for (int i = 0; i < 4; ++i) bytes[12 + i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  testing::write_file(path, bytes);
  auto loaded = env::load_log(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().message.find("cannot replay") != std::string::npos);
  CHECK(loaded.error().message.find("uses log format 42") != std::string::npos);
  CHECK(loaded.error().message.find("use a newer crucible") != std::string::npos);
#ifdef CRUCIBLE_EXE
  std::string output;
  const int rc = testing::run_command(
      std::string(CRUCIBLE_EXE) + " replay --rescore -o - '" + path.string() + "'", &output);
  CHECK(rc == 2);
  CHECK(output.find("crucible replay: cannot replay") != std::string::npos);
  CHECK(output.find("use a newer crucible") != std::string::npos);
#endif
}

#ifdef CRUCIBLE_EXE
TEST_CASE("replay CLI: --rescore on the committed example log writes the JSON it prints") {
  const std::string log = CRUCIBLE_SOURCE_DIR "/examples/trajectories/trajectories.log";
  REQUIRE(std::filesystem::exists(log));
  const auto out = testing::fresh_dir("cli") / "replay.json";
  std::string output;
  const int rc =
      testing::run_command(std::string(CRUCIBLE_EXE) +
                               " replay --rescore --reward '{\"penalty\": {\"compile_error\": "
                               "-2.0}}' -o '" +
                               out.string() + "' '" + log + "'",
                           &output);
  REQUIRE_MESSAGE(rc == 0, output);
  const auto replay = core::Value::parse(testing::read_file(out));
  CHECK(replay["mode"] == "rescore");
  CHECK(replay["summary"]["steps"].get<int>() >= 5);
  for (const auto& step : replay["steps"]) {
    if (step["status"] == "compile_error") CHECK(step["new_reward"].get<double>() == -2.0);
  }
  CHECK(output.find("mean reward") != std::string::npos);
}

TEST_CASE("replay CLI: the committed H200 log of 110 steps rescores from its measurements") {
  // Recorded on an H200 (bench/gpu/device_run.sh trajectory): every step's speedup is in the
  // log, so another preset's rewards follow from it on any machine. kevin: 0.3 for a correct
  // kernel plus the speedup capped at 10 (docs/rewards.md).
  const std::string log = CRUCIBLE_SOURCE_DIR "/examples/trajectories/h200_run.log";
  REQUIRE(std::filesystem::exists(log));
  const auto out = testing::fresh_dir("cli-h200") / "replay.json";
  std::string output;
  const int rc = testing::run_command(std::string(CRUCIBLE_EXE) +
                                          " replay --rescore --reward '{\"preset\": \"kevin\"}' "
                                          "--rows 0 -o '" +
                                          out.string() + "' '" + log + "'",
                                      &output);
  REQUIRE_MESSAGE(rc == 0, output);
  const auto replay = core::Value::parse(testing::read_file(out));
  CHECK(replay["log"]["read"]["records"] == 110);
  CHECK(replay["log"]["read"]["torn_tail"] == false);
  CHECK(replay["summary"]["steps"] == 110);
  std::size_t correct = 0;
  for (const auto& step : replay["steps"]) {
    if (step["status"] != "ok") {
      CHECK(step["new_reward"].get<double>() <= 0.0);
      continue;
    }
    ++correct;
    REQUIRE(step["speedup"].is_number());
    const double speedup = step["speedup"].get<double>();
    CHECK(speedup > 0.0);
    CHECK(step["new_reward"].get<double>() ==
          doctest::Approx(0.3 + std::min(speedup, 10.0)).epsilon(1e-9));
  }
  CHECK(correct == 68);
}

TEST_CASE("replay CLI: the committed H200 log rescores with the sol preset from its timings") {
  // Every correct step of the log carries its timing report (per-case medians and roofline
  // floors), which is all the sol preset needs: each is scored, none is missing a time.
  const std::string log = CRUCIBLE_SOURCE_DIR "/examples/trajectories/h200_run.log";
  const auto out = testing::fresh_dir("cli-h200-sol") / "replay.json";
  std::string output;
  const int rc = testing::run_command(std::string(CRUCIBLE_EXE) +
                                          " replay --rescore --reward '{\"preset\": \"sol\"}' "
                                          "--rows 0 -o '" +
                                          out.string() + "' '" + log + "'",
                                      &output);
  REQUIRE_MESSAGE(rc == 0, output);
  const auto replay = core::Value::parse(testing::read_file(out));
  CHECK(replay["summary"]["ok_with_times"] == 68);
  CHECK(replay["summary"]["ok_without_times"] == 0);
  CHECK(output.find("logged no reference and floor times") == std::string::npos);
  // One step checked against times recomputed here from the log's own timing report.
  auto loaded = env::load_log(log);
  REQUIRE(loaded.ok());
  std::size_t checked = 0;
  for (const auto& step : replay["steps"]) {
    if (step["status"] != "ok") continue;
    CHECK_FALSE(step["terms"].contains("missing"));
    const double score = step["new_reward"].get<double>();
    CHECK(score >= 0.0);
    CHECK(score <= 1.0);
    if (checked++ > 0) continue;
    const auto& cases =
        loaded->records[step["index"].get<std::size_t>()]["result"]["timing"]["cases"];
    double log_sum[3] = {0, 0, 0}, weights = 0;
    for (const auto& c : cases) {
      const double w = c["weight"].get<double>();
      weights += w;
      log_sum[0] += w * std::log(c["candidate"]["median_ns"].get<double>());
      log_sum[1] += w * std::log(c["reference"]["median_ns"].get<double>());
      log_sum[2] += w * std::log(c["floor_ns"].get<double>());
    }
    const double candidate = std::exp(log_sum[0] / weights);
    const double reference = std::exp(log_sum[1] / weights);
    const double floor = std::exp(log_sum[2] / weights);
    CHECK(step["terms"]["reference_ns"].get<double>() == doctest::Approx(reference));
    CHECK(score ==
          doctest::Approx(std::clamp((reference - candidate) / (reference - floor), 0.0, 1.0)));
  }
  CHECK(checked == 68);
}

TEST_CASE("eval CLI: the example solutions evaluate and write every report file") {
  const auto out = testing::fresh_dir("cli-eval");
  std::string output;
  const int rc = testing::run_command(
      std::string(CRUCIBLE_EXE) + " --home '" CRUCIBLE_SOURCE_DIR "' eval --no-compile -o '" +
          out.string() + "' '" CRUCIBLE_SOURCE_DIR "/examples/trajectories/solutions.jsonl'",
      &output);
  REQUIRE_MESSAGE(rc == 0, output);
  for (const char* name : {"results.jsonl", "summary.json", "report.md", "report.html"}) {
    CAPTURE(name);
    CHECK(std::filesystem::exists(out / name));
  }
  CHECK(output.find("infra_error") != std::string::npos);
}
#endif
