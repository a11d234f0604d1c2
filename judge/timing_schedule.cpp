#include "judge/timing_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace crucible::judge {

std::uint64_t mix_words(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

CallSchedule make_call_schedule(std::uint64_t secret, std::size_t case_index,
                                const ScheduleRule& rule) {
  std::mt19937_64 random(mix_words(secret, 0x7363686564756C65ull + case_index));
  CallSchedule schedule;
  schedule.warmup_pairs =
      rule.warmup_pairs + std::uniform_int_distribution<std::size_t>(0, rule.warmup_pairs)(random);
  schedule.checked.assign(rule.max_samples, false);
  std::bernoulli_distribution coin(std::clamp(rule.check_fraction, 0.0, 1.0));
  for (std::size_t k = 0; k < rule.max_samples; ++k) schedule.checked[k] = coin(random);
  const std::size_t early = std::min(rule.min_samples, rule.max_samples);
  std::vector<std::size_t> first(early);
  std::iota(first.begin(), first.end(), std::size_t{0});
  std::shuffle(first.begin(), first.end(), random);
  for (std::size_t i = 0; i < std::min(rule.early_checks, early); ++i) {
    schedule.checked[first[i]] = true;
  }
  return schedule;
}

std::uint64_t timed_call_seed(std::uint64_t secret, std::uint64_t case_seed, std::size_t call) {
  return mix_words(mix_words(secret, case_seed), 0x74696D6564ull + call);
}

std::size_t first_batch_end(const BatchPlan& plan) {
  const std::size_t remainder = plan.first_stop % plan.max_batch;
  return std::min(plan.total_calls, remainder == 0 ? plan.max_batch : remainder);
}

BatchDecision after_batch(const BatchPlan& plan, const BatchEnd& end) {
  BatchDecision decision;
  decision.extended_past_cap = end.extended_past_cap;
  if (end.reference_wanted <= end.reference_samples &&
      end.candidate_wanted <= end.candidate_samples) {
    decision.stop =
        end.reference_samples >= end.max_samples || end.candidate_samples >= end.max_samples
            ? "max_samples"
            : "interval";
    return decision;
  }
  if (end.spent_ms > end.cap_ms) {
    if ((end.reference_samples > 0 && end.candidate_samples > 0) || end.extended_past_cap) {
      decision.stop = "time_cap";
      return decision;
    }
    decision.extended_past_cap = true;
    decision.next_end = std::min(plan.total_calls, std::max(end.calls, plan.warmup_calls) + 2);
    return decision;
  }
  if (end.spent_ms > end.budget_ms && end.reference_samples >= end.min_samples &&
      end.candidate_samples >= end.min_samples) {
    decision.stop = "step_budget";
    return decision;
  }
  std::size_t batch = plan.max_batch;
  if (end.calls >= plan.first_stop) {
    const std::size_t wanted = std::max(end.reference_wanted, end.candidate_wanted);
    const std::size_t have = std::min(end.reference_samples, end.candidate_samples);
    batch = std::clamp<std::size_t>(2 * (wanted > have ? wanted - have : 0), 8, plan.max_batch);
  }
  decision.next_end = std::min(plan.total_calls, end.calls + batch);
  return decision;
}

double escape_probability(double f, std::size_t checks) {
  return std::pow(1.0 - std::clamp(f, 0.0, 1.0), static_cast<double>(checks));
}

}  // namespace crucible::judge
