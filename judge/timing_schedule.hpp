// The secret plan of one case's timed calls: how many warm-up pairs precede the measured ones,
// which of the candidate's calls are checked against the reference, and each call's input seed.
// Pure functions of the job's secret, so the runner's choices can be tested without a GPU and a
// kernel, which never sees the secret, cannot predict them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace crucible::judge {

// A 64-bit mix of two words (splitmix64's finaliser): the runner's seeds, canaries and secret
// choices are all made with it.
std::uint64_t mix_words(std::uint64_t a, std::uint64_t b);

struct ScheduleRule {
  std::size_t warmup_pairs = 5;  // at least this many warm-up pairs; up to twice as many
  std::size_t min_samples = 30;  // measured calls per side the stopping rule always waits for
  std::size_t max_samples = 2000;
  double check_fraction = 0.1;   // share of the candidate's measured calls checked at random
  std::size_t early_checks = 3;  // calls checked among the first min_samples, always
};

struct CallSchedule {
  std::size_t warmup_pairs = 0;
  // checked[k]: whether the candidate's k-th measured call (0-based, after the warm-up) is
  // checked. The call after the last measured one is always checked too (see docs/runner.md).
  std::vector<bool> checked;
};

// The schedule of case `case_index` under `secret`: warmup_pairs uniform in [w, 2w]; among
// the first min_samples measured calls exactly early_checks distinct ones chosen uniformly,
// and every measured call independently with probability check_fraction.
CallSchedule make_call_schedule(std::uint64_t secret, std::size_t case_index,
                                const ScheduleRule& rule);

// The seed of timed call `call`'s inputs in case `case_index`: every timed call draws fresh
// values from it (and the checking reference run draws the same ones again).
std::uint64_t timed_call_seed(std::uint64_t secret, std::uint64_t case_seed, std::size_t call);

// The batches of a case's timed calls. The calls go to the GPU in batches; at each batch's end
// the runner reads the samples (CUPTI's records) and asks after_batch whether to stop.
struct BatchPlan {
  std::size_t total_calls = 0;   // calls in the interleaved order (warm-up included)
  std::size_t warmup_calls = 0;  // 2 x the warm-up pairs
  std::size_t first_stop = 0;    // the first call count where the rule can stop
  std::size_t max_batch = 32;
};

// The call count where the first batch ends: batches before first_stop end max_batch calls
// apart, counting back from it, so that one ends exactly there.
std::size_t first_batch_end(const BatchPlan& plan);

struct BatchEnd {
  std::size_t calls = 0;                                     // calls issued so far
  std::size_t reference_samples = 0, candidate_samples = 0;  // measured calls a side
  std::size_t reference_wanted = 0, candidate_wanted = 0;    // samples_to_stop a side
  std::size_t min_samples = 0, max_samples = 0;
  double spent_ms = 0, cap_ms = 0, budget_ms = 0;
  bool extended_past_cap = false;  // a previous batch end was past the cap with no samples
};

struct BatchDecision {
  std::string stop;          // "interval", "max_samples", "time_cap", "step_budget"; empty: go on
  std::size_t next_end = 0;  // going on: the call count where the next batch ends
  bool extended_past_cap = false;
};

// Stops when both sides' samples reach what the rule wants (interval, or max_samples); at the
// time cap once each side has a measured call (a cap reached before that, as a slow kernel's
// warm-up can reach a short one, ends the warm-up and one more pair first, once); past the step
// budget once each side has min_samples. Otherwise the next batch ends max_batch calls on
// before first_stop, and after it where the samples say the rule will stop (twice the missing
// samples, 8 to max_batch calls).
BatchDecision after_batch(const BatchPlan& plan, const BatchEnd& end);

// The probability that a kernel which computes wrongly on a random share f of its calls
// passes `checks` checked calls: (1 - f)^checks.
double escape_probability(double f, std::size_t checks);

}  // namespace crucible::judge
