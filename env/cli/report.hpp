// Evaluation metrics (correct rate, geometric-mean speedups, fast_p) and the Markdown/HTML reports.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/value.hpp"

namespace crucible::env {

// Conventions (docs/eval.md):
//  - infra_error samples are the server's fault: they are counted and listed apart and take no
//    part in any metric below.
//  - n: the remaining (scored) samples. correct: status ok.
//  - geomean_speedup_correct: exp(mean(ln speedup)) over correct samples that were timed.
//  - geomean_speedup_all: the same over every scored sample, an incorrect one (any status but
//    ok) counting as speedup 1.0: the reference is kept when the candidate fails, so the figure
//    is the speedup one would actually ship. A correct but untimed sample also counts as 1.0.
//  - fast_p: fraction of the n samples that are correct and faster than p times the reference
//    (speedup > p); fast_0 is the correct rate.
inline constexpr double kIncorrectSpeedup = 1.0;
inline constexpr double kFastPMax = 4.0;
inline constexpr double kFastPStep = 0.05;

struct Metrics {
  std::size_t samples = 0;  // every record, infra included
  std::size_t infra_errors = 0;
  std::size_t scored = 0;  // samples - infra_errors
  std::size_t correct = 0;
  std::size_t timed = 0;      // correct samples with a speedup
  double correct_rate = 0.0;  // correct / scored (0 when nothing was scored)
  std::optional<double> geomean_speedup_correct;
  std::optional<double> geomean_speedup_all;
  std::optional<double> best_speedup;
  // Samples that cheated and were caught: hack_detected, or correct on every correctness run
  // and wrong in a checked timed call (record.caught_in_timed_call); hack_rate = hacks / scored.
  std::size_t hacks = 0;
  double hack_rate = 0.0;
  // Timed correct samples whose speedup's 95 % interval excludes 1.0 (record.speedup_ci95).
  std::size_t speedups_resolved = 0;
  // The model check's end-to-end figure (docs/models.md): the geometric mean of the whole
  // model step's speedup over the correct samples that had one (record.model.step_speedup).
  std::size_t model_checked = 0;
  std::optional<double> geomean_step_speedup;
  core::Value statuses = core::Value::object();  // status -> count, infra_error included

  // Fraction of scored samples with status ok and speedup > p (p <= 0: every correct one).
  double fast_p(double p) const;
  std::vector<double> speedups;  // of timed correct samples
  core::Value to_value() const;
};

// Metrics of the records (results.jsonl lines: {status, speedup?}).
Metrics compute_metrics(const std::vector<core::Value>& records);

// The group of the samples without a meta.model, when other samples name theirs.
inline constexpr const char* kNoModel = "(no meta.model)";

// summary.json: {run, overall, categories: {name: metrics}, tasks: {id: metrics},
// models: {meta.model: metrics} and model_tasks: {meta.model: {task id: metrics}} (both empty
// unless some sample names its model; then every sample is in a group, kNoModel for those that
// name none; a model that is not a string is grouped by its JSON text),
// fast_p: [{p, overall, <category>...}], infra_errors: [{sample_id, task, message}],
// conventions}.
core::Value summarize(const std::vector<core::Value>& records, const core::Value& run_info);

// Why a summary holds no scored sample, for `crucible eval`'s exit message: "no sample was
// recorded" or "every sample (3) was an infra_error, the server's fault, not the samples':
// no CUDA device (3)" with the most common reasons (at most 3) and their counts.
std::string nothing_measured_reason(const core::Value& summary);

// The Markdown report of a summary.
std::string render_markdown(const core::Value& summary);
// A self-contained HTML page (inline CSS and SVG, no scripts, no external resources) with the
// speedup per task, the status distribution, the per-category geometric means and the fast_p
// curve, each chart followed by a table of the same numbers. Text is escaped.
std::string render_html(const core::Value& summary);

// Numbers as the reports print them: "1.234" (3 decimals), "-" for a value that does not exist
// (a geometric mean over no sample); percents as "45.0%".
std::string format_number(const core::Value& value);
std::string format_percent(double fraction);
std::string escape_html(const std::string& text);
// A name as one Markdown table cell: `|` escaped, line breaks as spaces.
std::string markdown_cell(const std::string& text);

}  // namespace crucible::env
