// The top-k routing checker: every right answer under ties passes, wrong ones fail naming the row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"
#include "tasks/task.hpp"
#include "tests/judge/checker_test_support.hpp"

using namespace crucible;
using core::DType;
using judge::CompareReport;
using judge::HostTensorView;
using judge::Tolerance;
using testing::all_pass;
using testing::contains;

namespace {

constexpr Tolerance kWeightTol{1e-6, 1e-4};
constexpr Tolerance kExact{0.0, 0.0};

// One routing case: inputs, and outputs as the candidate and the reference wrote them.
struct Routing {
  std::int64_t tokens = 0, experts = 0, k = 0;
  std::vector<float> gating;
  std::vector<float> bias;  // empty: topk_softmax; else grouped_topk
  std::map<std::string, double> scalars;
  std::vector<float> weights;
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> token_expert;  // topk_softmax only
  std::vector<float> reference_weights;
  std::vector<std::int32_t> reference_ids;
  std::vector<std::int32_t> reference_token_expert;

  std::vector<CompareReport> check(bool reveal = true, int variant = 0) const {
    const std::vector<std::int64_t> out_shape{tokens, k};
    const auto out_count = static_cast<std::size_t>(tokens * k);
    std::vector<HostTensorView> inputs{
        {"gating_output", DType::kF32, gating.data(), gating.size(), {tokens, experts}}};
    if (!bias.empty()) {
      inputs.push_back(
          {"e_score_correction_bias", DType::kF32, bias.data(), bias.size(), {experts}});
    }
    const bool grouped = !bias.empty();
    std::vector<HostTensorView> candidate{
        {"topk_weights", DType::kF32, weights.data(), out_count, out_shape},
        {grouped ? "topk_ids" : "topk_indices", DType::kI32, ids.data(), out_count, out_shape}};
    std::vector<HostTensorView> reference{
        {"topk_weights", DType::kF32, reference_weights.data(), out_count, out_shape},
        {grouped ? "topk_ids" : "topk_indices", DType::kI32, reference_ids.data(), out_count,
         out_shape}};
    std::vector<Tolerance> tolerances{kWeightTol, kExact};
    if (!grouped) {
      candidate.push_back(
          {"token_expert_indices", DType::kI32, token_expert.data(), out_count, out_shape});
      reference.push_back({"token_expert_indices", DType::kI32, reference_token_expert.data(),
                           out_count, out_shape});
      tolerances.push_back(kExact);
    }
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = reference;
    request.tolerances = tolerances;
    request.scalars = &scalars;
    request.poison_variant = variant;
    request.reveal_values = reveal;
    return judge::topk_checker().check(request);
  }
};

// topk_softmax's right answer (ties to the lower index) as the candidate and the reference.
Routing softmax_case(std::int64_t tokens, std::int64_t experts, std::int64_t k,
                     std::vector<float> gating) {
  Routing r;
  r.tokens = tokens;
  r.experts = experts;
  r.k = k;
  r.gating = std::move(gating);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<double> p(static_cast<std::size_t>(experts));
    const float* row = r.gating.data() + t * experts;
    const double row_max = *std::max_element(row, row + experts);
    double sum = 0.0;
    for (std::int64_t e = 0; e < experts; ++e) sum += p[e] = std::exp(row[e] - row_max);
    std::vector<std::int32_t> order(static_cast<std::size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    for (std::int64_t j = 0; j < k; ++j) {
      r.weights.push_back(static_cast<float>(p[order[j]] / sum));
      r.ids.push_back(order[j]);
      r.token_expert.push_back(static_cast<std::int32_t>(j * tokens + t));
    }
  }
  r.reference_weights = r.weights;
  r.reference_ids = r.ids;
  r.reference_token_expert = r.token_expert;
  return r;
}

// Three tokens over 8 experts, top-2. Row 0 distinct; row 1 has experts 2 and 5 tied on top;
// row 2 has expert 0 on top and experts 3 and 6 tied for second place.
Routing three_rows() {
  return softmax_case(3, 8, 2, {0.5f, -1.0f, 0.25f, 2.0f,  -0.5f, 1.0f,  0.0f, -2.0f,  //
                                0.1f, 0.2f,  3.0f,  -1.0f, 0.0f,  3.0f,  1.0f, -3.0f,  //
                                2.5f, 0.0f,  -1.0f, 1.5f,  0.5f,  -0.5f, 1.5f, 0.25f});
}

}  // namespace

TEST_CASE("topk checker: outputs identical to the float64 answer pass, with one report each") {
  const auto reports = three_rows().check();
  REQUIRE(reports.size() == 3);
  CHECK(reports[0].output_name == "topk_weights");
  CHECK(reports[1].output_name == "topk_indices");
  CHECK(reports[2].output_name == "token_expert_indices");
  for (const auto& report : reports) {
    CAPTURE(report.summary);
    CHECK(report.pass);
    CHECK(report.mismatches == 0);
    CHECK(report.count == 6);
  }
  CHECK(contains(reports[1].summary, "valid top-2"));
}

TEST_CASE("topk checker: two tied experts in either order pass") {
  Routing r = three_rows();
  REQUIRE(r.ids[2] == 2);
  REQUIRE(r.ids[3] == 5);
  std::swap(r.ids[2], r.ids[3]);
  std::swap(r.weights[2], r.weights[3]);
  const auto reports = r.check();
  CAPTURE(reports[1].summary);
  CHECK(all_pass(reports));
}

TEST_CASE("topk checker: any of the experts tied at the k-th place may be chosen") {
  Routing r = three_rows();
  REQUIRE(r.ids[4] == 0);
  REQUIRE(r.ids[5] == 3);
  r.ids[5] = 6;  // expert 6 ties with expert 3 for the second place; its weight is the same
  const auto reports = r.check();
  CAPTURE(reports[1].summary);
  CHECK(all_pass(reports));
}

TEST_CASE("topk checker: a clearly worse expert fails, naming the row, the experts and scores") {
  Routing r = three_rows();
  REQUIRE(r.ids[1] == 5);
  r.ids[1] = 7;  // the lowest logit of row 0
  const float* row = r.gating.data();
  double sum = 0.0;
  for (int e = 0; e < 8; ++e) sum += std::exp(row[e] - 2.0);
  r.weights[1] = static_cast<float>(std::exp(row[7] - 2.0) / sum);  // a consistent weight
  const auto reports = r.check();
  CAPTURE(reports[1].summary);
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[1].mismatches == 1);
  CHECK(reports[1].first_mismatch == 1);
  CHECK(contains(reports[1].summary, "row 0, slot 1: expert 7 chosen but expert 5"));
  CHECK(contains(reports[1].summary, "higher probability"));
  // Its weight is expert 7's probability, so the weights themselves are right.
  CHECK(reports[0].pass);
}

TEST_CASE("topk checker: a weight off by more than the tolerance fails; within it passes") {
  Routing r = three_rows();
  r.weights[4] *= 1.00005f;  // within rtol 1e-4
  CHECK(all_pass(r.check()));
  r.weights[4] *= 1.001f;
  const auto reports = r.check();
  CAPTURE(reports[0].summary);
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[0].mismatches == 1);
  CHECK(*reports[0].first_mismatch == 4);
  CHECK(contains(reports[0].summary, "row 2, slot 0"));
  CHECK(reports[0].max_rel_error > 5e-4);
  CHECK(reports[1].pass);
}

TEST_CASE("topk checker: weights out of order fail for topk_softmax") {
  Routing r = three_rows();
  std::swap(r.ids[0], r.ids[1]);
  std::swap(r.weights[0], r.weights[1]);
  const auto reports = r.check();
  CAPTURE(reports[0].summary);
  CHECK(reports[1].pass);  // the set is right
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "non-increasing"));
}

TEST_CASE("topk checker: duplicate and out-of-range ids fail") {
  Routing r = three_rows();
  r.ids[1] = r.ids[0];
  r.weights[1] = r.weights[0];
  r.ids[4] = 8;
  const auto reports = r.check();
  CAPTURE(reports[1].summary);
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[1].mismatches == 2);
  CHECK(contains(reports[1].summary, "row 0, slot 1: expert 3 already chosen in slot 0"));
}

TEST_CASE("topk checker: unwritten (poison) elements are counted as unwritten") {
  for (const int variant : {0, 1}) {
    Routing r = three_rows();
    judge::fill_poison(DType::kF32, r.weights.data() + 2, 2, variant);
    judge::fill_poison(DType::kI32, r.ids.data() + 2, 2, variant);
    judge::fill_poison(DType::kI32, r.token_expert.data() + 5, 1, variant);
    const auto reports = r.check(true, variant);
    for (const auto& report : reports) {
      CAPTURE(report.summary);
      CHECK_FALSE(report.pass);
    }
    CHECK(reports[0].unwritten == 2);
    CHECK(reports[1].unwritten == 2);
    CHECK(reports[2].unwritten == 1);
    CHECK(contains(reports[1].summary, "row 1, slot 0: never written"));
    // The other variant's pattern is an ordinary (wrong) value, not "unwritten".
    const auto other = r.check(true, 1 - variant);
    CHECK(other[1].unwritten == 0);
    CHECK_FALSE(other[1].pass);
  }
}

TEST_CASE("topk checker: token_expert_indices must be slot * num_tokens + token") {
  Routing r = three_rows();
  REQUIRE(r.token_expert[2] == 1);  // slot 0 of token 1: 0 * 3 + 1
  r.token_expert[2] = 2;            // the token-major position instead
  CHECK(r.check()[2].pass == false);
  CHECK(contains(r.check()[2].summary, "row 1, slot 0"));
}

TEST_CASE("topk checker: hidden-case reports carry no values, only rows, slots and rules") {
  Routing r = three_rows();
  r.ids[1] = 7;
  r.weights[4] *= 1.01f;
  const auto reports = r.check(/*reveal=*/false);
  for (const auto& report : reports) {
    CAPTURE(report.summary);
    CHECK_FALSE(report.values_revealed);
    CHECK(report.first_got == 0.0);
    CHECK(report.first_expected == 0.0);
    CHECK(report.max_abs_error == 0.0);
    CHECK(report.max_rel_error == 0.0);
  }
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "row 0, slot 1"));
  CHECK(contains(reports[1].summary, "top-k rule"));
  CHECK_FALSE(contains(reports[1].summary, "expert 7"));
  CHECK_FALSE(contains(reports[1].summary, "expert 5"));
  CHECK_FALSE(contains(reports[1].summary, " > "));
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "row 0, slot 1"));  // expert 7 with expert 5's weight
  CHECK_FALSE(contains(reports[0].summary, "weight 0."));
  CHECK_FALSE(reports[1].to_value().contains("first_got"));
}

namespace {

// grouped_topk on 8 experts in 2 groups of 4, keep 1 group, top-2, renormalised, scaled by 2.
// Logits 0 give sigmoid 0.5 everywhere, so the bias alone ranks the experts.
Routing grouped_case(std::vector<float> bias, std::vector<std::int32_t> ids) {
  Routing r;
  r.tokens = 1;
  r.experts = 8;
  r.k = 2;
  r.gating.assign(8, 0.0f);
  r.bias = std::move(bias);
  r.scalars = {{"num_expert_group", 2},
               {"topk_group", 1},
               {"renormalize", 1},
               {"routed_scaling_factor", 2.0}};
  r.ids = std::move(ids);
  r.weights = {1.0f, 1.0f};  // equal scores: each 0.5 / 1.0 * 2
  r.reference_ids = r.ids;
  r.reference_weights = r.weights;
  return r;
}

}  // namespace

TEST_CASE("topk checker, grouped: the right group and experts pass, in any order") {
  // Group 0 (experts 0-3): top-2 sum 0.3 + 0.2; group 1 (4-7): 0.4 + 0.0. Group 0 wins (0.5 >
  // 0.4) although expert 4 is the best expert overall, so the answer is experts 0 and 1.
  const std::vector<float> bias{0.3f, 0.2f, -0.1f, -0.2f, 0.4f, 0.0f, -0.3f, -0.4f};
  CHECK(all_pass(grouped_case(bias, {0, 1}).check()));
  CHECK(all_pass(grouped_case(bias, {1, 0}).check()));
}

TEST_CASE("topk checker, grouped: an expert from a group that is not kept fails (group rule)") {
  const std::vector<float> bias{0.3f, 0.2f, -0.1f, -0.2f, 0.4f, 0.0f, -0.3f, -0.4f};
  const auto two_groups = grouped_case(bias, {4, 0}).check();
  CAPTURE(two_groups[1].summary);
  CHECK_FALSE(two_groups[1].pass);
  CHECK(contains(two_groups[1].summary, "group rule"));
  const auto wrong_group = grouped_case(bias, {4, 5}).check();
  CAPTURE(wrong_group[1].summary);
  CHECK_FALSE(wrong_group[1].pass);
  CHECK(contains(wrong_group[1].summary, "row 0, slot 0: expert 4 lies in group 1"));
  CHECK(contains(wrong_group[1].summary, "group 0 scores higher"));
}

TEST_CASE("topk checker, grouped: tied groups may be kept either way, tied experts chosen freely") {
  // Both groups sum to 0.5; within group 1, experts 5 and 6 tie for the second place.
  const std::vector<float> bias{0.3f, 0.2f, -0.1f, -0.2f, 0.3f, 0.2f, 0.2f, -0.4f};
  CHECK(all_pass(grouped_case(bias, {0, 1}).check()));
  CHECK(all_pass(grouped_case(bias, {4, 5}).check()));
  CHECK(all_pass(grouped_case(bias, {6, 4}).check()));
  const auto skipped = grouped_case(bias, {4, 7}).check();  // 7 is below 5 and 6
  CHECK_FALSE(skipped[1].pass);
  CHECK(contains(skipped[1].summary, "expert 7 chosen but expert 5"));
}

TEST_CASE("topk checker, grouped: weights are renormalised over the chosen experts and scaled") {
  const std::vector<float> bias{0.3f, 0.2f, -0.1f, -0.2f, 0.4f, 0.0f, -0.3f, -0.4f};
  Routing r = grouped_case(bias, {0, 1});
  r.gating = {2.0f, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  // Choice scores 1.18 and 0.47 lead group 0 (sum 1.65 against group 1's 1.4): experts 0, 1.
  const double s0 = 1.0 / (1.0 + std::exp(-2.0));
  const double s1 = 1.0 / (1.0 + std::exp(1.0));
  r.weights = {static_cast<float>(s0 / (s0 + s1) * 2.0), static_cast<float>(s1 / (s0 + s1) * 2.0)};
  r.reference_weights = r.weights;
  CHECK(all_pass(r.check()));
  r.weights[1] = static_cast<float>(s1 * 2.0);  // scaled but not renormalised
  const auto reports = r.check();
  CAPTURE(reports[0].summary);
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "row 0, slot 1"));
  r.scalars["renormalize"] = 0;
  r.weights = {static_cast<float>(s0 * 2.0), static_cast<float>(s1 * 2.0)};
  CHECK(all_pass(r.check()));
}

TEST_CASE("task checkers: every checker a manifest may name has an implementation") {
  for (const auto& name : crucible::tasks::known_checkers()) {
    CAPTURE(name);
    CHECK(crucible::judge::find_task_checker(name) != nullptr);
  }
  CHECK(crucible::judge::find_task_checker("no_such_checker") == nullptr);
}
