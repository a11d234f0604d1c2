// The sampling checker: a token passes when it is in the row's top-k set and top-p nucleus and
// its interval of the filtered CDF holds the draw (within 1e-4); anything else fails, naming the
// row and the reason.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"
#include "tests/judge/checker_test_support.hpp"

using namespace crucible;
using core::DType;
using judge::CompareReport;
using judge::HostTensorView;
using judge::Tolerance;
using testing::contains;

namespace {

// A batch of rows over one vocabulary; every row's k, p and draw.
struct Batch {
  std::size_t vocab = 4;
  std::vector<float> logits;
  std::vector<float> uniform;
  std::vector<std::int32_t> top_k;
  std::vector<float> top_p;
  std::vector<std::int32_t> samples;

  CompareReport check(bool reveal = true, int variant = 0) const {
    const std::size_t batch = samples.size();
    const std::vector<HostTensorView> inputs{
        {"logits",
         DType::kF32,
         logits.data(),
         logits.size(),
         {static_cast<std::int64_t>(batch), static_cast<std::int64_t>(vocab)}},
        {"uniform_samples", DType::kF32, uniform.data(), batch, {static_cast<std::int64_t>(batch)}},
        {"top_k", DType::kI32, top_k.data(), batch, {static_cast<std::int64_t>(batch)}},
        {"top_p", DType::kF32, top_p.data(), batch, {static_cast<std::int64_t>(batch)}},
        {"samples", DType::kI32, samples.data(), batch, {static_cast<std::int64_t>(batch)}}};
    const std::vector<HostTensorView> candidate{
        {"samples", DType::kI32, samples.data(), batch, {static_cast<std::int64_t>(batch)}}};
    const std::vector<Tolerance> tolerances{Tolerance{0.0, 0.0}};
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = candidate;
    request.tolerances = tolerances;
    request.poison_variant = variant;
    request.reveal_values = reveal;
    const auto reports = judge::sampling_checker().check(request);
    REQUIRE(reports.size() == 1);
    return reports[0];
  }
};

// One row with weights proportional to 1, 2, 3, 4: its CDF in vocabulary order is 0.1, 0.3,
// 0.6, 1.
Batch ramp(std::int32_t k, float p, float u, std::int32_t token) {
  Batch b;
  b.logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  b.top_k = {k};
  b.top_p = {p};
  b.uniform = {u};
  b.samples = {token};
  return b;
}

}  // namespace

TEST_CASE("sampling checker: without filters, exactly the token whose interval holds the draw") {
  // u = 0.35 lies in token 2's interval [0.3, 0.6).
  CHECK(ramp(0, 1.0f, 0.35f, 2).check().pass);
  for (const std::int32_t wrong : {0, 1, 3}) {
    CAPTURE(wrong);
    const auto report = ramp(0, 1.0f, 0.35f, wrong).check();
    CHECK_FALSE(report.pass);
    CHECK(contains(report.summary, "interval does not hold the row's draw"));
  }
  // k >= vocab and k < 0 disable top-k too.
  CHECK(ramp(4, 1.0f, 0.35f, 2).check().pass);
  CHECK(ramp(-1, 1.0f, 0.35f, 2).check().pass);
}

TEST_CASE("sampling checker: a draw on an interval boundary accepts either neighbour") {
  // 0.3 is where token 1's interval ends and token 2's begins.
  CHECK(ramp(0, 1.0f, 0.3f, 1).check().pass);
  CHECK(ramp(0, 1.0f, 0.3f, 2).check().pass);
  // u = 1 (the top of the range) takes the last token.
  CHECK(ramp(0, 1.0f, 1.0f, 3).check().pass);
  CHECK(ramp(0, 1.0f, 0.0f, 0).check().pass);
}

TEST_CASE("sampling checker: top-k renormalises over the k largest and rejects the others") {
  // k = 2 keeps tokens 2 and 3 (weights 3 and 4): CDF 3/7, 1. u = 0.35 -> token 2; u = 0.5 ->
  // token 3.
  CHECK(ramp(2, 1.0f, 0.35f, 2).check().pass);
  CHECK(ramp(2, 1.0f, 0.5f, 3).check().pass);
  CHECK_FALSE(ramp(2, 1.0f, 0.5f, 2).check().pass);
  const auto report = ramp(2, 1.0f, 0.05f, 0).check();
  CHECK_FALSE(report.pass);
  CHECK(contains(report.summary, "row 0"));
  CHECK(contains(report.summary, "outside the row's top-k set"));
  // k = 1 is greedy.
  CHECK(ramp(1, 1.0f, 0.99f, 3).check().pass);
  CHECK_FALSE(ramp(1, 1.0f, 0.01f, 0).check().pass);
}

TEST_CASE("sampling checker: top-p keeps the most likely tokens until p of the mass is reached") {
  // p = 0.5 of 10: token 3 (above it 0 < 5), token 2 (above 4 < 5), not token 1 (above 7).
  // N = {2, 3}: CDF 3/7, 1; u = 0.9 -> token 3.
  CHECK(ramp(0, 0.5f, 0.9f, 3).check().pass);
  const auto outside = ramp(0, 0.5f, 0.05f, 0).check();
  CHECK_FALSE(outside.pass);
  CHECK(contains(outside.summary, "outside the row's top-p nucleus"));
  // The draw is taken over the nucleus, not the whole vocabulary: u = 0.35 is token 2 in N
  // (0.35 < 3/7), where the unfiltered CDF would give token 2 as well, but u = 0.5 is token 3 in
  // N and token 2 unfiltered.
  CHECK(ramp(0, 0.5f, 0.5f, 3).check().pass);
  CHECK_FALSE(ramp(0, 0.5f, 0.5f, 2).check().pass);
  // Top-k first, then top-p on the renormalised top-k: k = 2 (mass 7), p = 0.5: token 3 (above
  // 0 < 3.5), not token 2 (above 4): N = {3}.
  CHECK(ramp(2, 0.5f, 0.1f, 3).check().pass);
  CHECK_FALSE(ramp(2, 0.5f, 0.1f, 2).check().pass);
}

TEST_CASE("sampling checker: a nucleus boundary within 1e-4 of p may fall either way") {
  // Weights 0.5, 0.5, 1 (Z = 2). p = 0.5: the top token alone (above the next level: 1, not
  // below 1). With p + 1e-4 the next level joins: CDF 0.25, 0.5, 1, where u = 0.1 is token 0.
  Batch b;
  b.vocab = 3;
  b.logits = {0.0f, 0.0f, std::log(2.0f)};
  b.top_k = {0};
  b.top_p = {0.5f};
  b.uniform = {0.1f};
  b.samples = {2};
  CHECK(b.check().pass);
  b.samples = {0};
  CHECK(b.check().pass);
  // At p = 0.49 no threshold within 1e-4 admits the tie level.
  b.top_p = {0.49f};
  CHECK_FALSE(b.check().pass);
}

namespace {

// A flat row with its top-p boundary inside fp32 error of p, laid out in vocabulary order as
//   e_0 .. e_11 : 12 levels just below b, weights 1.9e-5 (each its own logit)
//   b           : the boundary token, weight 2e-5 (token 12)
//   T           : the top token, weight 1 (token 13)
//   the rest    : 55,540 tied tokens of weight 1.8e-5 below every e level
// Z_K is about 2 and p is the largest float at or below 1 / Z_K, so the mass above b (T's 1)
// is p * Z_K within one float ulp of p (7e-8 relative): the exact nucleus of p is {T}, and a
// kernel whose fp32 sums are 1e-7 off keeps b as well, N' = {T, b}. The levels of e within
// 1e-4 of p (about 9e-5 of the mass after b, in front of b in vocabulary order) join only in
// N(p + 1e-4).
Batch flat_boundary_row() {
  Batch b;
  constexpr int kLevels = 12;
  constexpr int kRest = 55540;
  for (int i = 0; i < kLevels; ++i) {
    b.logits.push_back(std::log(1.9e-5f) - 1e-3f * static_cast<float>(i));
  }
  b.logits.push_back(std::log(2e-5f));
  b.logits.push_back(0.0f);
  b.logits.insert(b.logits.end(), kRest, std::log(1.8e-5f));
  b.vocab = b.logits.size();
  double z_k = 0.0;
  for (const float l : b.logits) z_k += std::exp(static_cast<double>(l));
  float p = static_cast<float>(1.0 / z_k);
  if (static_cast<double>(p) > 1.0 / z_k) p = std::nextafter(p, 0.0f);
  b.top_k = {0};
  b.top_p = {p};
  b.samples = {12};
  // The middle of b's interval in N' = {T, b} (b comes first): u * Z_N' = w_b / 2.
  const double w_b = std::exp(static_cast<double>(b.logits[12]));
  b.uniform = {static_cast<float>(0.5 * w_b / (1.0 + w_b))};
  return b;
}

}  // namespace

TEST_CASE(
    "sampling checker: a nucleus between those of p - 1e-4 and p + 1e-4 is judged with its own "
    "mass") {
  Batch b = flat_boundary_row();
  REQUIRE(b.vocab == 55554u);
  // Token b is what the inverse CDF of N' = {T, b} gives. N(p) = {T} does not hold b, and
  // N(p + 1e-4) adds about 1.8e-4 of mass in front of b (the e levels), which moves b's
  // interval 0.8e-4 of Z_N past the draw: only N' itself, a nucleus between the two, explains
  // the token, and it must be accepted (this row is what h_flat_large_nucleus-like rows, 10^5
  // tokens of about 10^-5 of the mass each, give a kernel whose sums are off by 1e-7).
  CHECK(b.check().pass);
  // Still strict: a token of the tail below every nucleus within 1e-4 of p fails as outside the
  // nucleus, and b fails for a draw in the middle of the row.
  b.samples = {20000};
  auto report = b.check();
  CHECK_FALSE(report.pass);
  CHECK(contains(report.summary, "outside the row's top-p nucleus"));
  b.samples = {12};
  b.uniform = {0.5f};
  report = b.check();
  CHECK_FALSE(report.pass);
  CHECK(contains(report.summary, "interval does not hold the row's draw"));
  // T is the right token for u = 0.5 (its interval in N' is [2e-5, 1 + 2e-5] of 1 + 2e-5).
  b.samples = {13};
  CHECK(b.check().pass);
  // The e levels are in N(p + 1e-4) only: e_0 is the answer only for draws at the very start of
  // the row, within 1e-4 of Z_N of its interval.
  b.samples = {0};
  CHECK_FALSE(b.check().pass);
}

TEST_CASE("sampling checker: ties at the k-th logit are all kept") {
  // Logits 1, 1, 1, 0 with k = 2: the three tied tokens are all in K; u = 0.9 is token 2.
  Batch b;
  b.logits = {1.0f, 1.0f, 1.0f, 0.0f};
  b.top_k = {2};
  b.top_p = {1.0f};
  b.uniform = {0.9f};
  b.samples = {2};
  CHECK(b.check().pass);
  b.samples = {3};
  CHECK_FALSE(b.check().pass);
}

TEST_CASE(
    "sampling checker: the all-tied rows of h_uniform_logits accept the inverse-CDF token of each "
    "draw and reject tokens two away") {
  // llm/top_k_top_p_sampling_from_logits' hidden case h_uniform_logits, first run: every logit
  // 0 over 5000 tokens, k = 10^6, 10, 4999, 1 and p = 1, 1, 0.95, 0.9 (all 5000 tied tokens
  // are in K and in every nucleus), and the draws its fixed seed 9806 gives for draw 0
  // (tensor_seed(9806, "uniform_samples", 0)). The reference kernel's fp32 arithmetic, emulated
  // on the host, draws floor(u * 5000) on every row: 1423, 299, 1258, 2974.
  Batch b;
  b.vocab = 5000;
  b.logits.assign(4 * b.vocab, 0.0f);
  b.top_k = {1000000, 10, 4999, 1};
  b.top_p = {1.0f, 1.0f, 0.95f, 0.9f};
  b.uniform = {0x1.23981ep-2f, 0x1.e9e9a0p-5f, 0x1.01cde6p-2f, 0x1.309b9ep-1f};
  b.samples = {1423, 299, 1258, 2974};
  CHECK(b.check().pass);
  // A neighbour is accepted when the draw is within 1e-4 of the mass (half a token here) of its
  // interval (u * 5000 = 1423.80, 299.02, 1258.81, 2974.69); two away never is.
  b.samples = {1424, 298, 1259, 2975};
  CHECK(b.check().pass);
  b.samples = {1423, 299, 1258, 2973};
  CHECK_FALSE(b.check().pass);
  for (std::size_t row = 0; row < 4; ++row) {
    CAPTURE(row);
    for (const std::int32_t shift : {-2, 2}) {
      Batch moved = b;
      moved.samples = {1423, 299, 1258, 2974};
      moved.samples[row] += shift;
      const auto report = moved.check();
      CHECK_FALSE(report.pass);
      CHECK(report.mismatches == 1);
      CHECK(report.first_mismatch == row);
    }
  }
}

TEST_CASE("sampling checker: counts failing rows, and flags unwritten and out-of-range tokens") {
  Batch b;
  b.logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f),
              std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f),
              std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  b.top_k = {0, 0, 0};
  b.top_p = {1.0f, 1.0f, 1.0f};
  b.uniform = {0.35f, 0.35f, 0.35f};
  b.samples = {2, 4, -1};
  auto report = b.check();
  CHECK_FALSE(report.pass);
  CHECK(report.mismatches == 2);
  CHECK(report.first_mismatch == 1u);
  CHECK(contains(report.summary, "not a vocabulary index"));
  std::int32_t poison = 0;
  judge::fill_poison(DType::kI32, &poison, 1, 0);
  b.samples = {2, 2, poison};
  report = b.check(false, 0);
  CHECK_FALSE(report.pass);
  CHECK(report.unwritten == 1);
  CHECK(contains(report.summary, "never written"));
  // Without revealed values the summary names no token.
  b.samples = {2, 3, 2};
  report = b.check(false, 0);
  CHECK_FALSE(report.pass);
  CHECK_FALSE(contains(report.summary, "token 3"));
}
