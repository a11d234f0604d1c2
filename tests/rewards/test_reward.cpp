// The default staged reward, table-driven, and the spec parser's errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "rewards/reward.hpp"

using namespace crucible;
using core::StepStatus;

TEST_CASE("reward: the default staged reward over every status and speedup edge") {
  struct Case {
    const char* name;
    StepStatus status;
    std::optional<double> speedup;
    double total;
    bool infra;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Case cases[] = {
      {"parity earns exactly the correctness reward", StepStatus::kOk, 1.0, 1.0, false},
      {"twice as fast", StepStatus::kOk, 2.0, 1.5, false},
      {"eight times as fast hits the cap", StepStatus::kOk, 8.0, 2.5, false},
      {"a thousand times as fast stays capped", StepStatus::kOk, 1000.0, 2.5, false},
      {"half speed", StepStatus::kOk, 0.5, 0.5, false},
      {"very slow is floored above every failure", StepStatus::kOk, 1e-6, 0.5, false},
      {"speedup 0 gives no speed term", StepStatus::kOk, 0.0, 1.0, false},
      {"speedup inf gives no speed term", StepStatus::kOk, inf, 1.0, false},
      {"speedup NaN gives no speed term", StepStatus::kOk, nan, 1.0, false},
      {"missing speedup gives no speed term", StepStatus::kOk, std::nullopt, 1.0, false},
      {"invalid action", StepStatus::kInvalidAction, std::nullopt, -1.0, false},
      {"compile error", StepStatus::kCompileError, std::nullopt, -1.0, false},
      {"launch error", StepStatus::kLaunchError, std::nullopt, -0.8, false},
      {"runtime error", StepStatus::kRuntimeError, std::nullopt, -0.8, false},
      {"timeout", StepStatus::kTimeout, std::nullopt, -0.8, false},
      {"incorrect", StepStatus::kIncorrect, std::nullopt, -0.5, false},
      {"hack detected", StepStatus::kHackDetected, std::nullopt, -2.0, false},
      {"a speedup on a failure is ignored", StepStatus::kIncorrect, 100.0, -0.5, false},
      {"infra error is free and marked", StepStatus::kInfraError, std::nullopt, 0.0, true},
  };
  const auto spec = rewards::default_reward_spec();
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto reward = rewards::compute_reward(spec, {c.status, c.speedup});
    CHECK(reward.total == doctest::Approx(c.total));
    CHECK(std::isfinite(reward.total));
    CHECK(reward.infra == c.infra);
    CHECK(reward.preset == "default");
  }
}

TEST_CASE("reward: the breakdown names every term") {
  const auto reward =
      rewards::compute_reward(rewards::default_reward_spec(), {StepStatus::kOk, 4.0});
  const auto value = reward.to_value();
  CHECK(value["terms"]["correct"] == 1.0);
  CHECK(value["terms"]["speed"].get<double>() == doctest::Approx(1.0));
  CHECK(value["terms"]["speedup"] == 4.0);
  CHECK(value["total"].get<double>() == doctest::Approx(2.0));
}

TEST_CASE("reward spec: overrides apply and bad specs are refused with the key named") {
  auto spec = rewards::parse_reward_spec(
      core::Value{{"correct", 2.0}, {"speed_cap", 1.0}, {"penalty", {{"incorrect", -3.0}}}});
  REQUIRE(spec.ok());
  CHECK(rewards::compute_reward(*spec, {StepStatus::kOk, 16.0}).total == doctest::Approx(2.5));
  CHECK(rewards::compute_reward(*spec, {StepStatus::kIncorrect, {}}).total == -3.0);

  struct Bad {
    core::Value spec;
    const char* message;
  };
  const Bad bad[] = {
      {"default", "reward spec: must be a map"},
      {{{"preset", "kevins"}},
       "reward spec: unknown preset 'kevins'; known presets: default, fast_p, kevin, drkernel, "
       "kernrl, sol, amdahl"},
      {{{"corect", 1.0}},
       "reward spec: unknown key 'corect'; known keys: preset, correct, speed_weight, "
       "speed_floor, speed_cap, penalty, resolved_speedup_only, improvement, improvement_weight"},
      {{{"correct", "1"}}, "reward spec: 'correct' must be a number"},
      {{{"penalty", {{"ok", 1.0}}}}, "reward spec: 'penalty' names unknown failure status 'ok'"},
      {{{"penalty", {{"wrong", 1.0}}}},
       "reward spec: 'penalty' names unknown failure status 'wrong'"},
      {{{"speed_floor", 2.0}, {"speed_cap", 1.0}},
       "reward spec: 'speed_floor' exceeds 'speed_cap'"},
  };
  for (const auto& b : bad) {
    const auto parsed = rewards::parse_reward_spec(b.spec);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code == core::ErrorCode::kInvalidArgument);
    CHECK(parsed.error().message == b.message);
  }
}

TEST_CASE("reward: resolved_speedup_only gives speed credit only when the interval excludes 1") {
  auto spec = rewards::parse_reward_spec(core::Value{{"resolved_speedup_only", true}});
  REQUIRE(spec.ok());
  CHECK(rewards::reward_spec_to_value(*spec)["resolved_speedup_only"] == true);
  rewards::Measurement noisy(StepStatus::kOk, 1.02);
  noisy.speedup_low = 0.99, noisy.speedup_high = 1.05;
  const auto at_parity = rewards::compute_reward(*spec, noisy);
  CHECK(at_parity.total == doctest::Approx(1.0));  // scored as speedup 1.0
  CHECK(at_parity.terms["speedup_resolved"] == false);
  rewards::Measurement faster(StepStatus::kOk, 2.0);
  faster.speedup_low = 1.9, faster.speedup_high = 2.1;
  const auto credited = rewards::compute_reward(*spec, faster);
  CHECK(credited.total == doctest::Approx(1.5));
  CHECK(credited.terms["speedup_resolved"] == true);
  rewards::Measurement slower(StepStatus::kOk, 0.5);
  slower.speedup_low = 0.45, slower.speedup_high = 0.55;
  CHECK(rewards::compute_reward(*spec, slower).total == doctest::Approx(0.5));
  // Without the option, or without an interval, the point estimate is scored as before.
  CHECK(rewards::compute_reward(rewards::default_reward_spec(), noisy).total ==
        doctest::Approx(1.0 + 0.5 * std::log2(1.02)));
  CHECK(rewards::compute_reward(*spec, rewards::Measurement(StepStatus::kOk, 1.02)).total ==
        doctest::Approx(1.0 + 0.5 * std::log2(1.02)));
  // Any preset takes it.
  auto kevin =
      rewards::parse_reward_spec(core::Value{{"preset", "kevin"}, {"resolved_speedup_only", true}});
  REQUIRE(kevin.ok());
  CHECK(rewards::compute_reward(*kevin, noisy).terms["speedup_resolved"] == false);
  CHECK_FALSE(rewards::parse_reward_spec(core::Value{{"resolved_speedup_only", 1}}).ok());
}
