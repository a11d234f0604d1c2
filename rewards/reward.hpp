// Rewards: pure functions from a step's measurement to a scalar reward and its breakdown.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/result.hpp"
#include "core/step_status.hpp"
#include "core/value.hpp"

namespace crucible::rewards {

// A reward spec: a preset and its constants. docs/rewards.md gives each preset's source and
// exact formula. Presets:
//   default  crucible's staged reward (below)
//   fast_p   KernelBench fast_p: 1 if correct and speedup > p, else 0
//   kevin    Kevin-style: 0.3 * correct + min(speedup, speedup_cap) when correct
//   drkernel Dr. Kernel / KernelGYM reward functions, `mode` = weighted | speedup | tiered
//   kernrl   OpenEnv kernrl: min(speedup - 1, 2) when faster, 0.5 * (speedup - 1) when slower
//   sol      SOL-ExecBench-style gap closed between the reference time and the roofline floor
//
// The default staged reward (DESIGN.md §5):
//   failure  -> penalty[status]                       (infra_error: 0 and marked infra)
//   correct  -> correct + speed_weight * clamp(log2(speedup), speed_floor, speed_cap)
// With the defaults a correct kernel at parity with the reference earns exactly 1.0, one twice
// as fast 1.5, and the speed term is capped at 8x (2.5) and floored so that a slow correct
// kernel (>= 0.5) still beats any failure (<= 0). Every constant can be overridden in a spec.
struct RewardSpec {
  std::string preset = "default";
  std::map<core::StepStatus, double> penalty;  // for every status except kOk
  // The default preset's constants.
  double correct = 1.0;
  double speed_weight = 0.5;
  double speed_floor = -1.0;  // in log2 units
  double speed_cap = 3.0;     // in log2 units
  // Every other preset's constants by name (all present after parsing, defaults filled in).
  std::map<std::string, double> constants;
  std::string mode;  // drkernel only: weighted, speedup or tiered
  // Any preset: speed credit only for a resolved speedup. When the combined speedup's 95 %
  // interval contains 1.0 the step is scored as if at parity (speedup 1.0), so noise alone
  // earns and costs nothing; terms.speedup_resolved says which applied.
  bool resolved_speedup_only = false;
  // Multi-turn shaping (any preset): see shape_for_episode.
  bool improvement = false;
  double improvement_weight = 1.0;
};

// The default spec.
RewardSpec default_reward_spec();

// Parses a spec map from a request: {preset?: NAME, <the preset's constants>?, mode?,
// penalty?: {status: value}, resolved_speedup_only?: bool, improvement?: bool,
// improvement_weight?}; null gives the default.
// Unknown presets, keys a preset does not have, unknown statuses, non-finite numbers, a
// non-zero infra_error penalty and out-of-range constants are kInvalidArgument errors naming
// the key. Thread-safe (no shared state).
core::Result<RewardSpec> parse_reward_spec(const core::Value& spec);
// The effective spec as a map that parse_reward_spec accepts and parses back to the same spec.
core::Value reward_spec_to_value(const RewardSpec& spec);

// What the reward needs to know about a step. Every field but status is optional: the server
// fills what it measured, and each preset says what it does without a field (docs/rewards.md).
struct Measurement {
  Measurement() = default;
  Measurement(core::StepStatus status_in, std::optional<double> speedup_in = std::nullopt)
      : status(status_in), speedup(speedup_in) {}

  core::StepStatus status = core::StepStatus::kInfraError;
  // Weighted geometric-mean speedup (reference time / candidate time) over timing cases;
  // present only when the step is kOk and was timed.
  std::optional<double> speedup;
  // The 95 % interval of `speedup` (judge/timing_stats.hpp, combined_speedup).
  std::optional<double> speedup_low;
  std::optional<double> speedup_high;
  // Weighted geometric means over timing cases of the candidate's and the reference's median
  // call time, and of the task's roofline floor on this GPU, in nanoseconds (sol preset).
  std::optional<double> candidate_ns;
  std::optional<double> reference_ns;
  std::optional<double> floor_ns;
  // The model check's figures (docs/models.md), when the step ran one: the whole model step's
  // speedup with the candidate in place, and the op's share of the reference step.
  std::optional<double> step_speedup;
  std::optional<double> op_share;
};

struct RewardBreakdown {
  double total = 0.0;
  core::Value terms;  // each term by name, so trainers can reshape offline
  std::string preset;
  bool infra = false;  // the server's fault: trainers should drop the sample
  // The preset's reward before multi-turn shaping; the episode's best is tracked on this.
  // Equal to total when the spec does not shape.
  double base = 0.0;
  core::Value to_value() const;
};

// Pure and total: any measurement gives a finite reward, and infra_error always gives 0 with
// `infra` set. A kOk measurement without a finite, positive speedup is scored as correct with
// no speed term (the term is reported as null). Does not apply multi-turn shaping.
RewardBreakdown compute_reward(const RewardSpec& spec, const Measurement& measurement);

// Multi-turn shaping, applied by the server after compute_reward with the best `base` reward
// of the episode's earlier steps (nullopt on the first step). Without spec.improvement the
// breakdown is returned unchanged. With it:
//   infra_error or base <= 0       -> total = base (failures keep their penalty)
//   no previous best               -> total = base
//   otherwise                      -> total = improvement_weight * max(0, base - max(best, 0))
// so a step earns only what it adds over the best so far. A NaN best counts as none. The
// breakdown gains terms.shaping = {base, previous_best, improvement}.
RewardBreakdown shape_for_episode(const RewardSpec& spec, const RewardBreakdown& breakdown,
                                  std::optional<double> previous_best);

}  // namespace crucible::rewards
