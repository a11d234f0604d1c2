// The llm/top_k_top_p_sampling_from_logits oracle on hand-computed rows and, on the task's own
// values, against an independent sort-and-cumsum sampler (vLLM's native formulation).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

constexpr const char* kTaskId = "llm/top_k_top_p_sampling_from_logits";

std::vector<double> sample(std::int64_t vocab, std::vector<double> logits, std::vector<double> u,
                           std::vector<double> k, std::vector<double> p) {
  const auto batch = static_cast<std::int64_t>(u.size());
  auto tensors = oracle_test::call_oracle(
      kTaskId, {{"batch_size", batch}, {"vocab_size", vocab}},
      oracle_test::Tensors{
          {"logits", {core::DType::kF32, {batch, vocab}, std::move(logits)}},
          {"uniform_samples", {core::DType::kF32, {batch}, std::move(u)}},
          {"top_k", {core::DType::kI32, {batch}, std::move(k)}},
          {"top_p", {core::DType::kF32, {batch}, std::move(p)}},
          {"samples", {core::DType::kI32, {batch}, std::vector<double>(batch, -7.0)}},
      });
  return tensors["samples"].values;
}

// Logits whose softmax is proportional to 1, 2, 3, 4 (CDF 0.1, 0.3, 0.6, 1).
std::vector<double> ramp() { return {0.0, std::log(2.0), std::log(3.0), std::log(4.0)}; }

// vLLM's native formulation in double: sort ascending, mask below the k-th largest, softmax,
// drop the prefix whose cumulative probability is <= 1 - p (always keeping the largest), then
// the inverse CDF in vocabulary order. Equal to the task's definition when no logits tie.
std::int64_t sort_and_cumsum(const double* l, std::int64_t vocab, std::int64_t k, double p,
                             double u) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return l[a] < l[b]; });
  if (k <= 0 || k >= vocab) k = vocab;
  std::vector<char> kept(static_cast<std::size_t>(vocab), 0);
  for (std::int64_t i = vocab - k; i < vocab; ++i) kept[order[i]] = 1;
  const double m = l[order.back()];
  double z = 0.0;
  for (std::int64_t v = 0; v < vocab; ++v) z += kept[v] ? std::exp(l[v] - m) : 0.0;
  double cumulative = 0.0;
  for (std::int64_t i = vocab - k; i < vocab - 1; ++i) {
    cumulative += std::exp(l[order[i]] - m) / z;
    if (cumulative <= 1.0 - p) kept[order[i]] = 0;
  }
  double z_n = 0.0;
  for (std::int64_t v = 0; v < vocab; ++v) z_n += kept[v] ? std::exp(l[v] - m) : 0.0;
  double running = 0.0;
  std::int64_t last = -1;
  for (std::int64_t v = 0; v < vocab; ++v) {
    if (!kept[v]) continue;
    running += std::exp(l[v] - m);
    last = v;
    if (running > u * z_n) return v;
  }
  return last;
}

}  // namespace

TEST_CASE("sampling oracle: the inverse CDF in vocabulary order, without filters") {
  const auto s = sample(4, ramp(), {0.05}, {0}, {1.0});
  CHECK(s[0] == 0.0);
  CHECK(sample(4, ramp(), {0.35}, {0}, {1.0})[0] == 2.0);
  CHECK(sample(4, ramp(), {0.6}, {0}, {1.0})[0] == 3.0);
  // Exactly on a boundary the next token: the CDF must pass the draw.
  CHECK(sample(4, ramp(), {0.0}, {1000}, {1.0})[0] == 0.0);
  CHECK(sample(4, ramp(), {1.0}, {0}, {1.0})[0] == 3.0);
}

TEST_CASE("sampling oracle: top-k renormalises, then top-p is taken of the renormalised mass") {
  // k = 2: tokens 2, 3 (weights 3, 4): u = 0.5 -> 0.5 * 7 = 3.5 > 3 -> token 3.
  CHECK(sample(4, ramp(), {0.5}, {2}, {1.0})[0] == 3.0);
  CHECK(sample(4, ramp(), {0.4}, {2}, {1.0})[0] == 2.0);
  // p = 0.5 of the whole row: tokens 3 (above 0) and 2 (above 4 < 5); u = 0.4 -> token 2.
  CHECK(sample(4, ramp(), {0.4}, {0}, {0.5})[0] == 2.0);
  // k = 2 then p = 0.5 of 7: token 3 alone (token 2 has 4 above it, not below 3.5).
  CHECK(sample(4, ramp(), {0.01}, {2}, {0.5})[0] == 3.0);
  // k = 1 is greedy whatever the draw.
  CHECK(sample(4, ramp(), {0.0}, {1}, {1.0})[0] == 3.0);
}

TEST_CASE("sampling oracle: ties stay together in both filters") {
  // Logits 1, 1, 1, 0: k = 1 keeps all three tied tokens (none has a larger logit); u = 0.5 of
  // three equal weights is token 1.
  CHECK(sample(4, {1.0, 1.0, 1.0, 0.0}, {0.5}, {1}, {1.0})[0] == 1.0);
  // p = 0.1 keeps the whole tie level too.
  CHECK(sample(4, {1.0, 1.0, 1.0, 0.0}, {0.9}, {0}, {0.1})[0] == 2.0);
}

TEST_CASE(
    "sampling oracle: on the task's generated rows, the same tokens as an independent "
    "sort-and-cumsum sampler") {
  const tasks::Task& task = oracle_test::repository_task(kTaskId);
  for (const char* name :
       {"h_batch_3_gpt2", "h_batch_77_vocab_1001", "h_greedy_and_tiny_p", "h_k_near_vocab"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const oracle_test::Tensors t = oracle_test::run_case(task, c);
    const std::int64_t batch = c.symbols.at("batch_size");
    const std::int64_t vocab = c.symbols.at("vocab_size");
    std::size_t differ = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      const double* row = t.at("logits").values.data() + b * vocab;
      const auto want =
          sort_and_cumsum(row, vocab, static_cast<std::int64_t>(t.at("top_k").values[b]),
                          t.at("top_p").values[b], t.at("uniform_samples").values[b]);
      differ += t.at("samples").values[b] == static_cast<double>(want) ? 0 : 1;
    }
    CHECK(differ == 0);
  }
}

TEST_CASE("sampling oracle: greedy rows of a generated case take the row's largest logit") {
  const tasks::Task& task = oracle_test::repository_task(kTaskId);
  const tasks::Case& c = oracle_test::case_named(task, "h_greedy_and_tiny_p");
  const oracle_test::Tensors t = oracle_test::run_case(task, c);
  const std::int64_t vocab = c.symbols.at("vocab_size");
  for (std::int64_t b = 0; b < c.symbols.at("batch_size"); ++b) {
    if (t.at("top_k").values[b] != 1.0 && t.at("top_p").values[b] > 0.01) continue;
    CAPTURE(b);
    const double* row = t.at("logits").values.data() + b * vocab;
    CHECK(t.at("samples").values[b] ==
          static_cast<double>(std::max_element(row, row + vocab) - row));
  }
}

TEST_CASE("sampling oracle: each captured case reads one recorded stories260K sampler call") {
  // Real next-token logits of a trained model with the draws and settings recorded beside them
  // (tasks/capture): the cases' symbols give the recorded shapes and the runner builds the
  // recorded bytes.
  oracle_test::check_captured_cases(oracle_test::repository_task(kTaskId),
                                    "top_k_top_p_sampling_from_logits", {}, true);
}

TEST_CASE("sampling oracle: on every captured case, draws the token the capture tool recorded") {
  // The capture tool's sampler (tasks/capture/ops.py, float64 over torch) is written apart from
  // this oracle: the same token on each of the 3 x 4 recorded rows.
  const std::size_t compared =
      oracle_test::compare_captured_cases(oracle_test::repository_task(kTaskId), {"samples"});
  CHECK(compared == 3 * 4);
}
