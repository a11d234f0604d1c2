// The reward presets, the spec parser and multi-turn shaping.
#include "rewards/reward.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace crucible::rewards {
namespace {

using core::StepStatus;
using core::Value;

constexpr const char* kDefaultKeys =
    "preset, correct, speed_weight, speed_floor, speed_cap, penalty, resolved_speedup_only, "
    "improvement, improvement_weight";
constexpr const char* kPresetNames = "default, fast_p, kevin, drkernel, kernrl, sol, amdahl";

core::Error invalid(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, "reward spec: " + std::move(message)};
}

core::Result<double> finite_number(const Value& value, const std::string& key) {
  if (!value.is_number()) return invalid("'" + key + "' must be a number");
  const double number = value.get<double>();
  if (!std::isfinite(number)) return invalid("'" + key + "' must be finite");
  return number;
}

// The same penalty for every failure status (infra_error is always 0).
std::map<StepStatus, double> uniform_penalty(double value) {
  std::map<StepStatus, double> penalty;
  for (const auto status :
       {StepStatus::kInvalidAction, StepStatus::kCompileError, StepStatus::kLaunchError,
        StepStatus::kRuntimeError, StepStatus::kTimeout, StepStatus::kIncorrect,
        StepStatus::kHackDetected}) {
    penalty[status] = value;
  }
  penalty[StepStatus::kInfraError] = 0.0;
  return penalty;
}

// A preset other than default: its constants with their defaults, their checks, and the
// failure penalties of its source (for drkernel they depend on the mode).
struct Preset {
  const char* name;
  std::vector<std::pair<const char*, double>> constants;
  std::function<std::map<StepStatus, double>(const std::string& mode)> penalty;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"fast_p", {{"p", 1.0}}, [](const std::string&) { return uniform_penalty(0.0); }},
      {"kevin",
       {{"correct", 0.3}, {"speedup_cap", 10.0}},
       [](const std::string&) { return uniform_penalty(0.0); }},
      {"drkernel",
       {{"correct_weight", 0.5},
        {"speed_weight", 0.5},
        {"speedup_eps", 0.01},
        {"speedup_upper", 3.0},
        {"speedup_lower", 0.0},
        {"coverage_weight", 0.0},
        {"perf_degrade", -0.1}},
       [](const std::string& mode) {
         if (mode != "tiered") return uniform_penalty(0.0);
         auto penalty = uniform_penalty(-0.3);
         penalty[StepStatus::kInvalidAction] = -0.5;
         penalty[StepStatus::kCompileError] = -0.5;
         penalty[StepStatus::kTimeout] = -1.0;
         penalty[StepStatus::kHackDetected] = -1.0;
         return penalty;
       }},
      {"kernrl",
       {{"speed_cap", 2.0}, {"slow_weight", 0.5}},
       [](const std::string&) {
         auto penalty = uniform_penalty(-0.25);
         penalty[StepStatus::kInvalidAction] = -0.5;
         penalty[StepStatus::kCompileError] = -0.5;
         return penalty;
       }},
      {"sol", {}, [](const std::string&) { return uniform_penalty(0.0); }},
      // op_share has no default worth having: 0 is refused, so a spec must give it.
      {"amdahl",
       {{"op_share", 0.0}, {"correct", 0.3}, {"speed_weight", 10.0}},
       [](const std::string&) { return uniform_penalty(-0.3); }},
  };
  return table;
}

const Preset* find_preset(const std::string& name) {
  for (const auto& preset : presets()) {
    if (name == preset.name) return &preset;
  }
  return nullptr;
}

std::string known_keys(const Preset& preset) {
  std::string keys = "preset";
  for (const auto& [name, value] : preset.constants) keys += std::string(", ") + name;
  if (std::string(preset.name) == "drkernel") keys += ", mode";
  return keys + ", penalty, resolved_speedup_only, improvement, improvement_weight";
}

// Range checks beyond finiteness, per preset.
std::optional<core::Error> check_constants(const RewardSpec& spec) {
  const auto& c = spec.constants;
  if (spec.preset == "fast_p" && c.at("p") < 0.0) return invalid("'p' must be at least 0");
  if (spec.preset == "kevin" && c.at("speedup_cap") <= 0.0) {
    return invalid("'speedup_cap' must be positive");
  }
  if (spec.preset == "drkernel" && c.at("speedup_lower") > c.at("speedup_upper")) {
    return invalid("'speedup_lower' exceeds 'speedup_upper'");
  }
  if (spec.preset == "kernrl" && c.at("speed_cap") < 0.0) {
    return invalid("'speed_cap' must be at least 0");
  }
  if (spec.preset == "amdahl" && !(c.at("op_share") > 0.0 && c.at("op_share") <= 1.0)) {
    return invalid(
        "'op_share' must be in (0, 1]: the op's share of the model step's time "
        "(`crucible model show` estimates it from the roofline)");
  }
  if (spec.preset == "amdahl" && c.at("speed_weight") < 0.0) {
    return invalid("'speed_weight' must be at least 0");
  }
  return std::nullopt;
}

bool usable_speedup(const std::optional<double>& speedup) {
  return speedup && std::isfinite(*speedup) && *speedup > 0.0;
}

Value number_or_null(const std::optional<double>& value) {
  if (value && std::isfinite(*value)) return *value;
  return nullptr;
}

// Each preset's score of a kOk measurement; fills out.terms and returns the total.
double score_default(const RewardSpec& spec, const Measurement& m, RewardBreakdown& out) {
  out.terms["correct"] = spec.correct;
  if (!usable_speedup(m.speedup)) {
    out.terms["speed"] = nullptr;
    return spec.correct;
  }
  const double log_speedup = std::clamp(std::log2(*m.speedup), spec.speed_floor, spec.speed_cap);
  const double speed = spec.speed_weight * log_speedup;
  out.terms["speed"] = speed;
  out.terms["speedup"] = *m.speedup;
  return spec.correct + speed;
}

// The share of the whole model step's time the candidate saves: with the op taking a share f of
// the step and running s times faster, the step takes (1 - f) + f / s of its time (Amdahl), so
// f * (1 - 1 / s) of it is saved; a slower op loses at most f (the term is floored at -f).
// With a model check, the measured step speedup and share replace the estimate (`measured` in
// the terms says which applied).
double score_amdahl(const RewardSpec& spec, const Measurement& m, RewardBreakdown& out) {
  const double correct = spec.constants.at("correct");
  out.terms["correct"] = correct;
  if (m.step_speedup && m.op_share && std::isfinite(*m.step_speedup) && *m.step_speedup > 0 &&
      *m.op_share >= 0 && *m.op_share <= 1) {
    const double share = *m.op_share;
    const double saved = std::max(-share, 1.0 - 1.0 / *m.step_speedup);
    const double speed = spec.constants.at("speed_weight") * saved;
    out.terms["measured"] = true;
    out.terms["op_share"] = share;
    out.terms["speedup"] = number_or_null(m.speedup);
    out.terms["step_speedup"] = *m.step_speedup;
    out.terms["step_saved"] = saved;
    out.terms["speed"] = speed;
    return correct + speed;
  }
  const double share = spec.constants.at("op_share");
  out.terms["measured"] = false;
  out.terms["op_share"] = share;
  if (!usable_speedup(m.speedup)) {
    out.terms["speed"] = nullptr;
    return correct;
  }
  const double saved = share * std::max(-1.0, 1.0 - 1.0 / *m.speedup);
  const double speed = spec.constants.at("speed_weight") * saved;
  out.terms["speedup"] = *m.speedup;
  out.terms["step_speedup"] = 1.0 / ((1.0 - share) + share / *m.speedup);
  out.terms["step_saved"] = saved;
  out.terms["speed"] = speed;
  return correct + speed;
}

double score_fast_p(const RewardSpec& spec, const Measurement& m, RewardBreakdown& out) {
  const double p = spec.constants.at("p");
  // A NaN speedup is not faster than anything; +inf is refused like every non-finite speedup
  // (no real kernel is infinitely fast: the runner flags it).
  const double fast = usable_speedup(m.speedup) && *m.speedup > p ? 1.0 : 0.0;
  out.terms["correct"] = 1.0;
  out.terms["p"] = p;
  out.terms["speedup"] = number_or_null(m.speedup);
  out.terms["fast"] = fast;
  return fast;
}

double score_kevin(const RewardSpec& spec, const Measurement& m, RewardBreakdown& out) {
  const double correct = spec.constants.at("correct");
  out.terms["correct"] = correct;
  if (!usable_speedup(m.speedup)) {
    out.terms["speed"] = nullptr;
    return correct;
  }
  const double speed = std::min(*m.speedup, spec.constants.at("speedup_cap"));
  out.terms["speed"] = speed;
  out.terms["speedup"] = *m.speedup;
  return correct + speed;
}

double score_drkernel(const RewardSpec& spec, const Measurement& m, RewardBreakdown& out) {
  const auto& c = spec.constants;
  const bool has_speed = usable_speedup(m.speedup);
  // KernelGYM scores a missing speedup as 0.
  const double speedup = has_speed ? *m.speedup : 0.0;
  out.terms["speedup"] = number_or_null(m.speedup);
  if (spec.mode == "tiered") {
    double tier = c.at("perf_degrade");
    if (speedup >= 3.0) {
      tier = 1.0;
    } else if (speedup >= 2.0) {
      tier = 0.8;
    } else if (speedup >= 1.5) {
      tier = 0.6;
    } else if (speedup >= 1.2) {
      tier = 0.4;
    } else if (speedup >= 1.0) {
      tier = 0.2;
    }
    out.terms["tier"] = tier;
    return tier;
  }
  const double correct = c.at("correct_weight");
  double speed = 0.0;
  if (spec.mode == "weighted") {
    speed = speedup >= 1.0 + c.at("speedup_eps") ? c.at("speed_weight") : 0.0;
  } else {
    double clipped = std::min(speedup, c.at("speedup_upper"));
    if (clipped < c.at("speedup_lower")) clipped = 0.0;
    speed = c.at("speed_weight") * clipped;
  }
  // Every kernel a crucible candidate runs is the agent's own, so the time coverage of the
  // profiling-based reward is 1.
  const double coverage = c.at("coverage_weight") * 1.0;
  out.terms["correct"] = correct;
  out.terms["speed"] = speed;
  out.terms["coverage"] = coverage;
  return correct + speed + coverage;
}

double score_kernrl(const RewardSpec& spec, const Measurement& m, RewardBreakdown& out) {
  if (!usable_speedup(m.speedup)) {
    out.terms["speed"] = nullptr;
    return 0.0;
  }
  const double s = *m.speedup;
  const double speed = s > 1.0 ? std::min(s - 1.0, spec.constants.at("speed_cap"))
                               : (s - 1.0) * spec.constants.at("slow_weight");
  out.terms["speed"] = speed;
  out.terms["speedup"] = s;
  return speed;
}

// Times are plain doubles here, NaN when absent or unusable.
double time_or_nan(const std::optional<double>& ns) {
  return ns && std::isfinite(*ns) && *ns > 0.0 ? *ns : std::numeric_limits<double>::quiet_NaN();
}

Value finite_or_null(double value) {
  if (std::isfinite(value)) return value;
  return nullptr;
}

double score_sol(const RewardSpec&, const Measurement& m, RewardBreakdown& out) {
  double candidate = time_or_nan(m.candidate_ns);
  const double reference = time_or_nan(m.reference_ns);
  const double floor = time_or_nan(m.floor_ns);
  // Without the candidate's own time, the speedup and the reference time give it.
  if (std::isnan(candidate) && !std::isnan(reference) && usable_speedup(m.speedup)) {
    candidate = reference / m.speedup.value_or(1.0);
  }
  out.terms["candidate_ns"] = finite_or_null(candidate);
  out.terms["reference_ns"] = finite_or_null(reference);
  out.terms["floor_ns"] = finite_or_null(floor);
  if (std::isnan(candidate) || std::isnan(reference) || std::isnan(floor)) {
    Value missing = Value::array();
    if (std::isnan(candidate)) missing.push_back("candidate_ns");
    if (std::isnan(reference)) missing.push_back("reference_ns");
    if (std::isnan(floor)) missing.push_back("floor_ns");
    out.terms["missing"] = missing;
    out.terms["sol_score"] = nullptr;
    return 0.0;
  }
  double score = 0.0;
  if (reference <= floor) {
    // The reference already runs at the floor: there is no gap to close; matching it is full
    // marks.
    score = candidate <= reference ? 1.0 : 0.0;
  } else {
    score = std::clamp((reference - candidate) / (reference - floor), 0.0, 1.0);
  }
  out.terms["sol_score"] = score;
  return score;
}

}  // namespace

RewardSpec default_reward_spec() {
  RewardSpec spec;
  spec.penalty = {
      {StepStatus::kInvalidAction, -1.0}, {StepStatus::kCompileError, -1.0},
      {StepStatus::kLaunchError, -0.8},   {StepStatus::kRuntimeError, -0.8},
      {StepStatus::kTimeout, -0.8},       {StepStatus::kIncorrect, -0.5},
      {StepStatus::kHackDetected, -2.0},  {StepStatus::kInfraError, 0.0},
  };
  return spec;
}

core::Result<RewardSpec> parse_reward_spec(const Value& value) {
  RewardSpec spec = default_reward_spec();
  if (value.is_null()) return spec;
  if (!value.is_object()) return invalid("must be a map");

  const Preset* preset = nullptr;
  if (value.contains("preset")) {
    const Value& name = value["preset"];
    if (!name.is_string()) return invalid("'preset' must be a string");
    spec.preset = name.get<std::string>();
    if (spec.preset != "default") {
      preset = find_preset(spec.preset);
      if (!preset) {
        return invalid("unknown preset '" + spec.preset + "'; known presets: " + kPresetNames);
      }
      for (const auto& [key, initial] : preset->constants) spec.constants[key] = initial;
      if (spec.preset == "drkernel") spec.mode = "weighted";
    }
  }
  if (preset && value.contains("mode")) {
    if (spec.preset != "drkernel") {
      return invalid("unknown key 'mode'; known keys: " + known_keys(*preset));
    }
    const Value& mode = value["mode"];
    if (!mode.is_string()) return invalid("'mode' must be a string");
    spec.mode = mode.get<std::string>();
    if (spec.mode != "weighted" && spec.mode != "speedup" && spec.mode != "tiered") {
      return invalid("unknown mode '" + spec.mode + "'; known modes: weighted, speedup, tiered");
    }
  }
  if (preset) spec.penalty = preset->penalty(spec.mode);

  for (auto it = value.begin(); it != value.end(); ++it) {
    const std::string& key = it.key();
    if (key == "preset" || (preset && key == "mode")) continue;
    if (key == "penalty") {
      if (!it->is_object()) return invalid("'penalty' must be a map of status to number");
      for (auto p = it->begin(); p != it->end(); ++p) {
        const auto status = core::step_status_from_name(p.key());
        if (!status || *status == StepStatus::kOk) {
          return invalid("'penalty' names unknown failure status '" + p.key() + "'");
        }
        auto number = finite_number(*p, "penalty." + p.key());
        if (!number) return number.error();
        if (*status == StepStatus::kInfraError && *number != 0.0) {
          return invalid("'penalty.infra_error' must be 0: an infra error is the server's fault");
        }
        spec.penalty[*status] = *number;
      }
    } else if (key == "resolved_speedup_only") {
      if (!it->is_boolean()) return invalid("'resolved_speedup_only' must be true or false");
      spec.resolved_speedup_only = it->get<bool>();
    } else if (key == "improvement") {
      if (!it->is_boolean()) return invalid("'improvement' must be true or false");
      spec.improvement = it->get<bool>();
    } else if (key == "improvement_weight") {
      auto number = finite_number(*it, key);
      if (!number) return number.error();
      if (*number < 0.0) return invalid("'improvement_weight' must be at least 0");
      spec.improvement_weight = *number;
    } else if (!preset && (key == "correct" || key == "speed_weight" || key == "speed_floor" ||
                           key == "speed_cap")) {
      auto number = finite_number(*it, key);
      if (!number) return number.error();
      if (key == "correct") spec.correct = *number;
      if (key == "speed_weight") spec.speed_weight = *number;
      if (key == "speed_floor") spec.speed_floor = *number;
      if (key == "speed_cap") spec.speed_cap = *number;
    } else if (preset && spec.constants.count(key) > 0) {
      auto number = finite_number(*it, key);
      if (!number) return number.error();
      spec.constants[key] = *number;
    } else {
      return invalid("unknown key '" + key +
                     "'; known keys: " + (preset ? known_keys(*preset) : kDefaultKeys));
    }
  }
  if (!preset && spec.speed_floor > spec.speed_cap) {
    return invalid("'speed_floor' exceeds 'speed_cap'");
  }
  if (preset) {
    if (auto error = check_constants(spec)) return *error;
  }
  return spec;
}

Value reward_spec_to_value(const RewardSpec& spec) {
  Value penalty = Value::object();
  for (const auto& [status, value] : spec.penalty) {
    penalty[std::string(core::step_status_name(status))] = value;
  }
  Value out;
  if (spec.preset == "default") {
    out = Value{{"preset", spec.preset},
                {"correct", spec.correct},
                {"speed_weight", spec.speed_weight},
                {"speed_floor", spec.speed_floor},
                {"speed_cap", spec.speed_cap},
                {"penalty", penalty}};
  } else {
    out = Value{{"preset", spec.preset}, {"penalty", penalty}};
    for (const auto& [name, value] : spec.constants) out[name] = value;
    if (!spec.mode.empty()) out["mode"] = spec.mode;
  }
  if (spec.resolved_speedup_only) out["resolved_speedup_only"] = true;
  // Only when shaping, so a plain default spec reads exactly as it always has.
  if (spec.improvement) {
    out["improvement"] = true;
    out["improvement_weight"] = spec.improvement_weight;
  }
  return out;
}

Value RewardBreakdown::to_value() const {
  Value out{{"total", total}, {"terms", terms}, {"preset", preset}, {"infra", infra}};
  if (base != total) out["base"] = base;
  return out;
}

RewardBreakdown compute_reward(const RewardSpec& spec, const Measurement& measurement) {
  RewardBreakdown out;
  out.preset = spec.preset;
  out.terms = Value::object();
  if (measurement.status == StepStatus::kInfraError) {
    // Never the agent's fault, whatever the spec says.
    out.infra = true;
    out.terms["penalty"] = 0.0;
    return out;
  }
  if (measurement.status != StepStatus::kOk) {
    const auto it = spec.penalty.find(measurement.status);
    const double penalty = it == spec.penalty.end() ? 0.0 : it->second;
    out.terms["penalty"] = penalty;
    out.total = penalty;
    out.base = penalty;
    return out;
  }
  double total = 0.0;
  Measurement scored = measurement;
  if (spec.resolved_speedup_only && measurement.speedup && measurement.speedup_low &&
      measurement.speedup_high) {
    const bool resolved = *measurement.speedup_low > 1.0 || *measurement.speedup_high < 1.0;
    out.terms["speedup_resolved"] = resolved;
    if (!resolved) {
      // At parity: the speed term of every preset sees 1.0, and times scale to match.
      scored.speedup = 1.0;
      if (scored.reference_ns) scored.candidate_ns = scored.reference_ns;
    }
  }
  const Measurement& m = scored;
  if (spec.preset == "fast_p") {
    total = score_fast_p(spec, m, out);
  } else if (spec.preset == "kevin") {
    total = score_kevin(spec, m, out);
  } else if (spec.preset == "drkernel") {
    total = score_drkernel(spec, m, out);
  } else if (spec.preset == "kernrl") {
    total = score_kernrl(spec, m, out);
  } else if (spec.preset == "sol") {
    total = score_sol(spec, m, out);
  } else if (spec.preset == "amdahl") {
    total = score_amdahl(spec, m, out);
  } else {
    total = score_default(spec, m, out);
  }
  // Every path above is finite for finite constants; this keeps the contract if one is not.
  if (!std::isfinite(total)) total = 0.0;
  out.total = total;
  out.base = total;
  return out;
}

RewardBreakdown shape_for_episode(const RewardSpec& spec, const RewardBreakdown& breakdown,
                                  std::optional<double> previous_best) {
  if (!spec.improvement) return breakdown;
  RewardBreakdown out = breakdown;
  const double base = breakdown.base;
  // NaN stands for "no previous best" (a NaN best counts as none).
  const double best = previous_best.value_or(std::numeric_limits<double>::quiet_NaN());
  Value shaping{{"base", base}, {"previous_best", nullptr}, {"improvement", nullptr}};
  if (!std::isnan(best)) shaping["previous_best"] = best;
  if (!breakdown.infra && base > 0.0 && !std::isnan(best)) {
    const double gain = std::max(0.0, base - std::max(best, 0.0));
    out.total = spec.improvement_weight * gain;
    shaping["improvement"] = out.total;
  } else {
    out.total = base;
  }
  if (!std::isfinite(out.total)) out.total = 0.0;
  out.terms["shaping"] = shaping;
  return out;
}

}  // namespace crucible::rewards
