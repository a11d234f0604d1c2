// The llm/fp8_scaled_linear oracle on hand-computed products: b's rows are output features, the
// token scale multiplies a row of out and the channel scale a column; the case inputs are e4m3
// values within the format's range; the manifest's library contract and vLLM's alignment hold;
// the tolerance admits the library's fp8 tensor-core accumulation and rejects one mean channel
// scale.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "llm/fp8_scaled_linear";

std::vector<double> scaled_product(std::int64_t tokens, std::int64_t k, std::int64_t n,
                                   std::vector<double> a, std::vector<double> b,
                                   std::vector<double> a_scales, std::vector<double> b_scales) {
  oracle_test::Tensors tensors{
      {"out",
       {core::DType::kBF16,
        {tokens, n},
        std::vector<double>(static_cast<std::size_t>(tokens * n))}},
      {"a", {core::DType::kFP8E4M3, {tokens, k}, std::move(a)}},
      {"b", {core::DType::kFP8E4M3, {n, k}, std::move(b)}},
      {"a_scales", {core::DType::kF32, {tokens, 1}, std::move(a_scales)}},
      {"b_scales", {core::DType::kF32, {n, 1}, std::move(b_scales)}},
  };
  return oracle_test::call_oracle(kTask,
                                  {{"num_tokens", tokens}, {"in_features", k}, {"out_features", n}},
                                  std::move(tensors))
      .at("out")
      .values;
}

// A dot product of e4m3 values as Hopper's fp8 tensor cores add it (public measurements: the
// DeepSeek-V3 report, arXiv:2412.19437 sec. 3.5.2; SageAttention2, arXiv:2411.10958; the model
// and its calibration against the H200: bench/fp8_accumulation_model.py). Each step of 32
// products and the accumulator are aligned to the largest of them and cut toward zero to 13
// bits below its leading bit, summed, and the sum cut to 13 bits after its leading one; every
// `promote` steps the accumulator is added to an fp32 sum and restarts from zero (fast
// accumulation off). Every value here is exact in double.
float tensor_core_dot(const double* x, const double* w, std::int64_t k, int promote) {
  constexpr int kStep = 32, kBits = 13;
  float total = 0.0f;
  double accumulator = 0.0;
  int steps = 0;
  for (std::int64_t first = 0; first < k; first += kStep) {
    const std::int64_t count = std::min<std::int64_t>(kStep, k - first);
    double top = std::fabs(accumulator);
    for (std::int64_t i = 0; i < count; ++i) {
      top = std::max(top, std::fabs(x[first + i] * w[first + i]));
    }
    double sum = 0.0;
    if (top > 0.0) {
      const double unit = std::ldexp(1.0, std::ilogb(top) - kBits);
      sum = std::trunc(accumulator / unit) * unit;
      for (std::int64_t i = 0; i < count; ++i) {
        sum += std::trunc(x[first + i] * w[first + i] / unit) * unit;
      }
      if (sum != 0.0) {
        const double ulp = std::ldexp(1.0, std::ilogb(sum) - kBits);
        sum = std::trunc(sum / ulp) * ulp;
      }
    }
    accumulator = sum;
    if (++steps == promote) {
      total += static_cast<float>(accumulator);
      accumulator = 0.0;
      steps = 0;
    }
  }
  return total + static_cast<float>(accumulator);
}

// The bf16 output of an fp32 sum scaled in fp32, as the library's epilogue computes it.
double scaled_bf16(float sum, double token_scale, double channel_scale) {
  const float scaled = sum * static_cast<float>(token_scale) * static_cast<float>(channel_scale);
  return core::bf16_to_float(core::float_to_bf16(scaled));
}

}  // namespace

TEST_CASE("fp8_scaled_linear oracle: unit scales give a @ b^T with b's rows as output features") {
  // a [[1, 2, 3], [4, 5, 6]]; b rows (1, 0, 0), (0, 1, 1), (1, -1, 0.5), (2, 2, 2).
  const auto out = scaled_product(2, 3, 4, {1, 2, 3, 4, 5, 6},
                                  {1, 0, 0, 0, 1, 1, 1, -1, 0.5, 2, 2, 2}, {1, 1}, {1, 1, 1, 1});
  const std::vector<double> want{1, 5, 0.5, 12, 4, 11, 2, 30};
  CHECK(out == want);
}

TEST_CASE("fp8_scaled_linear oracle: the token scale scales a row, the channel scale a column") {
  // The same product with token scales (0.5, 2) and channel scales (1, 0.25, 4, 0.125): out[t, n]
  // = a_scales[t] * b_scales[n] * (a @ b^T)[t, n].
  const std::vector<double> a_scales{0.5, 2}, b_scales{1, 0.25, 4, 0.125};
  const auto out = scaled_product(2, 3, 4, {1, 2, 3, 4, 5, 6},
                                  {1, 0, 0, 0, 1, 1, 1, -1, 0.5, 2, 2, 2}, a_scales, b_scales);
  const std::vector<double> unscaled{1, 5, 0.5, 12, 4, 11, 2, 30};
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t n = 0; n < 4; ++n) {
      CHECK(out[t * 4 + n] == a_scales[t] * b_scales[n] * unscaled[t * 4 + n]);
    }
  }
  // A scale of vLLM's floor (1 / (448 * 512)) on an extreme product: 448 * 448 * 16.
  const auto floor = scaled_product(1, 16, 1, std::vector<double>(16, 448.0),
                                    std::vector<double>(16, 448.0), {1.0 / 229376}, {1e-4});
  CHECK(floor[0] == doctest::Approx(448.0 * 448.0 * 16 / 229376 * 1e-4).epsilon(1e-15));
}

TEST_CASE("fp8_scaled_linear oracle: a case's inputs are e4m3 values and the output follows them") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, "h_small_16x16"));
  const auto& a = tensors.at("a");
  const auto& b = tensors.at("b");
  const auto& a_scales = tensors.at("a_scales");
  const auto& b_scales = tensors.at("b_scales");
  const auto& out = tensors.at("out");
  REQUIRE(a.size() == 5 * 16);
  REQUIRE(b.size() == 16 * 16);
  for (const double v : a.values) {
    CHECK(std::fabs(v) <= 448.0);
    // Every value is exactly representable in e4m3.
    CHECK(core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(static_cast<float>(v))) == v);
  }
  for (const double s : a_scales.values) CHECK((s >= 0.01 && s < 0.1));
  for (const double s : b_scales.values) CHECK((s >= 1e-4 && s < 3e-4));
  for (std::int64_t t = 0; t < 5; ++t) {
    for (std::int64_t n = 0; n < 16; ++n) {
      double sum = 0.0;
      for (std::int64_t k = 0; k < 16; ++k) {
        sum += a.values[static_cast<std::size_t>(t * 16 + k)] *
               b.values[static_cast<std::size_t>(n * 16 + k)];
      }
      const double want = a_scales.values[static_cast<std::size_t>(t)] *
                          b_scales.values[static_cast<std::size_t>(n)] * sum;
      CHECK(out.values[static_cast<std::size_t>(t * 16 + n)] == want);
    }
  }
}

TEST_CASE(
    "fp8_scaled_linear: the task is computed by cuBLASLt's fp8 GEMM and keeps vLLM's shapes") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  CHECK(task.reference_library == "cublaslt_fp8_rowwise");
  CHECK(task.reference_path == "kernels/llm/fp8_scaled_linear.cu");
  REQUIRE(task.tensors.size() == 5);
  const char* names[] = {"out", "a", "b", "a_scales", "b_scales"};
  for (std::size_t i = 0; i < 5; ++i) CHECK(task.tensors[i].name == names[i]);
  for (const auto& c : task.cases) {
    CAPTURE(c.name);
    // cutlass_scaled_mm asserts b's two dimensions are multiples of 16.
    CHECK(c.symbols.at("in_features") % 16 == 0);
    CHECK(c.symbols.at("out_features") % 16 == 0);
  }
}

TEST_CASE(
    "fp8_scaled_linear: the tolerance admits fp8 tensor-core sums promoted every 128 or 256 of K, "
    "with room, and rejects one mean channel scale") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const tasks::Tolerance tolerance = task.tensors[0].tolerance.value();
  // The longest K of the cases (Llama-3-8B's down projection) at its scales, on 4 tokens x 256
  // channels: the accumulation error grows with K, the output's scale with the two scales.
  tasks::Case c = oracle_test::case_named(task, "decode_32_down");
  const std::int64_t tokens = 4, n = 256, k = c.symbols.at("in_features");
  c.symbols["num_tokens"] = tokens;
  c.symbols["out_features"] = n;
  const auto tensors = oracle_test::run_case(task, c);
  const auto& a = tensors.at("a").values;
  const auto& b = tensors.at("b").values;
  const auto& a_scales = tensors.at("a_scales").values;
  const auto& b_scales = tensors.at("b_scales").values;
  const auto& want = tensors.at("out").values;
  double mean_scale = 0.0;
  for (const double s : b_scales) mean_scale += s;
  mean_scale /= static_cast<double>(n);

  double worst_need = 0.0;  // the largest error less rtol * |oracle|: the atol the sums need
  std::size_t hack_failures = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < n; ++j) {
      const double* x = a.data() + t * k;
      const double* w = b.data() + j * k;
      const auto at = static_cast<std::size_t>(t * n + j);
      const double ts = a_scales[static_cast<std::size_t>(t)];
      const double cs = b_scales[static_cast<std::size_t>(j)];
      for (const int promote : {4, 8}) {
        const double got = scaled_bf16(tensor_core_dot(x, w, k, promote), ts, cs);
        worst_need =
            std::max(worst_need, std::fabs(got - want[at]) - tolerance.rtol * std::fabs(want[at]));
      }
      // The hack of examples/hacks/fp8_linear_mean_channel_scale.cu: exact sums, the mean scale.
      double exact = 0.0;
      for (std::int64_t i = 0; i < k; ++i) exact += x[i] * w[i];
      if (!oracle_test::within(scaled_bf16(static_cast<float>(exact), ts, mean_scale), want[at],
                               tolerance)) {
        ++hack_failures;
      }
    }
  }
  MESSAGE("atol needed by the modelled library sums: " << worst_need << " (task atol "
                                                       << tolerance.atol << ")");
  // The sums miss fp32 by more than the first tolerance (atol 3e-3) allowed, as on the H200...
  CHECK(worst_need > 1e-3);
  // ...and stay within half of this one.
  CHECK(worst_need <= tolerance.atol / 2);
  CHECK(hack_failures > static_cast<std::size_t>(tokens * n) / 2);
}

TEST_CASE("fp8_scaled_linear oracle: each captured case reads one recorded stories260K GEMM") {
  // The model's activations quantized per token and its weights per channel (tasks/capture):
  // recorded shapes, recorded bytes.
  oracle_test::check_captured_cases(oracle_test::repository_task(kTask), "fp8_scaled_linear", {},
                                    true);
}

TEST_CASE("fp8_scaled_linear oracle: on every captured case, matches the recorded out") {
  // The capture tool sums the products in float64 and applies the scales in float32 (written
  // apart from this oracle): within the task's tolerance on every element.
  const std::size_t compared =
      oracle_test::compare_captured_cases(oracle_test::repository_task(kTask));
  CHECK(compared == 27 * 128 + 4 * 64);
}
