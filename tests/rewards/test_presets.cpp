// The published-formula presets, their spec errors and multi-turn shaping, table-driven.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "rewards/reward.hpp"

using namespace crucible;
using core::StepStatus;
using core::Value;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

rewards::RewardSpec spec_of(const Value& value) {
  auto spec = rewards::parse_reward_spec(value);
  INFO("spec: " << value.dump());
  REQUIRE(spec.ok());
  return std::move(spec).value();
}

rewards::Measurement ok(std::optional<double> speedup) { return {StepStatus::kOk, speedup}; }

rewards::Measurement timed(std::optional<double> speedup, std::optional<double> candidate,
                           std::optional<double> reference, std::optional<double> floor) {
  rewards::Measurement m{StepStatus::kOk, speedup};
  m.candidate_ns = candidate;
  m.reference_ns = reference;
  m.floor_ns = floor;
  return m;
}

struct Case {
  const char* name;
  Value spec;
  rewards::Measurement measurement;
  double total;
};

void check_cases(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto spec = spec_of(c.spec);
    const auto reward = rewards::compute_reward(spec, c.measurement);
    CAPTURE(reward.to_value().dump());
    CHECK(std::isfinite(reward.total));
    CHECK(reward.total == doctest::Approx(c.total));
    CHECK(reward.base == doctest::Approx(c.total));
    CHECK(reward.preset == spec.preset);
    CHECK(reward.terms.is_object());
    CHECK_FALSE(reward.terms.empty());
  }
}

const StepStatus kFailures[] = {StepStatus::kInvalidAction, StepStatus::kCompileError,
                                StepStatus::kLaunchError,   StepStatus::kRuntimeError,
                                StepStatus::kTimeout,       StepStatus::kIncorrect,
                                StepStatus::kHackDetected};

}  // namespace

TEST_CASE("presets: KernelBench fast_p is 1 only when correct and faster than p") {
  const Value fast1{{"preset", "fast_p"}};
  const Value fast15{{"preset", "fast_p"}, {"p", 1.5}};
  const Value fast0{{"preset", "fast_p"}, {"p", 0.0}};
  check_cases({
      {"faster than 1", fast1, ok(1.01), 1.0},
      {"parity is not faster than p = 1", fast1, ok(1.0), 0.0},
      {"slower", fast1, ok(0.5), 0.0},
      {"p = 1.5 refuses 1.4", fast15, ok(1.4), 0.0},
      {"p = 1.5 accepts 1.6", fast15, ok(1.6), 1.0},
      {"p = 0 is plain correctness for any measured speedup", fast0, ok(0.01), 1.0},
      {"speedup 0", fast0, ok(0.0), 0.0},
      {"speedup inf is not rewarded", fast1, ok(kInf), 0.0},
      {"speedup NaN", fast1, ok(kNan), 0.0},
      {"missing speedup", fast1, ok(std::nullopt), 0.0},
      {"incorrect", fast1, {StepStatus::kIncorrect, 5.0}, 0.0},
      {"hack detected", fast1, {StepStatus::kHackDetected, 100.0}, 0.0},
  });
  const auto reward = rewards::compute_reward(spec_of(fast15), ok(2.0));
  CHECK(reward.terms["fast"] == 1.0);
  CHECK(reward.terms["p"] == 1.5);
  CHECK(reward.terms["speedup"] == 2.0);
  CHECK(reward.terms["correct"] == 1.0);
}

TEST_CASE("presets: Kevin-style is 0.3 for correctness plus the capped speedup") {
  const Value kevin{{"preset", "kevin"}};
  const Value capped{{"preset", "kevin"}, {"speedup_cap", 2.0}, {"correct", 0.5}};
  check_cases({
      {"parity", kevin, ok(1.0), 1.3},
      {"twice as fast", kevin, ok(2.0), 2.3},
      {"slow", kevin, ok(0.25), 0.55},
      {"capped at 10 by default", kevin, ok(50.0), 10.3},
      {"cap and correctness overridden", capped, ok(3.0), 2.5},
      {"speedup 0 leaves correctness only", kevin, ok(0.0), 0.3},
      {"speedup inf leaves correctness only", kevin, ok(kInf), 0.3},
      {"speedup NaN leaves correctness only", kevin, ok(kNan), 0.3},
      {"missing speedup", kevin, ok(std::nullopt), 0.3},
      {"compile error earns 0", kevin, {StepStatus::kCompileError}, 0.0},
      {"incorrect earns 0 whatever its speed", kevin, {StepStatus::kIncorrect, 9.0}, 0.0},
  });
  const auto reward = rewards::compute_reward(spec_of(kevin), ok(2.0));
  CHECK(reward.terms["correct"] == 0.3);
  CHECK(reward.terms["speed"] == 2.0);
  CHECK(rewards::compute_reward(spec_of(kevin), ok(kNan)).terms["speed"].is_null());
}

TEST_CASE("presets: Dr. Kernel's weighted, speedup and tiered modes") {
  const Value weighted{{"preset", "drkernel"}};
  const Value speedup{{"preset", "drkernel"}, {"mode", "speedup"}};
  const Value tiered{{"preset", "drkernel"}, {"mode", "tiered"}};
  const Value coverage{{"preset", "drkernel"}, {"coverage_weight", 0.25}};
  check_cases({
      {"weighted: correct and faster than 1 + eps", weighted, ok(1.02), 1.0},
      {"weighted: within eps of parity earns correctness only", weighted, ok(1.005), 0.5},
      {"weighted: slow", weighted, ok(0.3), 0.5},
      {"weighted: speedup 0", weighted, ok(0.0), 0.5},
      {"weighted: speedup inf is not a speedup", weighted, ok(kInf), 0.5},
      {"weighted: speedup NaN", weighted, ok(kNan), 0.5},
      {"weighted: missing speedup", weighted, ok(std::nullopt), 0.5},
      {"weighted: coverage term (1 in crucible)", coverage, ok(2.0), 1.25},
      {"weighted: failures earn the penalty score 0", weighted, {StepStatus::kIncorrect}, 0.0},
      {"speedup: 0.5 + 0.5 * s", speedup, ok(2.0), 1.5},
      {"speedup: clipped at the upper bound 3", speedup, ok(7.0), 2.0},
      {"speedup: slow", speedup, ok(0.5), 0.75},
      {"speedup: NaN", speedup, ok(kNan), 0.5},
      {"speedup: timeout earns 0", speedup, {StepStatus::kTimeout}, 0.0},
      {"tiered: >= 3", tiered, ok(3.0), 1.0},
      {"tiered: >= 2", tiered, ok(2.5), 0.8},
      {"tiered: >= 1.5", tiered, ok(1.5), 0.6},
      {"tiered: >= 1.2", tiered, ok(1.3), 0.4},
      {"tiered: >= 1", tiered, ok(1.0), 0.2},
      {"tiered: slower than the reference", tiered, ok(0.9), -0.1},
      {"tiered: speedup 0", tiered, ok(0.0), -0.1},
      {"tiered: speedup inf", tiered, ok(kInf), -0.1},
      {"tiered: missing speedup", tiered, ok(std::nullopt), -0.1},
      {"tiered: compile error", tiered, {StepStatus::kCompileError}, -0.5},
      {"tiered: incorrect", tiered, {StepStatus::kIncorrect}, -0.3},
      {"tiered: runtime error", tiered, {StepStatus::kRuntimeError}, -0.3},
      {"tiered: timeout", tiered, {StepStatus::kTimeout}, -1.0},
      {"tiered: hack detected", tiered, {StepStatus::kHackDetected}, -1.0},
  });
  const auto reward = rewards::compute_reward(spec_of(speedup), ok(2.0));
  CHECK(reward.terms["correct"] == 0.5);
  CHECK(reward.terms["speed"] == 1.0);
  CHECK(reward.terms["coverage"] == 0.0);
  CHECK(rewards::compute_reward(spec_of(tiered), ok(2.0)).terms["tier"] == 0.8);
}

TEST_CASE("presets: OpenEnv kernrl rewards speedup - 1, capped, with half the slope when slow") {
  const Value kernrl{{"preset", "kernrl"}};
  check_cases({
      {"parity", kernrl, ok(1.0), 0.0},
      {"twice as fast", kernrl, ok(2.0), 1.0},
      {"capped at 2", kernrl, ok(10.0), 2.0},
      {"half speed", kernrl, ok(0.5), -0.25},
      {"speedup 0 is no speed term", kernrl, ok(0.0), 0.0},
      {"speedup inf is no speed term", kernrl, ok(kInf), 0.0},
      {"speedup NaN is no speed term", kernrl, ok(kNan), 0.0},
      {"missing speedup", kernrl, ok(std::nullopt), 0.0},
      {"compile error", kernrl, {StepStatus::kCompileError}, -0.5},
      {"invalid action counts as not compiling", kernrl, {StepStatus::kInvalidAction}, -0.5},
      {"incorrect", kernrl, {StepStatus::kIncorrect}, -0.25},
      {"hack detected", kernrl, {StepStatus::kHackDetected}, -0.25},
  });
}

TEST_CASE("presets: SOL score is the share of the reference-to-floor gap the kernel closes") {
  const Value sol{{"preset", "sol"}};
  check_cases({
      {"at the reference: nothing closed", sol, timed(1.0, 100.0, 100.0, 20.0), 0.0},
      {"half way to the floor", sol, timed(std::nullopt, 60.0, 100.0, 20.0), 0.5},
      {"at the floor", sol, timed(std::nullopt, 20.0, 100.0, 20.0), 1.0},
      {"below the floor is clamped", sol, timed(std::nullopt, 10.0, 100.0, 20.0), 1.0},
      {"slower than the reference is clamped", sol, timed(std::nullopt, 300.0, 100.0, 20.0), 0.0},
      {"candidate time from the speedup", sol, timed(2.0, std::nullopt, 100.0, 20.0), 0.625},
      {"reference at the floor, matched", sol, timed(std::nullopt, 20.0, 20.0, 20.0), 1.0},
      {"reference at the floor, slower", sol, timed(std::nullopt, 25.0, 20.0, 20.0), 0.0},
      {"missing floor", sol, timed(2.0, 50.0, 100.0, std::nullopt), 0.0},
      {"missing everything", sol, ok(std::nullopt), 0.0},
      {"NaN floor", sol, timed(2.0, 50.0, 100.0, kNan), 0.0},
      {"inf candidate and speedup 0", sol, timed(0.0, kInf, 100.0, 20.0), 0.0},
      {"speedup inf without a candidate time", sol, timed(kInf, std::nullopt, 100.0, 20.0), 0.0},
      {"incorrect", sol, {StepStatus::kIncorrect, 2.0}, 0.0},
  });
  const auto missing = rewards::compute_reward(spec_of(sol), timed(2.0, std::nullopt, 100.0, {}));
  CHECK(missing.terms["sol_score"].is_null());
  CHECK(missing.terms["missing"] == Value::array({"floor_ns"}));
  CHECK(missing.terms["candidate_ns"] == 50.0);
  const auto full = rewards::compute_reward(spec_of(sol), timed(std::nullopt, 60.0, 100.0, 20.0));
  CHECK(full.terms["sol_score"] == 0.5);
  CHECK(full.terms["floor_ns"] == 20.0);
}

TEST_CASE("presets: amdahl credits the share of the model step the candidate saves") {
  const Value amdahl{{"preset", "amdahl"}, {"op_share", 0.25}};
  // 0.3 for correctness plus 10 x f x (1 - 1/s), floored at -f.
  check_cases({
      {"parity", amdahl, ok(1.0), 0.3},
      {"twice as fast saves an eighth of the step", amdahl, ok(2.0), 0.3 + 10 * 0.25 * 0.5},
      {"four times as fast", amdahl, ok(4.0), 0.3 + 10 * 0.25 * 0.75},
      {"half speed loses a quarter of the step", amdahl, ok(0.5), 0.3 - 10 * 0.25 * 1.0},
      {"a tenth of the speed is floored at the op's share", amdahl, ok(0.1), 0.3 - 2.5},
      {"missing speedup", amdahl, ok(std::nullopt), 0.3},
      {"speedup inf is no speed term", amdahl, ok(kInf), 0.3},
      {"incorrect", amdahl, {StepStatus::kIncorrect}, -0.3},
      {"the whole step", Value{{"preset", "amdahl"}, {"op_share", 1.0}}, ok(2.0), 0.3 + 5.0},
  });
  const auto reward = rewards::compute_reward(spec_of(amdahl), ok(2.0));
  CHECK(reward.terms["step_speedup"].get<double>() == doctest::Approx(1.0 / (0.75 + 0.125)));
  CHECK(reward.terms["step_saved"].get<double>() == doctest::Approx(0.125));
  CHECK(reward.terms["measured"] == false);
  // With the model check's figures, the measured step speedup and share replace the estimate:
  // a 2x op that the step shows only 1.05x faster earns for 1 - 1/1.05 of the step.
  rewards::Measurement measured = ok(2.0);
  measured.step_speedup = 1.05;
  measured.op_share = 0.1;
  const auto in_place = rewards::compute_reward(spec_of(amdahl), measured);
  CHECK(in_place.terms["measured"] == true);
  CHECK(in_place.terms["op_share"].get<double>() == doctest::Approx(0.1));
  CHECK(in_place.total == doctest::Approx(0.3 + 10 * (1 - 1 / 1.05)));
  // A step slower in place loses at most the op's measured share.
  measured.step_speedup = 0.5;
  CHECK(rewards::compute_reward(spec_of(amdahl), measured).total == doctest::Approx(0.3 - 1.0));
}

TEST_CASE("presets: infra_error is never penalised and always marked, in every preset") {
  for (const char* preset : {"default", "fast_p", "kevin", "drkernel", "kernrl", "sol"}) {
    CAPTURE(std::string(preset));
    for (const Value& extra : {Value::object(), Value{{"mode", "tiered"}}}) {
      Value spec_value = extra;
      if (!extra.empty() && std::string(preset) != "drkernel") continue;
      spec_value["preset"] = preset;
      spec_value["improvement"] = true;
      const auto spec = spec_of(spec_value);
      const auto reward = rewards::compute_reward(spec, {StepStatus::kInfraError, 3.0});
      CHECK(reward.total == 0.0);
      CHECK(reward.infra);
      const auto shaped = rewards::shape_for_episode(spec, reward, 0.5);
      CHECK(shaped.total == 0.0);
      CHECK(shaped.infra);
      // Every failure is at most 0 and every preset's failure breakdown names its penalty.
      for (const auto status : kFailures) {
        const auto failed = rewards::compute_reward(spec, {status, 10.0});
        CHECK(failed.total <= 0.0);
        CHECK_FALSE(failed.infra);
        CHECK(failed.terms.contains("penalty"));
      }
    }
  }
}

TEST_CASE("presets: specs round-trip through their value form") {
  const Value specs[] = {
      Value{{"preset", "fast_p"}, {"p", 1.2}},
      Value{{"preset", "kevin"}, {"speedup_cap", 4.0}, {"penalty", {{"incorrect", -0.1}}}},
      Value{{"preset", "drkernel"}, {"mode", "tiered"}, {"perf_degrade", -0.2}},
      Value{{"preset", "kernrl"}, {"improvement", true}, {"improvement_weight", 2.0}},
      Value{{"preset", "sol"}},
      Value{{"preset", "default"}, {"improvement", true}},
  };
  for (const auto& value : specs) {
    CAPTURE(value.dump());
    const auto spec = spec_of(value);
    const auto again = spec_of(rewards::reward_spec_to_value(spec));
    CHECK(rewards::reward_spec_to_value(again) == rewards::reward_spec_to_value(spec));
    for (const double speedup : {0.5, 1.0, 2.0, 20.0}) {
      CHECK(rewards::compute_reward(spec, ok(speedup)).total ==
            rewards::compute_reward(again, ok(speedup)).total);
    }
  }
  // A plain default spec reads exactly as before shaping existed.
  CHECK_FALSE(
      rewards::reward_spec_to_value(rewards::default_reward_spec()).contains("improvement"));
}

TEST_CASE("presets: bad specs are refused with the key named") {
  struct Bad {
    Value spec;
    const char* message;
  };
  const Bad bad[] = {
      {{{"preset", 3}}, "reward spec: 'preset' must be a string"},
      {{{"preset", "kevin"}, {"speed_weight", 1.0}},
       "reward spec: unknown key 'speed_weight'; known keys: preset, correct, speedup_cap, "
       "penalty, resolved_speedup_only, improvement, improvement_weight"},
      {{{"preset", "fast_p"}, {"p", -1.0}}, "reward spec: 'p' must be at least 0"},
      {{{"preset", "fast_p"}, {"p", "1"}}, "reward spec: 'p' must be a number"},
      {{{"preset", "fast_p"}, {"mode", "tiered"}},
       "reward spec: unknown key 'mode'; known keys: preset, p, penalty, resolved_speedup_only, "
       "improvement, improvement_weight"},
      {{{"preset", "kevin"}, {"speedup_cap", 0.0}}, "reward spec: 'speedup_cap' must be positive"},
      {{{"preset", "drkernel"}, {"mode", "best"}},
       "reward spec: unknown mode 'best'; known modes: weighted, speedup, tiered"},
      {{{"preset", "drkernel"}, {"mode", 1}}, "reward spec: 'mode' must be a string"},
      {{{"preset", "drkernel"}, {"speedup_lower", 4.0}},
       "reward spec: 'speedup_lower' exceeds 'speedup_upper'"},
      {{{"preset", "kernrl"}, {"speed_cap", -1.0}}, "reward spec: 'speed_cap' must be at least 0"},
      {{{"preset", "sol"}, {"p", 1.0}},
       "reward spec: unknown key 'p'; known keys: preset, penalty, resolved_speedup_only, "
       "improvement, improvement_weight"},
      {{{"preset", "amdahl"}},
       "reward spec: 'op_share' must be in (0, 1]: the op's share of the model step's time "
       "(`crucible model show` estimates it from the roofline)"},
      {{{"preset", "amdahl"}, {"op_share", 1.5}},
       "reward spec: 'op_share' must be in (0, 1]: the op's share of the model step's time "
       "(`crucible model show` estimates it from the roofline)"},
      {{{"mode", "tiered"}},
       "reward spec: unknown key 'mode'; known keys: preset, correct, speed_weight, speed_floor, "
       "speed_cap, penalty, resolved_speedup_only, improvement, improvement_weight"},
      {{{"improvement", 1}}, "reward spec: 'improvement' must be true or false"},
      {{{"improvement_weight", -1.0}}, "reward spec: 'improvement_weight' must be at least 0"},
      {{{"penalty", {{"infra_error", -1.0}}}},
       "reward spec: 'penalty.infra_error' must be 0: an infra error is the server's fault"},
      {{{"preset", "kernrl"}, {"penalty", {{"timeout", "x"}}}},
       "reward spec: 'penalty.timeout' must be a number"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.spec.dump());
    const auto parsed = rewards::parse_reward_spec(b.spec);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code == core::ErrorCode::kInvalidArgument);
    CHECK(parsed.error().message == b.message);
  }
}

TEST_CASE("shaping: a step earns what it adds over the episode's best so far") {
  const auto plain = spec_of(Value{{"preset", "kevin"}});
  const auto shaped = spec_of(Value{{"preset", "kevin"}, {"improvement", true}});
  const auto weighted =
      spec_of(Value{{"preset", "kevin"}, {"improvement", true}, {"improvement_weight", 2.0}});
  const auto penalised = spec_of(Value{{"improvement", true}});
  struct ShapeCase {
    const char* name;
    const rewards::RewardSpec* spec;
    rewards::Measurement measurement;
    std::optional<double> best;
    double total;
  };
  const ShapeCase cases[] = {
      {"without the option nothing changes", &plain, ok(2.0), 5.0, 2.3},
      {"first step keeps its reward", &shaped, ok(2.0), std::nullopt, 2.3},
      {"improving on the best earns the gain", &shaped, ok(3.0), 2.3, 1.0},
      {"the gain is weighted", &weighted, ok(3.0), 2.3, 2.0},
      {"matching the best earns 0", &shaped, ok(2.0), 2.3, 0.0},
      {"falling short earns 0, not a penalty", &shaped, ok(1.0), 2.3, 0.0},
      {"after only failures the whole reward is a gain", &shaped, ok(1.0), -0.5, 1.3},
      {"a NaN best counts as none", &shaped, ok(2.0), kNan, 2.3},
      {"an infinite best leaves nothing to gain", &shaped, ok(2.0), kInf, 0.0},
      {"failures keep their penalty", &penalised, {StepStatus::kIncorrect}, 1.0, -0.5},
      {"failures keep their penalty on the first step",
       &penalised,
       {StepStatus::kTimeout},
       std::nullopt,
       -0.8},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto base = rewards::compute_reward(*c.spec, c.measurement);
    const auto out = rewards::shape_for_episode(*c.spec, base, c.best);
    CHECK(std::isfinite(out.total));
    CHECK(out.total == doctest::Approx(c.total));
    CHECK(out.base == base.base);
    if (c.spec->improvement) {
      REQUIRE(out.terms.contains("shaping"));
      CHECK(out.terms["shaping"]["base"] == base.base);
    } else {
      CHECK_FALSE(out.terms.contains("shaping"));
    }
  }
  const auto out =
      rewards::shape_for_episode(shaped, rewards::compute_reward(shaped, ok(3.0)), 2.3);
  CHECK(out.to_value()["base"] == doctest::Approx(3.3));
  CHECK(out.terms["shaping"]["improvement"].get<double>() == doctest::Approx(1.0));
  CHECK(out.terms["shaping"]["previous_best"] == 2.3);
}
