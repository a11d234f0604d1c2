// The llm/fused_add_rms_norm oracle on hand-computed rows, on its own task's values, and against
// the stories260K calls recorded by tasks/capture.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::norm_case_reading;
using oracle_test::Tensors;

// Runs the oracle on one row of `hidden` channels with the given values and epsilon.
Tensors run_row(std::vector<double> input, std::vector<double> residual, std::vector<double> weight,
                double epsilon) {
  const auto hidden = static_cast<std::int64_t>(weight.size());
  return oracle_test::call_oracle(
      "llm/fused_add_rms_norm", {{"num_tokens", 1}, {"hidden_size", hidden}},
      Tensors{
          {"input", {core::DType::kBF16, {1, hidden}, std::move(input)}},
          {"residual", {core::DType::kBF16, {1, hidden}, std::move(residual)}},
          {"weight", {core::DType::kBF16, {hidden}, std::move(weight)}},
      },
      {{"epsilon", epsilon}});
}

const tasks::Task& fused_task() { return oracle_test::repository_task("llm/fused_add_rms_norm"); }

// Both updated tensors are compared with their recorded values after the call, within the
// task's tolerance; the stored sums must also be the recorded bf16 values exactly (both round
// the exact sum to nearest even).
const std::set<std::string> kExactSums{"residual"};

}  // namespace

TEST_CASE("fused_add_rms_norm oracle: adds, stores the sum and normalises it") {
  // input (1, 2) + residual (2, 2) = (3, 4); rms = sqrt((9 + 16) / 2) = sqrt(12.5).
  auto t = run_row({1.0, 2.0}, {2.0, 2.0}, {1.0, 2.0}, 0.0);
  CHECK(t["residual"].values[0] == 3.0);
  CHECK(t["residual"].values[1] == 4.0);
  CHECK(t["input"].values[0] == doctest::Approx(3.0 / std::sqrt(12.5)).epsilon(1e-15));
  CHECK(t["input"].values[1] == doctest::Approx(8.0 / std::sqrt(12.5)).epsilon(1e-15));
}

TEST_CASE("fused_add_rms_norm oracle: the sum is rounded to bf16, ties to even") {
  // Near 1 a bf16 ulp is 2^-7. 1 + 2^-8 is a tie between 1 (even) and 1 + 2^-7: rounds to 1.
  // 1 + 3 * 2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6: rounds to 1 + 2^-6.
  // 2 + 2^-8 is below half an ulp at 2 (2^-7): rounds to 2.
  auto t = run_row({1.0, 1.0, 2.0}, {0x1p-8, 3 * 0x1p-8, 0x1p-8}, {1.0, 1.0, 1.0}, 0.0);
  CHECK(t["residual"].values[0] == 1.0);
  CHECK(t["residual"].values[1] == 1.0 + 0x1p-6);
  CHECK(t["residual"].values[2] == 2.0);
}

TEST_CASE("fused_add_rms_norm oracle: the norm is taken over the rounded sums") {
  // input (1, 3) + residual (2^-8, 1) stores (1, 4), so rms = sqrt((1 + 16) / 2) = sqrt(8.5)
  // with epsilon 0.5 added: sqrt(9). Unrounded, the first sum would give a different rms.
  auto t = run_row({1.0, 3.0}, {0x1p-8, 1.0}, {2.0, 0.5}, 0.5);
  CHECK(t["residual"].values[0] == 1.0);
  CHECK(t["residual"].values[1] == 4.0);
  CHECK(t["input"].values[0] == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(t["input"].values[1] == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
}

TEST_CASE(
    "fused_add_rms_norm oracle: on a generated case every stored sum is a bf16 value and "
    "every row of input / weight has unit mean square") {
  const tasks::Task& task = fused_task();
  const tasks::Case* chosen = &oracle_test::case_named(task, "h_tokens_7");
  const Tensors tensors = oracle_test::run_case(task, *chosen);
  const auto& residual = tensors.at("residual");
  const auto& input = tensors.at("input");
  const auto& weight = tensors.at("weight");
  const std::int64_t hidden = chosen->symbols.at("hidden_size");
  const double epsilon = chosen->scalars.at("epsilon");
  std::size_t unrounded = 0;
  for (const double v : residual.values) {
    unrounded += tasks::round_to_dtype(core::DType::kBF16, v) == v ? 0 : 1;
  }
  CHECK(unrounded == 0);
  for (std::int64_t t = 0; t < chosen->symbols.at("num_tokens"); ++t) {
    double mean_square = 0.0;
    double residual_mean_square = 0.0;
    for (std::int64_t i = 0; i < hidden; ++i) {
      const double normalised = input.values[t * hidden + i] / weight.values[i];
      mean_square += normalised * normalised / static_cast<double>(hidden);
      const double r = residual.values[t * hidden + i];
      residual_mean_square += r * r / static_cast<double>(hidden);
    }
    CAPTURE(t);
    // mean((r / rms)^2) = ms / (ms + epsilon), with ms the mean square of the stored row.
    CHECK(mean_square ==
          doctest::Approx(residual_mean_square / (residual_mean_square + epsilon)).epsilon(1e-12));
    // Residual std 4 plus input std 1: the stored row has a mean square near 17.
    CHECK(residual_mean_square > 12.0);
    CHECK(residual_mean_square < 23.0);
  }
}

TEST_CASE(
    "fused_add_rms_norm: each captured case reads one recorded stories260K call, prefill and "
    "decode") {
  // The hidden captured cases name the recording in the manifest (generator "captured"): their
  // symbols must give the recorded shapes, their epsilon the recorded one, and the values the
  // runner builds must be the recorded bytes (input and residual before the call), in both
  // correctness runs.
  oracle_test::check_captured_cases(fused_task(), "fused_add_rms_norm", {"epsilon"}, true);
}

TEST_CASE(
    "fused_add_rms_norm oracle: on every captured case, matches the recorded input and residual "
    "within tolerance") {
  const std::size_t compared = oracle_test::compare_captured_cases(fused_task(), kExactSums);
  CHECK(compared >= 2 * (27 + 4) * 64);
}

TEST_CASE(
    "fused_add_rms_norm oracle: reproduces every recorded stories260K call within tolerance") {
  // Every norm point but layer 0's attention norm: 10 calls per step, the residual stream
  // growing from 0.25 to 2 with depth, and sums that cancel to exactly zero.
  const tasks::Task& task = fused_task();
  std::size_t compared = 0;
  const std::size_t calls =
      oracle_test::for_each_recorded_call("fused_add_rms_norm", [&](const auto& call) {
        compared += oracle_test::compare_with_recording(task, norm_case_reading(task, call), call,
                                                        kExactSums);
      });
  CHECK(calls == 30);
  CHECK(compared == 2 * (27 + 4 + 4) * 10 * 64);
}
