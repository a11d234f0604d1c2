// Rewards: pure functions from a step's measurement to a scalar reward and its breakdown.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/result.hpp"
#include "core/step_status.hpp"
#include "core/value.hpp"

namespace crucible::rewards {

// The default staged reward (DESIGN.md §5):
//   failure  -> penalty[status]                       (infra_error: 0 and marked infra)
//   correct  -> correct + speed_weight * clamp(log2(speedup), speed_floor, speed_cap)
// With the defaults a correct kernel at parity with the reference earns exactly 1.0, one twice
// as fast 1.5, and the speed term is capped at 8x (2.5) and floored so that a slow correct
// kernel (>= 0.5) still beats any failure (<= 0). Every constant can be overridden in a spec.
struct RewardSpec {
  std::string preset = "default";
  std::map<core::StepStatus, double> penalty;  // for every status except kOk
  double correct = 1.0;
  double speed_weight = 0.5;
  double speed_floor = -1.0;  // in log2 units
  double speed_cap = 3.0;     // in log2 units
};

// The default spec.
RewardSpec default_reward_spec();

// Parses a spec map from a request: {preset?: "default", correct?, speed_weight?, speed_floor?,
// speed_cap?, penalty?: {status: value}}; null gives the default. Unknown keys, unknown
// statuses, non-finite numbers and speed_floor > speed_cap are kInvalidArgument errors naming
// the key.
core::Result<RewardSpec> parse_reward_spec(const core::Value& spec);
core::Value reward_spec_to_value(const RewardSpec& spec);

// What the reward needs to know about a step.
struct Measurement {
  core::StepStatus status = core::StepStatus::kInfraError;
  // Weighted geometric-mean speedup (reference time / candidate time) over timing cases;
  // present only when the step is kOk and was timed.
  std::optional<double> speedup;
};

struct RewardBreakdown {
  double total = 0.0;
  core::Value terms;  // each term by name, so trainers can reshape offline
  std::string preset;
  bool infra = false;  // the server's fault: trainers should drop the sample
  core::Value to_value() const;
};

// Pure and total: any measurement gives a finite reward. A kOk measurement without a finite,
// positive speedup is scored as correct with no speed term (the term is reported as missing).
RewardBreakdown compute_reward(const RewardSpec& spec, const Measurement& measurement);

}  // namespace crucible::rewards
