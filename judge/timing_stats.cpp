// Order statistics, the binomial CI of the median, the stopping rule and the weighted geomean.
#include "judge/timing_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace crucible::judge {

std::optional<double> weighted_case_time_ns(const core::Value& timing, std::string_view field) {
  if (!timing.is_object()) return std::nullopt;
  const auto cases = timing.find("cases");
  if (cases == timing.end() || !cases->is_array() || cases->empty()) return std::nullopt;
  std::vector<std::pair<double, double>> value_weight;
  for (const auto& c : *cases) {
    if (!c.is_object()) return std::nullopt;
    const auto it = c.find(field);
    if (it == c.end()) return std::nullopt;
    const core::Value value = it->is_object() ? it->value("median_ns", core::Value()) : *it;
    const core::Value weight = c.value("weight", core::Value(1.0));
    if (!value.is_number() || !weight.is_number()) return std::nullopt;
    value_weight.emplace_back(value.get<double>(), weight.get<double>());
  }
  return weighted_geomean(value_weight);
}

namespace {

// Type 7 quantile of sorted, non-empty data.
double quantile_sorted(const std::vector<double>& sorted, double p) {
  const double h = static_cast<double>(sorted.size() - 1) * p;
  const auto below = static_cast<std::size_t>(std::floor(h));
  if (below + 1 >= sorted.size()) return sorted.back();
  const double fraction = h - static_cast<double>(below);
  return sorted[below] + fraction * (sorted[below + 1] - sorted[below]);
}

// log P(Binomial(n, 1/2) = k), through lgamma so large n neither overflows nor underflows.
double log_binomial_half(std::size_t n, std::size_t k) {
  const auto nd = static_cast<double>(n);
  const auto kd = static_cast<double>(k);
  return std::lgamma(nd + 1) - std::lgamma(kd + 1) - std::lgamma(nd - kd + 1) - nd * std::log(2.0);
}

}  // namespace

std::pair<std::size_t, std::size_t> median_ci95_ranks(std::size_t n) {
  if (n == 0) return {0, 0};
  // Largest l with P(X <= l - 1) <= 0.025: the interval [x_(l), x_(n+1-l)] then misses the
  // median with probability 2 P(X <= l - 1) <= 0.05. The lower tail is summed upward until it
  // would exceed 0.025; it never passes the centre, so l <= (n + 1) / 2.
  constexpr double kTail = 0.025;
  // Terms more than 12 standard deviations (sd = sqrt(n) / 2) below the centre sum to less than
  // 1e-30 and are skipped, so the cost is O(sqrt n), not O(n).
  const double skip =
      std::floor(static_cast<double>(n) / 2.0 - 6.0 * std::sqrt(static_cast<double>(n)));
  std::size_t lower = skip > 0 ? static_cast<std::size_t>(skip) : 0;  // terms below: ~0
  double term = std::exp(log_binomial_half(n, lower));
  double cdf = 0.0;
  // Invariant: cdf = P(X <= lower - 1) <= kTail, term = P(X = lower).
  while (lower <= n / 2 && cdf + term <= kTail) {
    cdf += term;
    term *= static_cast<double>(n - lower) / static_cast<double>(lower + 1);
    ++lower;
  }
  const std::size_t l = std::max<std::size_t>(lower, 1);
  return {l, n + 1 - l};
}

TimingSummary summarize(std::vector<double> samples_ns) {
  std::erase_if(samples_ns, [](double sample) { return !std::isfinite(sample); });
  TimingSummary summary;
  const std::size_t n = samples_ns.size();
  if (n == 0) return summary;
  std::sort(samples_ns.begin(), samples_ns.end());
  summary.count = n;
  summary.min_ns = samples_ns.front();
  summary.max_ns = samples_ns.back();
  summary.median_ns = quantile_sorted(samples_ns, 0.5);
  summary.p25_ns = quantile_sorted(samples_ns, 0.25);
  summary.p75_ns = quantile_sorted(samples_ns, 0.75);
  summary.iqr_ns = summary.p75_ns - summary.p25_ns;
  // Sorted ascending: summing small to large keeps the rounding error of the mean low.
  summary.mean_ns =
      std::accumulate(samples_ns.begin(), samples_ns.end(), 0.0) / static_cast<double>(n);
  const auto [low_rank, high_rank] = median_ci95_ranks(n);
  summary.ci95_low_ns = samples_ns[low_rank - 1];
  summary.ci95_high_ns = samples_ns[high_rank - 1];
  const double width = summary.ci95_high_ns - summary.ci95_low_ns;
  if (width == 0.0) {
    summary.ci95_rel_halfwidth = 0.0;
  } else if (summary.median_ns == 0.0) {
    summary.ci95_rel_halfwidth = std::numeric_limits<double>::infinity();
  } else {
    summary.ci95_rel_halfwidth = width / 2.0 / std::fabs(summary.median_ns);
  }
  const double fence_low = summary.p25_ns - 3.0 * summary.iqr_ns;
  const double fence_high = summary.p75_ns + 3.0 * summary.iqr_ns;
  summary.outliers_3iqr = static_cast<std::size_t>(
      std::count_if(samples_ns.begin(), samples_ns.end(),
                    [&](double sample) { return sample < fence_low || sample > fence_high; }));
  return summary;
}

core::Value TimingSummary::to_value() const {
  return core::Value{
      {"count", count},
      {"median_ns", median_ns},
      {"p25_ns", p25_ns},
      {"p75_ns", p75_ns},
      {"iqr_ns", iqr_ns},
      {"mean_ns", mean_ns},
      {"min_ns", min_ns},
      {"max_ns", max_ns},
      {"ci95_low_ns", ci95_low_ns},
      {"ci95_high_ns", ci95_high_ns},
      {"ci95_rel_halfwidth", ci95_rel_halfwidth},
      {"outliers_3iqr", outliers_3iqr},
  };
}

bool should_stop(const std::vector<double>& samples_ns, const StoppingRule& rule,
                 double elapsed_ns) {
  if (samples_ns.size() >= rule.max_samples) return true;
  if (rule.max_elapsed_ns > 0 && elapsed_ns >= rule.max_elapsed_ns) return true;
  if (samples_ns.size() < rule.min_samples) return false;
  const TimingSummary summary = summarize(samples_ns);
  // Too many non-finite samples can leave nothing to judge; keep sampling until the caps.
  if (summary.count < rule.min_samples) return false;
  return summary.ci95_rel_halfwidth <= rule.target_rel_halfwidth;
}

std::size_t samples_to_stop(const std::vector<double>& samples_ns, const StoppingRule& rule) {
  const std::size_t n = samples_ns.size();
  if (n >= rule.max_samples) return n;
  if (n < rule.min_samples) return rule.min_samples;
  const TimingSummary summary = summarize(samples_ns);
  if (summary.count < rule.min_samples) return std::min(rule.max_samples, n + 1);
  const double ratio = summary.ci95_rel_halfwidth / rule.target_rel_halfwidth;
  if (ratio <= 1.0) return n;  // should_stop's test; a NaN ratio falls through to the cap
  const double wanted = std::ceil(static_cast<double>(n) * ratio * ratio);
  if (!std::isfinite(wanted) || wanted >= static_cast<double>(rule.max_samples)) {
    return rule.max_samples;
  }
  return std::max(n + 1, static_cast<std::size_t>(wanted));
}

std::optional<double> weighted_geomean(const std::vector<std::pair<double, double>>& value_weight) {
  if (value_weight.empty()) return std::nullopt;
  double weighted_log_sum = 0.0;
  double weight_sum = 0.0;
  for (const auto& [value, weight] : value_weight) {
    if (!std::isfinite(value) || !(value > 0.0)) return std::nullopt;
    if (!std::isfinite(weight) || !(weight > 0.0)) return std::nullopt;
    weighted_log_sum += weight * std::log(value);
    weight_sum += weight;
  }
  if (!std::isfinite(weight_sum)) return std::nullopt;
  const double result = std::exp(weighted_log_sum / weight_sum);
  if (!std::isfinite(result)) return std::nullopt;
  return result;
}

namespace {

constexpr double kZ95 = 1.959963984540054;

double log_sigma_of(const TimingSummary& summary) {
  if (!(summary.ci95_low_ns > 0.0) || !(summary.ci95_high_ns >= summary.ci95_low_ns)) return 0.0;
  return (std::log(summary.ci95_high_ns) - std::log(summary.ci95_low_ns)) / (2.0 * kZ95);
}

SpeedupEstimate with_sigma(double speedup, double sigma) {
  SpeedupEstimate estimate;
  estimate.speedup = speedup;
  estimate.log_sigma = sigma;
  estimate.low = speedup * std::exp(-kZ95 * sigma);
  estimate.high = speedup * std::exp(kZ95 * sigma);
  return estimate;
}

}  // namespace

core::Value SpeedupEstimate::to_value() const { return core::Value{{"low", low}, {"high", high}}; }

SpeedupEstimate speedup_estimate(const TimingSummary& reference, const TimingSummary& candidate) {
  const double speedup =
      candidate.median_ns > 0.0 ? reference.median_ns / candidate.median_ns : 0.0;
  const double r = log_sigma_of(reference), c = log_sigma_of(candidate);
  return with_sigma(speedup, std::sqrt(r * r + c * c));
}

std::optional<SpeedupEstimate> combined_speedup(
    const std::vector<std::pair<SpeedupEstimate, double>>& estimate_weight) {
  std::vector<std::pair<double, double>> values;
  double weight_sum = 0.0;
  for (const auto& [estimate, weight] : estimate_weight) {
    values.emplace_back(estimate.speedup, weight);
    weight_sum += weight;
  }
  const auto geomean = weighted_geomean(values);
  if (!geomean) return std::nullopt;
  double variance = 0.0;
  for (const auto& [estimate, weight] : estimate_weight) {
    const double w = weight / weight_sum;
    variance += w * w * estimate.log_sigma * estimate.log_sigma;
  }
  return with_sigma(*geomean, std::sqrt(variance));
}

std::vector<int> interleaved_order(std::size_t pairs) {
  std::vector<int> order;
  order.reserve(2 * pairs);
  for (std::size_t pair = 0; pair < pairs; ++pair) {
    const bool reference_first = pair % 2 == 0;
    order.push_back(reference_first ? 0 : 1);
    order.push_back(reference_first ? 1 : 0);
  }
  return order;
}

}  // namespace crucible::judge
