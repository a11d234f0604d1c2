// Timing statistics: type-7 quantiles, the median's order-statistic CI, stopping, geomean, order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "judge/timing_stats.hpp"

using namespace crucible::judge;

TEST_CASE("timing: quantiles interpolate linearly between order statistics (type 7)") {
  struct Case {
    std::vector<double> samples;
    double median, p25, p75, mean, min, max;
  };
  const Case cases[] = {
      {{5}, 5, 5, 5, 5, 5, 5},
      {{2, 1}, 1.5, 1.25, 1.75, 1.5, 1, 2},
      {{3, 1, 2}, 2, 1.5, 2.5, 2, 1, 3},
      {{1, 2, 3, 4}, 2.5, 1.75, 3.25, 2.5, 1, 4},
      {{10, 1, 100, 1000}, 55, 7.75, 325, 277.75, 1, 1000},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5.5, 3.25, 7.75, 5.5, 1, 10},
      {{7, 7, 7, 7, 7, 7}, 7, 7, 7, 7, 7, 7},
  };
  for (const Case& c : cases) {
    CAPTURE(c.samples.size());
    const TimingSummary s = summarize(c.samples);
    CHECK(s.count == c.samples.size());
    CHECK(s.median_ns == doctest::Approx(c.median));
    CHECK(s.p25_ns == doctest::Approx(c.p25));
    CHECK(s.p75_ns == doctest::Approx(c.p75));
    CHECK(s.iqr_ns == doctest::Approx(c.p75 - c.p25));
    CHECK(s.mean_ns == doctest::Approx(c.mean));
    CHECK(s.min_ns == c.min);
    CHECK(s.max_ns == c.max);
  }
}

TEST_CASE("timing: an empty sample set summarizes to zeros and non-finite samples are dropped") {
  const TimingSummary empty = summarize({});
  CHECK(empty.count == 0);
  CHECK(empty.median_ns == 0);
  CHECK(empty.ci95_rel_halfwidth == 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const TimingSummary s = summarize({nan, 3, inf, 1, 2});
  CHECK(s.count == 3);
  CHECK(s.median_ns == 2);
  CHECK(s.max_ns == 3);
  CHECK(summarize({nan, nan}).count == 0);
}

TEST_CASE("timing: the median CI uses the binomial order-statistic ranks") {
  // Ranks from the exact Binomial(n, 1/2) tails; the n >= 6 rows agree with published tables.
  struct Case {
    std::size_t n, low, high;
  };
  const Case cases[] = {
      {0, 0, 0},  {1, 1, 1},   {2, 1, 2},    {5, 1, 5},     {6, 1, 6},        {7, 1, 7},
      {10, 2, 9}, {20, 6, 15}, {50, 18, 33}, {100, 40, 61}, {1000, 469, 532}, {2000, 956, 1045},
  };
  for (const Case& c : cases) {
    CAPTURE(c.n);
    const auto [low, high] = median_ci95_ranks(c.n);
    CHECK(low == c.low);
    CHECK(high == c.high);
  }
  // The summary reads those order statistics: samples 1..20 give [6, 15].
  std::vector<double> samples;
  for (int i = 20; i >= 1; --i) samples.push_back(i);
  const TimingSummary s = summarize(samples);
  CHECK(s.ci95_low_ns == 6);
  CHECK(s.ci95_high_ns == 15);
  CHECK(s.ci95_rel_halfwidth == doctest::Approx(4.5 / 10.5));
}

TEST_CASE("timing: the median CI covers the true median in at least 93% of 1000 trials") {
  // Log-normal durations (median 1000 ns, a long right tail as real kernel timings have).
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> duration(std::log(1000.0), 0.3);
  for (const std::size_t n : {20u, 50u, 200u}) {
    CAPTURE(n);
    int covered = 0;
    for (int trial = 0; trial < 1000; ++trial) {
      std::vector<double> samples(n);
      for (double& sample : samples) sample = duration(rng);
      const TimingSummary s = summarize(samples);
      covered += s.ci95_low_ns <= 1000.0 && 1000.0 <= s.ci95_high_ns ? 1 : 0;
    }
    CHECK(covered >= 930);
    CHECK(covered <= 1000);
  }
}

TEST_CASE("timing: the median CI narrows like 1/sqrt(n)") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> duration(1000.0, 50.0);
  auto mean_width = [&](std::size_t n) {
    double total = 0;
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<double> samples(n);
      for (double& sample : samples) sample = duration(rng);
      const TimingSummary s = summarize(samples);
      total += s.ci95_high_ns - s.ci95_low_ns;
    }
    return total / 200;
  };
  const double w100 = mean_width(100);
  const double w400 = mean_width(400);
  const double w1600 = mean_width(1600);
  CHECK(w100 / w400 == doctest::Approx(2.0).epsilon(0.2));
  CHECK(w400 / w1600 == doctest::Approx(2.0).epsilon(0.2));
  // For a normal distribution the half-width tends to 1.96 * sigma * sqrt(pi / 2) / sqrt(n).
  CHECK(w1600 / 2 == doctest::Approx(1.96 * 50 * std::sqrt(std::acos(-1.0) / 2) / 40).epsilon(0.1));
}

TEST_CASE("timing: outliers beyond 3 IQR are counted, not removed") {
  std::vector<double> samples{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 5000};
  const TimingSummary s = summarize(samples);
  CHECK(s.outliers_3iqr == 1);
  CHECK(s.max_ns == 5000);
  CHECK(s.median_ns == 105);
  CHECK(summarize({1, 2, 3, 4, 5}).outliers_3iqr == 0);
}

TEST_CASE("timing: the stopping rule stops constant samples at min_samples") {
  const StoppingRule rule;  // target 1%, 20..2000 samples
  std::vector<double> samples;
  std::size_t stopped_at = 0;
  while (samples.size() < 5000) {
    samples.push_back(1234.0);
    if (should_stop(samples, rule)) {
      stopped_at = samples.size();
      break;
    }
  }
  CHECK(stopped_at == rule.min_samples);
}

TEST_CASE("timing: the stopping rule keeps sampling noisy timings until the CI is tight") {
  const StoppingRule rule{0.01, 20, 2000, 0};
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> duration(std::log(1000.0), 0.3);
  std::vector<double> samples;
  std::size_t stopped_at = 0;
  while (samples.size() < 5000) {
    samples.push_back(duration(rng));
    if (should_stop(samples, rule)) {
      stopped_at = samples.size();
      break;
    }
  }
  // sigma 0.3 needs roughly (1.96 * 1.25 * 0.3 / 0.01)^2 ~ 5400 samples: the cap decides.
  CHECK(stopped_at == rule.max_samples);
  // Mild noise (sigma 0.02) reaches 1% well before the cap but after the minimum.
  std::lognormal_distribution<double> mild(std::log(1000.0), 0.02);
  samples.clear();
  stopped_at = 0;
  while (samples.size() < 5000) {
    samples.push_back(mild(rng));
    if (should_stop(samples, rule)) {
      stopped_at = samples.size();
      break;
    }
  }
  CHECK(stopped_at >= rule.min_samples);
  CHECK(stopped_at < 200);
  const TimingSummary final_summary = summarize(samples);
  CHECK(final_summary.ci95_rel_halfwidth <= 0.01);
}

TEST_CASE("timing: the stopping rule honours the caps") {
  const std::vector<double> noisy{1, 100, 5, 900, 3, 70, 2, 800, 4, 600,
                                  1, 100, 5, 900, 3, 70, 2, 800, 4, 600};
  CHECK_FALSE(should_stop(noisy, {0.01, 20, 2000, 0}));
  CHECK(should_stop(noisy, {0.01, 20, 20, 0}));           // max_samples reached
  CHECK(should_stop(noisy, {0.01, 20, 2000, 1e6}, 2e6));  // time cap reached
  CHECK_FALSE(should_stop(noisy, {0.01, 20, 2000, 1e6}, 5e5));
  CHECK_FALSE(should_stop({5, 5, 5}, {0.01, 20, 2000, 0}));  // below min_samples
  CHECK(should_stop({5, 5, 5}, {0.01, 3, 2000, 0}));
}

TEST_CASE("timing: samples_to_stop predicts where the stopping rule stops") {
  const StoppingRule rule{0.01, 20, 2000, 0};
  CHECK(samples_to_stop({5, 5, 5}, rule) == 20);  // below the minimum: the minimum
  const std::vector<double> constant(25, 1234.0);
  CHECK(samples_to_stop(constant, rule) == 25);  // the rule stops now
  // Lognormal noise of sigma 0.03 from the minimum on: the prediction made at each size is
  // within a factor of two of where the rule really stops, and never past max_samples.
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> duration(std::log(1000.0), 0.03);
  std::vector<double> samples;
  std::vector<std::size_t> predicted;
  std::size_t stopped_at = 0;
  while (samples.size() < rule.max_samples) {
    samples.push_back(duration(rng));
    if (samples.size() >= rule.min_samples) predicted.push_back(samples_to_stop(samples, rule));
    if (should_stop(samples, rule)) {
      stopped_at = samples.size();
      break;
    }
  }
  REQUIRE(stopped_at > rule.min_samples);
  CHECK(predicted.back() == stopped_at);  // where it stops it says so
  for (std::size_t k = 0; k + 1 < predicted.size(); ++k) {
    CAPTURE(k);
    CHECK(predicted[k] > k + rule.min_samples);  // not stopped yet: at least one more
    CHECK(predicted[k] <= 2 * stopped_at);
    CHECK(2 * predicted[k] >= stopped_at);
  }
  // Noise the cap decides: the cap.
  std::lognormal_distribution<double> wide(std::log(1000.0), 0.5);
  samples.clear();
  for (int k = 0; k < 100; ++k) samples.push_back(wide(rng));
  CHECK(samples_to_stop(samples, rule) == rule.max_samples);
  samples.resize(rule.max_samples, 1000.0);
  CHECK(samples_to_stop(samples, rule) == rule.max_samples);
}

TEST_CASE("timing: weighted geometric mean and its rejected inputs") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::vector<std::pair<double, double>> value_weight;
    std::optional<double> expected;
  };
  const Case cases[] = {
      {{{2, 1}, {8, 1}}, 4.0},
      {{{2, 10}, {8, 10}}, 4.0},               // weights are normalized
      {{{2, 3}, {8, 1}}, std::pow(2.0, 1.5)},  // (2^3 * 8)^(1/4)
      {{{1.5, 0.2}}, 1.5},
      {{{0.5, 1}, {2, 1}}, 1.0},
      {{}, std::nullopt},
      {{{0, 1}, {2, 1}}, std::nullopt},
      {{{-2, 1}}, std::nullopt},
      {{{inf, 1}}, std::nullopt},
      {{{nan, 1}}, std::nullopt},
      {{{2, -1}, {8, 2}}, std::nullopt},
      {{{2, 0}, {8, 1}}, std::nullopt},
      {{{2, nan}}, std::nullopt},
      {{{2, inf}}, std::nullopt},
  };
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    CAPTURE(i);
    const std::optional<double> got = weighted_geomean(cases[i].value_weight);
    REQUIRE(got.has_value() == cases[i].expected.has_value());
    if (got) CHECK(*got == doctest::Approx(*cases[i].expected));
  }
}

TEST_CASE("timing: the interleaved order alternates ABBA so linear drift cancels") {
  CHECK(interleaved_order(0).empty());
  CHECK(interleaved_order(1) == std::vector<int>{0, 1});
  CHECK(interleaved_order(2) == std::vector<int>{0, 1, 1, 0});
  CHECK(interleaved_order(3) == std::vector<int>{0, 1, 1, 0, 0, 1});
  for (const std::size_t pairs : {2u, 10u, 64u}) {
    const std::vector<int> order = interleaved_order(pairs);
    REQUIRE(order.size() == 2 * pairs);
    // Each pair holds one call of each; a drift linear in call position adds the same total to
    // both sides when the number of pairs is even.
    double reference_drift = 0, candidate_drift = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i % 2 == 1) CHECK(order[i] != order[i - 1]);
      (order[i] == 0 ? reference_drift : candidate_drift) += static_cast<double>(i);
    }
    CHECK(reference_drift == candidate_drift);
  }
}

TEST_CASE("timing: to_value names every field with its unit") {
  const crucible::core::Value value = summarize({1, 2, 3, 4}).to_value();
  CHECK(value["count"] == 4);
  CHECK(value["median_ns"] == 2.5);
  for (const char* key : {"p25_ns", "p75_ns", "iqr_ns", "mean_ns", "min_ns", "max_ns",
                          "ci95_low_ns", "ci95_high_ns", "ci95_rel_halfwidth", "outliers_3iqr"}) {
    CHECK(value.contains(key));
  }
}

TEST_CASE(
    "weighted_case_time_ns: case medians and plain numbers, weighted; nullopt if any is missing") {
  const crucible::core::Value timing{
      {"cases",
       {{{"weight", 3.0}, {"candidate", {{"median_ns", 1000.0}}}, {"floor_ns", 10.0}},
        {{"candidate", {{"median_ns", 16000.0}}}, {"floor_ns", 160.0}}}}};  // weight 1
  const auto candidate = weighted_case_time_ns(timing, "candidate");
  REQUIRE(candidate.has_value());
  CHECK(*candidate == doctest::Approx(2000.0));  // exp((3 ln 1000 + ln 16000) / 4)
  CHECK(*weighted_case_time_ns(timing, "floor_ns") == doctest::Approx(20.0));
  CHECK_FALSE(weighted_case_time_ns(timing, "reference").has_value());
  CHECK_FALSE(weighted_case_time_ns(
      crucible::core::Value{{"cases", crucible::core::Value::array()}}, "candidate"));
  CHECK_FALSE(weighted_case_time_ns(crucible::core::Value("timing"), "candidate"));
  const crucible::core::Value text_weight{
      {"cases", {{{"weight", "heavy"}, {"candidate", {{"median_ns", 1.0}}}}}}};
  CHECK_FALSE(weighted_case_time_ns(text_weight, "candidate"));
}
