// Trajectory replay: re-score a log's rewards with another spec, or re-measure every step.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"
#include "env/pipeline.hpp"
#include "env/trajectory_log.hpp"
#include "rewards/reward.hpp"
#include "tasks/registry.hpp"

namespace crucible::env {

// Every record the reader decoded, in log order, with the reader's report. Bytes that form no
// record (a flipped bit, a torn tail) are skipped by the reader and listed in `report.skipped`;
// the records around them are all here. Errors: the reader's, prefixed with what replay was
// doing; a newer format says so and that a newer crucible is needed.
struct LoadedLog {
  std::vector<core::Value> records;
  LogReadReport report;
  // The report as replay.json holds it: {format_version, records, file_bytes, torn_tail,
  // tail_reason?, torn_bytes?, skipped: [{offset, bytes, reason}], skipped_bytes,
  // damaged_ranges}.
  core::Value read_report;
};
core::Result<LoadedLog> load_log(const std::filesystem::path& path);

// Records are checked before use: a step record is a map with `task` (string), `result` (map
// whose `status` is a step status name and whose `speedup`, if any, is a positive finite number)
// and `reward` (finite number); when present, `seed` is a non-negative integer, `source` a
// string, `plan` an array or a map, `reward_spec` a map, `episode` a string or an integer and
// `step` an integer. Any other record (checksum-valid, but of the wrong shape) is listed as a
// step holding only `index` and `malformed`, the reason naming the field ("field 'task' must be
// a string, got integer"); it is counted in summary.malformed and takes no part in any other
// figure. Both functions accept Values of any shape and never throw on it.

// Recomputes each record's reward from its logged measurement (result.status, result.speedup)
// with `spec`. No GPU, no compile. Returns {mode: "rescore", reward_spec, steps: [{index,
// episode?, step?, task, status, speedup?, old_reward, new_reward, delta} or {index,
// malformed}], summary: {steps (every record), malformed, mean_old, mean_new, mean_delta,
// changed, by_status: {status: {steps, mean_old, mean_new}}}}; the means are over the records
// that were re-scored.
core::Value rescore_log(const std::vector<core::Value>& records, const rewards::RewardSpec& spec);

// Re-runs each record's (task, source, plan, seed, reward_spec) through `pipeline` and compares
// with the logged result. Returns {mode: "remeasure", steps: [{index, task, old_status,
// new_status, flipped, old_speedup?, new_speedup?, speedup_ratio?, old_reward, new_reward,
// reward_delta, message} or {index, malformed}], summary: {steps (every record), compared,
// skipped, malformed, status_flips, flips: {"old->new": n}, correct_flips (ok before, not ok
// now), new_infra_errors, speedup_ratio: {count, min, p05, p50, p95, max, within_2pct},
// reward_delta: {mean, mean_abs, max_abs}}}. Records whose task is not in `registry` (or with no
// source, or a logged spec that does not parse) are reported as skipped. `workers` threads run
// steps in parallel.
core::Value remeasure_log(const std::vector<core::Value>& records, const tasks::Registry& registry,
                          const Pipeline& pipeline, std::size_t workers);

// The table printed by `crucible replay`: one row per step (at most `max_rows`), then the
// summary lines.
std::string format_replay(const core::Value& replay, std::size_t max_rows = 50);

}  // namespace crucible::env
