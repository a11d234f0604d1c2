// The llm/per_token_group_quant_fp8 oracle on hand-computed groups, both scale layouts, the eps
// floor, and its own task's values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

constexpr const char* kTaskId = "llm/per_token_group_quant_fp8";
constexpr std::int64_t kGroup = 128;

struct Quantized {
  std::vector<double> out;
  std::vector<double> scale;
};

Quantized quantize(std::int64_t tokens, std::int64_t groups, std::vector<double> input,
                   bool column_major, double eps = 1e-10) {
  const std::int64_t n = tokens * groups * kGroup;
  REQUIRE(static_cast<std::int64_t>(input.size()) == n);
  auto tensors = oracle_test::call_oracle(
      kTaskId, {{"num_tokens", tokens}, {"num_groups", groups}},
      oracle_test::Tensors{
          {"input", {core::DType::kBF16, {tokens, groups, kGroup}, std::move(input)}},
          {"out", {core::DType::kFP8E4M3, {tokens, groups, kGroup}, std::vector<double>(n, 0.0)}},
          {"scale", {core::DType::kF32, {tokens, groups}, std::vector<double>(tokens * groups)}},
      },
      {{"eps", eps}, {"column_major_scales", column_major ? 1.0 : 0.0}});
  return {tensors["out"].values, tensors["scale"].values};
}

}  // namespace

TEST_CASE("per_token_group_quant_fp8 oracle: a group maps its amax to 448 and rounds to even") {
  // amax 7: s = 7 / 448 = 1/64 exactly. x / s = 64 x. 13.5 / 64 -> 13.5, a tie between 13 and
  // 14 (step 1 in [8, 16)): 14 (even mantissa); 12.5 / 64 -> 12 (even). 0.1875 -> 12.
  std::vector<double> x(kGroup, 0.0);
  x[0] = 7.0;
  x[1] = -3.5;
  x[2] = 13.5 / 64;
  x[3] = 12.5 / 64;
  x[4] = 0.1875;
  const auto q = quantize(1, 1, x, true);
  CHECK(q.scale[0] == 0.015625);
  CHECK(q.out[0] == 448.0);
  CHECK(q.out[1] == -224.0);
  CHECK(q.out[2] == 14.0);
  CHECK(q.out[3] == 12.0);
  CHECK(q.out[4] == 12.0);
  CHECK(q.out[5] == 0.0);
}

TEST_CASE("per_token_group_quant_fp8 oracle: every group has its own scale, in either layout") {
  // 2 tokens x 3 groups; group (t, g) holds the single nonzero value 2^(t * 3 + g).
  const std::int64_t tokens = 2, groups = 3;
  std::vector<double> x(tokens * groups * kGroup, 0.0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t g = 0; g < groups; ++g) {
      x[(t * groups + g) * kGroup + 5] = std::ldexp(1.0, static_cast<int>(t * groups + g));
    }
  }
  const auto row = quantize(tokens, groups, x, false);
  const auto col = quantize(tokens, groups, x, true);
  CHECK(row.out == col.out);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t g = 0; g < groups; ++g) {
      CAPTURE(t);
      CAPTURE(g);
      const double want =
          static_cast<float>(std::ldexp(1.0, static_cast<int>(t * groups + g)) / 448.0);
      CHECK(row.scale[t * groups + g] == want);
      CHECK(col.scale[g * tokens + t] == want);
      CHECK(row.out[(t * groups + g) * kGroup + 5] == 448.0);
    }
  }
}

TEST_CASE("per_token_group_quant_fp8 oracle: eps bounds the amax; zero groups quantize to zero") {
  // Group 0: amax 2^-40 < eps 1e-10: s = fp32(fp32(1e-10) / 448) and 2^-40 / s = 2^-40 * 448 /
  // 1e-10 = 4.07 -> 4 (step 0.5 in [4, 8)). Group 1: zeros.
  std::vector<double> x(2 * kGroup, 0.0);
  x[0] = 0x1p-40;
  const auto q = quantize(1, 2, x, false);
  const double floor_scale = static_cast<float>(static_cast<double>(1e-10f) / 448.0);
  CHECK(q.scale[0] == floor_scale);
  CHECK(q.scale[1] == floor_scale);
  CHECK(q.out[0] == 4.0);
  for (std::int64_t j = kGroup; j < 2 * kGroup; ++j) CHECK(q.out[j] == 0.0);
}

TEST_CASE(
    "per_token_group_quant_fp8 oracle: on generated cases every output is an e4m3 value within "
    "half a step of x / s and every group reaches 448") {
  const tasks::Task& task = oracle_test::repository_task(kTaskId);
  for (const char* name : {"h_tokens_7", "h_groups_3_row_major", "h_large_values"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const oracle_test::Tensors tensors = oracle_test::run_case(task, c);
    const auto& x = tensors.at("input").values;
    const auto& out = tensors.at("out").values;
    const auto& scale = tensors.at("scale").values;
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const std::int64_t groups = c.symbols.at("num_groups");
    const bool column_major = c.scalars.at("column_major_scales") != 0.0;
    std::size_t not_e4m3 = 0, too_far = 0, groups_without_448 = 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t base = (t * groups + g) * kGroup;
        const double s = scale[column_major ? g * tokens + t : t * groups + g];
        double amax = 0.0, qmax = 0.0;
        for (std::int64_t j = 0; j < kGroup; ++j) amax = std::max(amax, std::abs(x[base + j]));
        CHECK(s == static_cast<float>(amax / 448.0));
        for (std::int64_t j = 0; j < kGroup; ++j) {
          const double q = out[base + j];
          qmax = std::max(qmax, std::abs(q));
          not_e4m3 += tasks::round_to_dtype(core::DType::kFP8E4M3, q) == q ? 0 : 1;
          const double exact = x[base + j] / s;
          const double bound = std::max(std::abs(exact) * 0x1p-4, 0x1p-10) * (1.0 + 1e-6);
          too_far += std::abs(q - exact) <= bound ? 0 : 1;
        }
        groups_without_448 += qmax == 448.0 ? 0 : 1;
      }
    }
    CHECK(not_e4m3 == 0);
    CHECK(too_far == 0);
    CHECK(groups_without_448 == 0);
  }
}
