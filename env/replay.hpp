// Trajectory replay: re-score a log's rewards with another spec, or re-measure every step.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"
#include "env/pipeline.hpp"
#include "rewards/reward.hpp"
#include "tasks/registry.hpp"

namespace crucible::env {

// Every good record of a log, with the reader's report (torn tail, format version). Errors: the
// reader's, prefixed with what replay was doing; a newer format says so and that a newer
// crucible is needed.
struct LoadedLog {
  std::vector<core::Value> records;
  core::Value read_report;  // {format_version, records, torn_tail, tail_reason?, torn_bytes?}
};
core::Result<LoadedLog> load_log(const std::filesystem::path& path);

// Recomputes each record's reward from its logged measurement (result.status, result.speedup)
// with `spec`. No GPU, no compile. Returns {mode: "rescore", reward_spec, steps: [{index,
// episode?, step?, task, status, speedup?, old_reward, new_reward, delta}], summary: {steps,
// mean_old, mean_new, mean_delta, changed, by_status: {status: {steps, mean_old, mean_new}}}}.
core::Value rescore_log(const std::vector<core::Value>& records, const rewards::RewardSpec& spec);

// Re-runs each record's (task, source, plan, seed, reward_spec) through `pipeline` and compares
// with the logged result. Returns {mode: "remeasure", steps: [{index, task, old_status,
// new_status, flipped, old_speedup?, new_speedup?, speedup_ratio?, old_reward, new_reward,
// reward_delta, message}], summary: {steps, status_flips, flips: {"old->new": n},
// correct_flips (ok before, not ok now), new_infra_errors, speedup_ratio: {count, min, p05, p50,
// p95, max, within_2pct}, reward_delta: {mean, mean_abs, max_abs}}}. Records whose task is not
// in `registry` are reported as skipped. `workers` threads run steps in parallel.
core::Value remeasure_log(const std::vector<core::Value>& records, const tasks::Registry& registry,
                          const Pipeline& pipeline, std::size_t workers);

// The table printed by `crucible replay`: one row per step (at most `max_rows`), then the
// summary lines.
std::string format_replay(const core::Value& replay, std::size_t max_rows = 50);

}  // namespace crucible::env
