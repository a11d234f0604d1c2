// Timing statistics that decide the reward: robust summaries, the median's CI, stopping, geomean.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/value.hpp"

namespace crucible::judge {

// Summary of per-call durations in nanoseconds.
//
// Quantiles use linear interpolation between order statistics (Hyndman & Fan type 7, the
// default of R and numpy): for sorted x[0..n-1] and probability p, h = (n - 1) p and
// q(p) = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]). The median is q(0.5).
//
// The 95% confidence interval of the median is distribution-free: [x_(l), x_(n+1-l)] (1-based
// order statistics) with the largest l such that P(Binomial(n, 1/2) <= l - 1) <= 0.025, so it
// covers the true median with probability >= 95% for any continuous distribution. With fewer
// than 6 samples no such l exists and the interval is [min, max] (coverage 1 - 2^(1-n) < 95%).
//
// No outliers are removed (the median is robust to them); outliers_3iqr reports how many
// samples lie beyond 3 IQR from the quartiles, a sign of interference during measurement.
struct TimingSummary {
  std::size_t count = 0;  // finite samples used; non-finite samples are dropped
  double median_ns = 0, p25_ns = 0, p75_ns = 0, iqr_ns = 0, mean_ns = 0, min_ns = 0, max_ns = 0;
  double ci95_low_ns = 0, ci95_high_ns = 0;
  // (ci95_high_ns - ci95_low_ns) / 2 / median_ns; 0 for a zero-width interval, +inf when the
  // median is 0 but the interval is not.
  double ci95_rel_halfwidth = 0;
  std::size_t outliers_3iqr = 0;

  core::Value to_value() const;
};

// Summarizes `samples_ns` (any order). An empty input gives all zeros.
TimingSummary summarize(std::vector<double> samples_ns);

// Order-statistic ranks (1-based, l <= u) of the distribution-free 95% CI of the median for n
// samples, as used by summarize. n = 0 gives {0, 0}.
std::pair<std::size_t, std::size_t> median_ci95_ranks(std::size_t n);

// Sequential stopping rule for the runner's timing loop: stop once the median's 95% CI
// relative half-width is <= target_rel_halfwidth with at least min_samples, or once
// max_samples are in, or once elapsed_ns (the runner's wall-clock time spent measuring this
// case) reaches max_elapsed_ns (0: no time cap).
struct StoppingRule {
  double target_rel_halfwidth = 0.01;
  std::size_t min_samples = 20;
  std::size_t max_samples = 2000;
  double max_elapsed_ns = 0;
};
bool should_stop(const std::vector<double>& samples_ns, const StoppingRule& rule,
                 double elapsed_ns = 0);

// How many samples the rule will likely want in all, from those in: min_samples while fewer are
// in; otherwise, since the interval narrows as 1/sqrt(n), n * (half-width / target)^2 (at least
// one more when the rule does not stop yet), capped at max_samples. At or below samples.size()
// exactly when should_stop (without a time cap) holds, so the runner asks this alone: whether to
// stop, and where to read its next batch (a case is not timed past its stop).
std::size_t samples_to_stop(const std::vector<double>& samples_ns, const StoppingRule& rule);

// exp(sum w_i ln v_i / sum w_i) over (value, weight) pairs; weights are normalized. nullopt
// when the input is empty or any value or weight is non-finite or <= 0.
std::optional<double> weighted_geomean(const std::vector<std::pair<double, double>>& value_weight);

// The weighted geometric mean over a timing report's cases (`{"cases": [{"weight", field}]}`)
// of `field`: a case's median (`{"candidate": {"median_ns": ...}}`) or a plain number
// (`"floor_ns"`), weight 1 when absent. nullopt unless every case has it. The GPU stage's
// reward and replay's rescoring both read a step's times this way.
std::optional<double> weighted_case_time_ns(const core::Value& timing, std::string_view field);

// A speedup (reference median / candidate median) with its 95 % interval. Each median's
// distribution-free interval is read as a normal error of ln(median) with
// sigma = (ln high - ln low) / (2 * 1.96); the two sides are measured independently
// (interleaved calls), so the log-speedup's sigma is the root sum of their squares, and the
// interval is speedup * exp(+-1.96 sigma). A zero-width side contributes nothing.
struct SpeedupEstimate {
  double speedup = 0;
  double low = 0;
  double high = 0;
  double log_sigma = 0;
  // Whether the interval lies wholly above or below 1: the speed difference is resolved.
  bool resolved() const { return low > 1.0 || high < 1.0; }
  core::Value to_value() const;  // {"low", "high"}
};
SpeedupEstimate speedup_estimate(const TimingSummary& reference, const TimingSummary& candidate);

// The weighted geometric mean of per-case estimates and its interval: ln G = sum w_i ln s_i
// with normalised weights, sigma_G = sqrt(sum w_i^2 sigma_i^2) (cases measured independently).
// nullopt under weighted_geomean's conditions.
std::optional<SpeedupEstimate> combined_speedup(
    const std::vector<std::pair<SpeedupEstimate, double>>& estimate_weight);

// The order of `pairs` reference/candidate call pairs, 2 * pairs entries, 0 = reference,
// 1 = candidate: ABBA blocks (0 1 1 0 0 1 1 0 ...), so a linear drift in clocks or temperature
// adds the same total to both sides within every block of two pairs.
std::vector<int> interleaved_order(std::size_t pairs);

}  // namespace crucible::judge
