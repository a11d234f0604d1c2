// The timed calls' secret schedule and the speedup's interval: pure functions, no GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "judge/timing_schedule.hpp"
#include "judge/timing_stats.hpp"

using namespace crucible::judge;

TEST_CASE("schedule: warm-ups vary with the secret within [w, 2w]") {
  ScheduleRule rule;
  std::set<std::size_t> seen;
  for (std::uint64_t secret = 1; secret <= 200; ++secret) {
    const auto schedule = make_call_schedule(secret, 0, rule);
    CHECK(schedule.warmup_pairs >= rule.warmup_pairs);
    CHECK(schedule.warmup_pairs <= 2 * rule.warmup_pairs);
    seen.insert(schedule.warmup_pairs);
  }
  CHECK(seen.size() == rule.warmup_pairs + 1);  // every count in the range occurs
}

TEST_CASE("schedule: early checks are always there, the rest near the check fraction") {
  ScheduleRule rule;
  rule.max_samples = 2000;
  std::size_t total = 0, late = 0, first_checked = 0;
  const int trials = 300;
  for (int secret = 0; secret < trials; ++secret) {
    const auto schedule = make_call_schedule(static_cast<std::uint64_t>(secret) * 7919, 3, rule);
    REQUIRE(schedule.checked.size() == rule.max_samples);
    std::size_t early = 0;
    for (std::size_t k = 0; k < rule.min_samples; ++k) early += schedule.checked[k] ? 1 : 0;
    CHECK(early >= rule.early_checks);
    for (std::size_t k = rule.min_samples; k < rule.max_samples; ++k) {
      late += schedule.checked[k] ? 1 : 0;
    }
    first_checked += schedule.checked[0] ? 1 : 0;
    for (const bool c : schedule.checked) total += c ? 1 : 0;
  }
  const double late_share = static_cast<double>(late) /
                            (trials * static_cast<double>(rule.max_samples - rule.min_samples));
  CHECK(late_share == doctest::Approx(rule.check_fraction).epsilon(0.05));
  // The first measured call is checked no more often than any other early call would be: it is
  // not special (3 of 30 forced, plus the 10 % coin: about 19 %).
  const double first_share = static_cast<double>(first_checked) / trials;
  CHECK(first_share > 0.08);
  CHECK(first_share < 0.32);
}

TEST_CASE("schedule: another case or another secret gives another schedule") {
  ScheduleRule rule;
  const auto a = make_call_schedule(42, 0, rule);
  const auto b = make_call_schedule(42, 1, rule);
  const auto c = make_call_schedule(43, 0, rule);
  CHECK(a.checked != b.checked);
  CHECK(a.checked != c.checked);
  CHECK(make_call_schedule(42, 0, rule).checked == a.checked);  // and it is a pure function
}

TEST_CASE("schedule: every timed call gets its own input seed") {
  std::set<std::uint64_t> seeds;
  for (std::size_t call = 0; call < 5000; ++call) seeds.insert(timed_call_seed(9, 1234, call));
  CHECK(seeds.size() == 5000);
  CHECK(timed_call_seed(9, 1234, 7) != timed_call_seed(10, 1234, 7));
  CHECK(timed_call_seed(9, 1234, 7) != timed_call_seed(9, 1235, 7));
}

TEST_CASE("schedule: escape probability is (1 - f)^checks") {
  CHECK(escape_probability(0.5, 4) == doctest::Approx(0.0625));
  CHECK(escape_probability(0.0, 10) == doctest::Approx(1.0));
  CHECK(escape_probability(1.0, 1) == doctest::Approx(0.0));
}

namespace {

// A case of 7 warm-up pairs and 30 samples a side: the rule can first stop at call 74.
BatchPlan plan_of_74() {
  BatchPlan plan;
  plan.total_calls = 2 * (2000 + 7);
  plan.warmup_calls = 14;
  plan.first_stop = 74;
  plan.max_batch = 32;
  return plan;
}

// A batch end where neither side's rule is satisfied and neither cap nor budget is reached.
BatchEnd ongoing(std::size_t calls, std::size_t samples) {
  BatchEnd end;
  end.calls = calls;
  end.reference_samples = end.candidate_samples = samples;
  end.reference_wanted = end.candidate_wanted = 400;
  end.min_samples = 30;
  end.max_samples = 2000;
  end.spent_ms = 1.0;
  end.cap_ms = 1000.0;
  end.budget_ms = 500.0;
  return end;
}

}  // namespace

TEST_CASE("batches: the first ends so that one ends exactly where the rule can first stop") {
  const BatchPlan plan = plan_of_74();
  CHECK(first_batch_end(plan) == 10);  // 10, 42, 74
  const BatchDecision second = after_batch(plan, ongoing(10, 0));
  CHECK(second.stop.empty());
  CHECK(second.next_end == 42);
  CHECK(after_batch(plan, ongoing(42, 14)).next_end == 74);
  // Past first_stop the next batch covers twice the missing samples, 8 to 32 calls.
  BatchEnd near = ongoing(74, 30);
  near.reference_wanted = 33;
  near.candidate_wanted = 31;
  CHECK(after_batch(plan, near).next_end == 74 + 8);
  near.reference_wanted = 40;
  CHECK(after_batch(plan, near).next_end == 74 + 20);
  CHECK(after_batch(plan, ongoing(74, 30)).next_end == 74 + 32);
  BatchPlan short_order = plan;
  short_order.total_calls = 80;
  CHECK(after_batch(short_order, ongoing(74, 30)).next_end == 80);
}

TEST_CASE("batches: the rule's stops, in order of precedence") {
  const BatchPlan plan = plan_of_74();
  BatchEnd end = ongoing(106, 46);
  end.reference_wanted = 46;
  end.candidate_wanted = 40;
  CHECK(after_batch(plan, end).stop == "interval");
  end.reference_samples = end.candidate_samples = end.max_samples = 46;
  CHECK(after_batch(plan, end).stop == "max_samples");

  end = ongoing(106, 46);
  end.spent_ms = 1001.0;
  CHECK(after_batch(plan, end).stop == "time_cap");
  end.spent_ms = 501.0;  // past the budget with min_samples a side
  CHECK(after_batch(plan, end).stop == "step_budget");
  end.reference_samples = 29;  // the budget waits for min_samples
  CHECK(after_batch(plan, end).stop.empty());
}

TEST_CASE("batches: a cap reached before a measured call ends the warm-up and times one pair") {
  // A slow kernel under a 20 ms cap: the first batch (10 calls, all warm-up) takes 60 ms. The
  // measurement must not stop with no sample (it used to: the case then had no time at all).
  const BatchPlan plan = plan_of_74();
  BatchEnd end = ongoing(10, 0);
  end.cap_ms = 20.0;
  end.spent_ms = 60.0;
  const BatchDecision extend = after_batch(plan, end);
  CHECK(extend.stop.empty());
  CHECK(extend.extended_past_cap);
  CHECK(extend.next_end == 16);  // the 4 warm-up calls left and one measured pair
  // That pair measured: stop at the cap.
  end.calls = 16;
  end.reference_samples = end.candidate_samples = 1;
  end.spent_ms = 90.0;
  end.extended_past_cap = true;
  CHECK(after_batch(plan, end).stop == "time_cap");
  // Still no sample on a side (records missing): stop anyway, once extended.
  end.candidate_samples = 0;
  CHECK(after_batch(plan, end).stop == "time_cap");
  // Past the warm-up already with no sample on a side: one more pair from here.
  BatchEnd late = ongoing(42, 0);
  late.candidate_samples = 14;
  late.cap_ms = 20.0;
  late.spent_ms = 25.0;
  CHECK(after_batch(plan, late).next_end == 44);
}

TEST_CASE("speedup interval: a tight pair gives a tight interval around the ratio") {
  TimingSummary reference, candidate;
  reference.median_ns = 2000, reference.ci95_low_ns = 1990, reference.ci95_high_ns = 2010;
  candidate.median_ns = 1000, candidate.ci95_low_ns = 995, candidate.ci95_high_ns = 1005;
  const auto estimate = speedup_estimate(reference, candidate);
  CHECK(estimate.speedup == doctest::Approx(2.0));
  CHECK(estimate.low < 2.0);
  CHECK(estimate.high > 2.0);
  CHECK(estimate.low > 1.98);
  CHECK(estimate.high < 2.02);
  CHECK(estimate.resolved());
  // ln-widths add in quadrature: both sides 0.5 % wide -> about 0.71 % on the ratio.
  const double half = std::log(estimate.high / estimate.speedup);
  CHECK(half == doctest::Approx(std::sqrt(2.0) * std::log(2010.0 / 1990.0) / 2).epsilon(0.01));
}

TEST_CASE("speedup interval: overlapping noisy medians are not resolved") {
  TimingSummary reference, candidate;
  reference.median_ns = 1000, reference.ci95_low_ns = 950, reference.ci95_high_ns = 1060;
  candidate.median_ns = 990, candidate.ci95_low_ns = 940, candidate.ci95_high_ns = 1050;
  const auto estimate = speedup_estimate(reference, candidate);
  CHECK(estimate.low < 1.0);
  CHECK(estimate.high > 1.0);
  CHECK_FALSE(estimate.resolved());
}

TEST_CASE("speedup interval: the combined interval narrows with independent cases") {
  TimingSummary reference, candidate;
  reference.median_ns = 1100, reference.ci95_low_ns = 1080, reference.ci95_high_ns = 1120;
  candidate.median_ns = 1000, candidate.ci95_low_ns = 980, candidate.ci95_high_ns = 1020;
  const auto one = speedup_estimate(reference, candidate);
  const auto combined = combined_speedup({{one, 1.0}, {one, 1.0}, {one, 1.0}, {one, 1.0}});
  REQUIRE(combined.has_value());
  CHECK(combined->speedup == doctest::Approx(1.1));
  CHECK(combined->log_sigma == doctest::Approx(one.log_sigma / 2));  // four equal cases
  CHECK_FALSE(combined_speedup({}).has_value());
  // A case of weight 0.9 dominates: the interval is about that case's.
  const auto skewed = combined_speedup({{one, 0.9}, {one, 0.1}});
  REQUIRE(skewed.has_value());
  CHECK(skewed->log_sigma == doctest::Approx(one.log_sigma * std::sqrt(0.81 + 0.01)));
}
