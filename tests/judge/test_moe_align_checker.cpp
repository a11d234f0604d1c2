// The MoE alignment checker: any order inside an expert's segment passes; a misplaced, repeated,
// missing or unwritten index, a wrong tail, block expert or total fails, naming the position.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
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

constexpr Tolerance kExact{0.0, 0.0};

// Flat ids 0..5 of three tokens, top-2, over 4 experts: 2, 0 | 2, 3 | 2, 0; blocks of 4.
// Layout: e0 [0, 4) = {1, 5} + 2 pads, e1 empty, e2 [4, 8) = {0, 2, 4} + 1 pad, e3 [8, 12) = {3}
// + 3 pads; total 12; 18 positions (6 + 4 * 3), 5 blocks. Padding value numel = 6.
struct Alignment {
  std::vector<std::int32_t> ids{2, 0, 2, 3, 2, 0};
  std::map<std::string, double> scalars{{"num_experts", 4.0}, {"block_size", 4.0}};
  std::vector<std::int32_t> sorted{1, 5, 6, 6, 0, 2, 4, 6, 3, 6, 6, 6, 6, 6, 6, 6, 6, 6};
  std::vector<std::int32_t> blocks{0, 2, 3, 0, 0};
  std::vector<std::int32_t> post_pad{12};
  std::vector<std::int32_t> reference_sorted = sorted;
  std::vector<std::int32_t> reference_blocks = blocks;
  std::vector<std::int32_t> reference_post_pad = post_pad;

  std::vector<CompareReport> check(bool reveal = true, int variant = 0) const {
    const std::vector<HostTensorView> inputs{
        {"topk_ids", DType::kI32, ids.data(), ids.size(), {3, 2}}};
    const std::vector<HostTensorView> candidate{
        {"sorted_token_ids", DType::kI32, sorted.data(), sorted.size(), {18}},
        {"experts_ids", DType::kI32, blocks.data(), blocks.size(), {5}},
        {"num_tokens_post_pad", DType::kI32, post_pad.data(), 1, {1}}};
    const std::vector<HostTensorView> reference{
        {"sorted_token_ids", DType::kI32, reference_sorted.data(), reference_sorted.size(), {18}},
        {"experts_ids", DType::kI32, reference_blocks.data(), reference_blocks.size(), {5}},
        {"num_tokens_post_pad", DType::kI32, reference_post_pad.data(), 1, {1}}};
    const std::vector<Tolerance> tolerances{kExact, kExact, kExact};
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = reference;
    request.tolerances = tolerances;
    request.scalars = &scalars;
    request.poison_variant = variant;
    request.reveal_values = reveal;
    return judge::moe_align_checker().check(request);
  }
};

}  // namespace

TEST_CASE("moe_align checker: the in-order layout and any order inside a segment pass") {
  Alignment a;
  for (const auto& report : a.check()) {
    CAPTURE(report.summary);
    CHECK(report.pass);
  }
  // Expert 2's segment shuffled, its padding first; expert 0's padding between its indices.
  a.sorted = {6, 1, 6, 5, 6, 4, 0, 2, 6, 6, 3, 6, 6, 6, 6, 6, 6, 6};
  for (const auto& report : a.check()) {
    CAPTURE(report.summary);
    CHECK(report.pass);
  }
}

TEST_CASE("moe_align checker: an index in another expert's segment fails, naming the position") {
  Alignment a;
  std::swap(a.sorted[1], a.sorted[4]);  // 5 (expert 0) into expert 2's segment, 0 into expert 0's
  const auto reports = a.check();
  CAPTURE(reports[0].summary);
  CHECK_FALSE(reports[0].pass);
  // Two misplaced indices, and each of the two segments misses one of its own.
  CHECK(reports[0].mismatches == 4);
  CHECK(contains(reports[0].summary, "position 1: in expert 0's segment"));
  CHECK(contains(reports[0].summary, "routed to expert 2"));
  CHECK(reports[1].pass);
  CHECK(reports[2].pass);
}

TEST_CASE("moe_align checker: a repeated index and a missing one both fail") {
  Alignment a;
  a.sorted[5] = 0;  // expert 2's segment: 0, 0, 4 (2 missing)
  const auto reports = a.check();
  CAPTURE(reports[0].summary);
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "a second time"));
  CHECK(reports[0].mismatches == 2);  // the repeat, and the segment missing index 2

  Alignment b;
  b.sorted[8] = 6;  // expert 3's only index replaced by padding
  const auto missing = b.check();
  CAPTURE(missing[0].summary);
  CHECK_FALSE(missing[0].pass);
  CHECK(contains(missing[0].summary, "expert 3's segment is missing 1 of its 1 flat indices"));
}

TEST_CASE("moe_align checker: the tail must hold the padding value; unwritten counts as such") {
  Alignment a;
  a.sorted[15] = 0;
  auto reports = a.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "position 15: past num_tokens_post_pad"));

  Alignment b;
  for (const int variant : {0, 1}) {
    CAPTURE(variant);
    judge::fill_poison(DType::kI32, b.sorted.data() + 12, 6, variant);
    judge::fill_poison(DType::kI32, b.blocks.data() + 4, 1, variant);
    judge::fill_poison(DType::kI32, b.post_pad.data(), 1, variant);
    reports = b.check(true, variant);
    CHECK(reports[0].unwritten == 6);
    CHECK(reports[1].unwritten == 1);
    CHECK(reports[2].unwritten == 1);
    CHECK_FALSE(reports[2].pass);
    b = Alignment{};
  }
}

TEST_CASE("moe_align checker: block experts and the total are exact, the tail of blocks is 0") {
  Alignment a;
  a.blocks[3] = 3;  // past the total: must be 0
  a.post_pad[0] = 16;
  const auto reports = a.check();
  CHECK(reports[0].pass);
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "block 3: got 3, expected 0"));
  CHECK_FALSE(reports[2].pass);
  CHECK(contains(reports[2].summary, "got 16, the padded total is 12"));

  Alignment b;
  b.blocks[1] = 1;  // expert 1 owns no block
  CHECK_FALSE(b.check()[1].pass);
}

TEST_CASE("moe_align checker: hidden cases reveal no values") {
  Alignment a;
  a.post_pad[0] = 16;
  a.blocks[2] = 1;
  a.sorted[8] = 77;
  const auto reports = a.check(false);
  for (const auto& report : reports) {
    CAPTURE(report.summary);
    CHECK_FALSE(report.pass);
    CHECK_FALSE(contains(report.summary, "16"));
    CHECK_FALSE(contains(report.summary, "77"));
    CHECK_FALSE(contains(report.summary, "expected"));
    CHECK(report.first_got == 0.0);
  }
}
