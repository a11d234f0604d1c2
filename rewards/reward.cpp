// The default staged reward and its spec parser.
#include "rewards/reward.hpp"

#include <algorithm>
#include <cmath>

namespace crucible::rewards {
namespace {

using core::StepStatus;

core::Error invalid(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, "reward spec: " + std::move(message)};
}

core::Result<double> finite_number(const core::Value& value, const std::string& key) {
  if (!value.is_number()) return invalid("'" + key + "' must be a number");
  const double number = value.get<double>();
  if (!std::isfinite(number)) return invalid("'" + key + "' must be finite");
  return number;
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

core::Result<RewardSpec> parse_reward_spec(const core::Value& value) {
  RewardSpec spec = default_reward_spec();
  if (value.is_null()) return spec;
  if (!value.is_object()) return invalid("must be a map");
  for (auto it = value.begin(); it != value.end(); ++it) {
    const std::string& key = it.key();
    if (key == "preset") {
      if (!it->is_string()) return invalid("'preset' must be a string");
      if (*it != "default") {
        return invalid("unknown preset '" + it->get<std::string>() + "'; known presets: default");
      }
    } else if (key == "correct" || key == "speed_weight" || key == "speed_floor" ||
               key == "speed_cap") {
      auto number = finite_number(*it, key);
      if (!number) return number.error();
      if (key == "correct") spec.correct = *number;
      if (key == "speed_weight") spec.speed_weight = *number;
      if (key == "speed_floor") spec.speed_floor = *number;
      if (key == "speed_cap") spec.speed_cap = *number;
    } else if (key == "penalty") {
      if (!it->is_object()) return invalid("'penalty' must be a map of status to number");
      for (auto p = it->begin(); p != it->end(); ++p) {
        const auto status = core::step_status_from_name(p.key());
        if (!status || *status == StepStatus::kOk) {
          return invalid("'penalty' names unknown failure status '" + p.key() + "'");
        }
        auto number = finite_number(*p, "penalty." + p.key());
        if (!number) return number.error();
        spec.penalty[*status] = *number;
      }
    } else {
      return invalid("unknown key '" + key +
                     "'; known keys: preset, correct, speed_weight, speed_floor, speed_cap, "
                     "penalty");
    }
  }
  if (spec.speed_floor > spec.speed_cap) return invalid("'speed_floor' exceeds 'speed_cap'");
  return spec;
}

core::Value reward_spec_to_value(const RewardSpec& spec) {
  core::Value penalty = core::Value::object();
  for (const auto& [status, value] : spec.penalty) {
    penalty[std::string(core::step_status_name(status))] = value;
  }
  return core::Value{{"preset", spec.preset},         {"correct", spec.correct},
                     {"speed_weight", spec.speed_weight}, {"speed_floor", spec.speed_floor},
                     {"speed_cap", spec.speed_cap},   {"penalty", penalty}};
}

core::Value RewardBreakdown::to_value() const {
  return core::Value{{"total", total}, {"terms", terms}, {"preset", preset}, {"infra", infra}};
}

RewardBreakdown compute_reward(const RewardSpec& spec, const Measurement& measurement) {
  RewardBreakdown out;
  out.preset = spec.preset;
  out.terms = core::Value::object();
  if (measurement.status != StepStatus::kOk) {
    const auto it = spec.penalty.find(measurement.status);
    const double penalty = it == spec.penalty.end() ? 0.0 : it->second;
    out.infra = measurement.status == StepStatus::kInfraError;
    out.terms["penalty"] = penalty;
    out.total = penalty;
    return out;
  }
  out.terms["correct"] = spec.correct;
  out.total = spec.correct;
  const bool has_speed = measurement.speedup && std::isfinite(*measurement.speedup) &&
                         *measurement.speedup > 0.0;
  if (!has_speed) {
    out.terms["speed"] = nullptr;
    return out;
  }
  const double log_speedup =
      std::clamp(std::log2(*measurement.speedup), spec.speed_floor, spec.speed_cap);
  const double speed = spec.speed_weight * log_speedup;
  out.terms["speed"] = speed;
  out.terms["speedup"] = *measurement.speedup;
  out.total += speed;
  return out;
}

}  // namespace crucible::rewards
