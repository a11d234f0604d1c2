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
