// `crucible eval compare A B`: two evaluations side by side, per task and overall, with the
// timing noise of each speedup difference.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::env {

// The records of one side: `path` is an eval output folder (its results.jsonl is read) or a
// results.jsonl file, read by read_results (strict; a torn last line is dropped and counted in
// `torn_lines`). Errors: kIo (missing, not a regular file or folder, a folder without
// results.jsonl), kInvalidArgument (a bad line, named by file and line).
core::Result<std::vector<core::Value>> load_compare_side(const std::filesystem::path& path,
                                                         std::size_t* torn_lines = nullptr);

// The timing noise of a sample's speedup: sigma of ln(speedup), from the record's 95 %
// interval (`speedup_ci95`, else result.timing.speedup_ci95, else the per-case intervals of
// result.timing.cases combined as the runner combines them). nullopt when none is recorded.
std::optional<double> speedup_log_sigma(const core::Value& record);

// Compares A and B (results.jsonl records; infra_error samples take no part, as in the
// summary). Returns
//   {a: side_info, b: side_info, overall: row, tasks: {task: row}, only_in_a: [task],
//    only_in_b: [task], conventions}
// where a row is
//   {a: side, b: side, correct_rate_delta (B - A, a fraction),
//    speedup_correct: diff, speedup_all: diff,
//    pairs: {matched, ok_only_in_a, ok_only_in_b}   (samples with the same sample_id)}
// a side is {samples, scored, correct, correct_rate, timed, geomean_speedup_correct,
// geomean_speedup_all, without_interval (timed ok samples with no recorded interval)} and a
// diff is {a, b (the geometric means, null when absent), difference (b - a), ratio (b / a),
// ratio_ci95: {low, high} (timing noise only), noise_pct (half-width of that interval in
// percent of the ratio, the larger side), verdict}. The verdict is "within noise" when the
// interval holds 1, "B faster" or "B slower" when it does not, "noise unknown" when no sample
// of either side recorded an interval, and "no data" when a side has no geometric mean.
// The noise of a geometric mean over n samples is sqrt(sum sigma_i^2) / n in log space (a
// failed sample in the "all" figure counts as exactly 1.0, with no noise); the two sides are
// measured independently, so the ratio's log-sigma is the root sum of their squares.
// `a_info` and `b_info` (e.g. {path}) are copied into the result's a and b.
core::Value compare_results(const std::vector<core::Value>& a, const std::vector<core::Value>& b,
                            const core::Value& a_info, const core::Value& b_info);

// The comparison as Markdown: an overall table, a per-task table, the tasks on one side only.
std::string render_compare_markdown(const core::Value& comparison);

// What `crucible eval compare A B [--json]` prints: both sides loaded, compared and rendered
// as Markdown, or as JSON (indented, with a trailing newline). A torn last line of either
// results.jsonl is dropped and noted in `notes` (one line each). Errors: load_compare_side's,
// the message naming the side's path.
core::Result<std::string> compare_eval_outputs(const std::filesystem::path& a,
                                               const std::filesystem::path& b, bool json,
                                               std::string* notes = nullptr);

}  // namespace crucible::env
