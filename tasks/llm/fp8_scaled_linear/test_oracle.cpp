// The llm/fp8_scaled_linear oracle on hand-computed products: b's rows are output features, the
// token scale multiplies a row of out and the channel scale a column; the case inputs are e4m3
// values within the format's range; the manifest's library contract and vLLM's alignment hold.
#include <doctest/doctest.h>

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
