// The llm/fused_add_rms_norm_static_fp8_quant oracle on hand-computed rows, on its own task's
// values and on the recorded stories260K calls.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

constexpr const char* kTaskId = "llm/fused_add_rms_norm_static_fp8_quant";
using oracle_test::Tensors;

Tensors run_row(std::vector<double> input, std::vector<double> residual, std::vector<double> weight,
                double scale, double epsilon) {
  const auto hidden = static_cast<std::int64_t>(weight.size());
  return oracle_test::call_oracle(
      kTaskId, {{"num_tokens", 1}, {"hidden_size", hidden}},
      Tensors{
          {"result", {core::DType::kFP8E4M3, {1, hidden}, std::vector<double>(hidden, 0.0)}},
          {"input", {core::DType::kBF16, {1, hidden}, std::move(input)}},
          {"residual", {core::DType::kBF16, {1, hidden}, std::move(residual)}},
          {"weight", {core::DType::kBF16, {hidden}, std::move(weight)}},
          {"scale", {core::DType::kF32, {1}, {scale}}},
      },
      {{"epsilon", epsilon}});
}

}  // namespace

TEST_CASE("fused_add_rms_norm_static_fp8_quant oracle: adds, normalises, scales and rounds") {
  // input (1, 2) + residual (2, 2) = (3, 4); rms = sqrt(12.5) with epsilon 0. y = (3, 8) / rms
  // = (0.8485, 2.2627); divided by 1/64: (54.31, 144.8) -> (56, 144) (steps 4 in [32, 64), 16
  // in [128, 256)); input is left unchanged.
  auto t = run_row({1.0, 2.0}, {2.0, 2.0}, {1.0, 2.0}, 1.0 / 64, 0.0);
  CHECK(t["residual"].values == std::vector<double>{3.0, 4.0});
  CHECK(t["input"].values == std::vector<double>{1.0, 2.0});
  CHECK(t["result"].values == std::vector<double>{56.0, 144.0});
}

TEST_CASE("fused_add_rms_norm_static_fp8_quant oracle: the norm is over the bf16-rounded sums") {
  // input (1, 3) + residual (2^-8, 1) stores (1, 4) (1 + 2^-8 is a tie, to even 1), rms with
  // epsilon 0.5 is sqrt((1 + 16) / 2 + 0.5) = 3; weights (2, 0.5): y = (2/3, 2/3); scale 1/96:
  // 64 exactly, a value e4m3 holds.
  auto t = run_row({1.0, 3.0}, {0x1p-8, 1.0}, {2.0, 0.5}, 1.0 / 96, 0.5);
  CHECK(t["residual"].values == std::vector<double>{1.0, 4.0});
  CHECK(t["result"].values == std::vector<double>{64.0, 64.0});
}

TEST_CASE("fused_add_rms_norm_static_fp8_quant oracle: saturates at +-448") {
  // rms of (1, -1) is 1: y = (1, -1) / 2^-10 = +-1024, clamped to +-448.
  auto t = run_row({1.0, -1.0}, {0.0, 0.0}, {1.0, 1.0}, 0x1p-10, 0.0);
  CHECK(t["result"].values == std::vector<double>{448.0, -448.0});
}

TEST_CASE(
    "fused_add_rms_norm_static_fp8_quant oracle: on generated and captured cases the sums are "
    "bf16 values and every output is an e4m3 value within half a step of the exact quotient") {
  const tasks::Task& task = oracle_test::repository_task(kTaskId);
  for (const char* name : {"h_tokens_7", "h_width_1001", "h_saturating_scale", "h_captured_prefill",
                           "h_captured_decode"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const Tensors tensors = oracle_test::run_case(task, c);
    const auto& r = tensors.at("residual").values;
    const auto& w = tensors.at("weight").values;
    const auto& y = tensors.at("result").values;
    const double s = tensors.at("scale").values.at(0);
    const double epsilon = c.scalars.at("epsilon");
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const std::int64_t hidden = c.symbols.at("hidden_size");
    std::size_t unrounded = 0, not_e4m3 = 0, too_far = 0, nonzero = 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      double mean_square = 0.0;
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double v = r[t * hidden + i];
        unrounded += tasks::round_to_dtype(core::DType::kBF16, v) == v ? 0 : 1;
        mean_square += v * v / static_cast<double>(hidden);
      }
      const double inv_rms = 1.0 / std::sqrt(mean_square + epsilon);
      for (std::int64_t i = 0; i < hidden; ++i) {
        const double q = y[t * hidden + i];
        not_e4m3 += tasks::round_to_dtype(core::DType::kFP8E4M3, q) == q ? 0 : 1;
        const double exact =
            std::fmax(-448.0, std::fmin(448.0, r[t * hidden + i] * inv_rms * w[i] / s));
        const double bound = std::fmax(std::abs(exact) * 0x1p-4, 0x1p-10) * (1.0 + 1e-5);
        too_far += std::abs(q - exact) <= bound ? 0 : 1;
        nonzero += q != 0.0 ? 1 : 0;
      }
    }
    CHECK(unrounded == 0);
    CHECK(not_e4m3 == 0);
    CHECK(too_far == 0);
    CHECK(nonzero > static_cast<std::size_t>(tokens * hidden) / 2);
  }
}
