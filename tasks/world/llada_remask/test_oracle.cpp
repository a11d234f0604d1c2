// The world/llada_remask oracle on a hand-computed step (tied maxima, the top-k by confidence,
// k above the masked count) and on its task's cases (exactly min(k, masked) positions a row).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

// One row of three positions over a vocabulary of 3, mask id 9: x = (9, 5, 9).
Tensors remask(double k, std::vector<double> noise) {
  return oracle_test::call_oracle(
      "world/llada_remask", {{"batch", 1}, {"seq_len", 3}, {"vocab", 3}},
      Tensors{
          {"logits", {core::DType::kBF16, {1, 3, 3}, {1, 2, 2, 7, 7, 7, 0, 0, 3}}},
          {"x", {core::DType::kI64, {1, 3}, {9, 5, 9}}},
          {"noise", {core::DType::kF32, {1, 3}, std::move(noise)}},
          {"num_transfer_tokens", {core::DType::kI64, {1}, {k}}},
          {"x0", {core::DType::kI64, {1, 3}, {0, 0, 0}}},
          {"transfer_index", {core::DType::kI8, {1, 3}, {0, 0, 0}}},
      },
      {{"mask_id", 9.0}});
}

}  // namespace

TEST_CASE("llada_remask oracle: first argmax, log-confidence plus noise, top-k of masked") {
  // Position 0: maxima tied at tokens 1 and 2 -> token 1, confidence 1 / (e^-1 + 2).
  // Position 2: token 2, confidence 1 / (1 + 2 e^-3), higher. Position 1 is not masked.
  auto out = remask(1, {0, 0, 0});
  CHECK(out.at("x0").values == std::vector<double>{1, 5, 2});
  CHECK(out.at("transfer_index").values == std::vector<double>{0, 0, 1});
  // Noise lifts position 0 above position 2: log(1 + 2e^-3) - log(2 + e^-1) = -0.77.
  CHECK(std::log(1 + 2 * std::exp(-3.0)) - std::log(2 + std::exp(-1.0)) ==
        doctest::Approx(-0.7671).epsilon(1e-3));
  out = remask(1, {0.8, 0, 0});
  CHECK(out.at("transfer_index").values == std::vector<double>{1, 0, 0});
  // k above the masked count takes every masked position and nothing else; k = 0 takes none.
  out = remask(5, {0, 0, 0});
  CHECK(out.at("transfer_index").values == std::vector<double>{1, 0, 1});
  out = remask(0, {0, 0, 0});
  CHECK(out.at("transfer_index").values == std::vector<double>{0, 0, 0});
}

TEST_CASE("llada_remask oracle: every row of the cases unmasks min(k, masked) masked positions") {
  const tasks::Task& task = oracle_test::repository_task("world/llada_remask");
  for (const char* name : {"h_odd_vocab", "h_tied", "h_k_exceeds_masked", "h_rows_without_masks",
                           "h_long_block", "llada_b1_block32"}) {
    const tasks::Case& c = oracle_test::case_named(task, name);
    const Tensors t = oracle_test::run_case(task, c);
    const std::int64_t batch = c.symbols.at("batch");
    const std::int64_t length = c.symbols.at("seq_len");
    const double mask_id = c.scalars.at("mask_id");
    for (std::int64_t b = 0; b < batch; ++b) {
      std::int64_t masked = 0, chosen = 0, chosen_unmasked = 0;
      for (std::int64_t l = 0; l < length; ++l) {
        const bool is_masked = t.at("x").values[b * length + l] == mask_id;
        const bool picked = t.at("transfer_index").values[b * length + l] != 0.0;
        masked += is_masked ? 1 : 0;
        chosen += picked ? 1 : 0;
        chosen_unmasked += picked && !is_masked ? 1 : 0;
        if (!is_masked)
          CHECK(t.at("x0").values[b * length + l] == t.at("x").values[b * length + l]);
      }
      const auto k = static_cast<std::int64_t>(t.at("num_transfer_tokens").values[b]);
      INFO(name << " row " << b);
      CHECK(chosen == std::min(k, masked));
      CHECK(chosen_unmasked == 0);
    }
  }
  // The tied case: every masked row proposes token 1 (the first of each period's two maxima).
  const Tensors tied = oracle_test::run_case(task, oracle_test::case_named(task, "h_tied"));
  for (const double token : tied.at("x0").values) {
    if (token != 576 && token != 3840 && token != 220 && token != 11 && token != 1234 &&
        token != 35 && token != 4791 && token != 13) {
      CHECK(std::fmod(token, 5.0) == 1.0);
    }
  }
}
