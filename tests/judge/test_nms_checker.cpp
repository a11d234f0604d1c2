// The batched-NMS checker: greedy NMS's list passes, so does the other list a score tie or an IoU
// at the threshold allows; an empty list, every box, a box kept under a kept overlap, a box left
// out with no suppressor, a rising score, a repeated index, bad padding and a bad count fail.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
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
using testing::all_pass;
using testing::contains;

namespace {

// Box 0 and box 1 overlap with IoU 90 / 110 = 0.818 (class 0); box 2 is box 1 in class 1; box 3
// stands apart. Greedy at 0.7 over scores 0.95 (3), 0.9 (0), 0.8 (1), 0.7 (2): keep 3, 0, 2.
struct Detections {
  std::vector<float> boxes{0, 0, 10, 10, 1, 0, 11, 10, 1, 0, 11, 10, 20, 20, 30, 30};
  std::vector<float> scores{0.9f, 0.8f, 0.7f, 0.95f};
  std::vector<std::int64_t> idxs{0, 0, 1, 0};
  std::vector<std::int64_t> keep{3, 0, 2, -1};
  std::vector<std::int32_t> num_kept{3};
  double threshold = 0.7;

  std::vector<CompareReport> check(bool reveal = true) const {
    const auto n = static_cast<std::int64_t>(scores.size());
    const std::vector<HostTensorView> inputs{
        {"boxes", DType::kF32, boxes.data(), boxes.size(), {n, 4}},
        {"scores", DType::kF32, scores.data(), scores.size(), {n}},
        {"idxs", DType::kI64, idxs.data(), idxs.size(), {n}}};
    const std::vector<HostTensorView> candidate{
        {"keep", DType::kI64, keep.data(), keep.size(), {n}},
        {"num_kept", DType::kI32, num_kept.data(), num_kept.size(), {1}}};
    const std::vector<Tolerance> tolerances{{0.0, 0.0}, {0.0, 0.0}};
    const std::map<std::string, double> scalars{{"iou_threshold", threshold}};
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = candidate;
    request.tolerances = tolerances;
    request.scalars = &scalars;
    request.reveal_values = reveal;
    return judge::nms_checker().check(request);
  }
};

}  // namespace

TEST_CASE("nms checker: greedy NMS's list passes") {
  const Detections d;
  CHECK(all_pass(d.check()));
}

TEST_CASE("nms checker: neither an empty list nor every box passes") {
  Detections d;
  d.keep = {-1, -1, -1, -1};
  d.num_kept = {0};
  auto reports = d.check();
  CHECK(reports[1].pass);
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "is left out"));
  d.keep = {3, 0, 1, 2};
  d.num_kept = {4};
  reports = d.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[0].first_mismatch == 2);
  CHECK(contains(reports[0].summary, "box 1 is kept although box 0"));
  CHECK(contains(d.check(false)[0].summary, "kept although a box kept before it"));
}

TEST_CASE("nms checker: classes never suppress each other") {
  Detections d;
  // Dropping box 2 (class 1) as if box 0 of class 0 suppressed it.
  d.keep = {3, 0, -1, -1};
  d.num_kept = {2};
  const auto reports = d.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "box 2 (score 0.7) is left out"));
  CHECK(reports[0].first_mismatch == 2);
}

TEST_CASE("nms checker: the list must follow the scores down") {
  Detections d;
  d.keep = {0, 3, 2, -1};
  const auto reports = d.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "above the previous kept box's"));
}

TEST_CASE("nms checker: either box of a tied, overlapping pair may survive") {
  Detections d;
  d.scores = {0.9f, 0.9f, 0.7f, 0.95f};
  CHECK(all_pass(d.check()));
  d.keep = {3, 1, 2, -1};
  CHECK(all_pass(d.check()));
  // Not both, and not neither.
  d.keep = {3, 1, 0, 2};
  d.num_kept = {4};
  CHECK_FALSE(d.check()[0].pass);
  d.keep = {3, 2, -1, -1};
  d.num_kept = {2};
  CHECK_FALSE(d.check()[0].pass);
}

TEST_CASE("nms checker: an IoU at the threshold may go either way, one clearly above may not") {
  Detections d;
  // Box 1 inside box 0 with IoU exactly 70 / 100.
  d.boxes = {0, 0, 10, 10, 0, 0, 10, 7};
  d.scores = {0.9f, 0.8f};
  d.idxs = {0, 0};
  d.keep = {0, 1};
  d.num_kept = {2};
  CHECK(all_pass(d.check()));
  d.keep = {0, -1};
  d.num_kept = {1};
  CHECK(all_pass(d.check()));
  d.threshold = 0.69;
  CHECK(all_pass(d.check()));
  d.keep = {0, 1};
  d.num_kept = {2};
  CHECK_FALSE(d.check()[0].pass);
  d.threshold = 0.71;
  CHECK(all_pass(d.check()));
  d.keep = {0, -1};
  d.num_kept = {1};
  CHECK_FALSE(d.check()[0].pass);
}

TEST_CASE("nms checker: zero-area boxes overlap nothing") {
  Detections d;
  d.boxes = {5, 5, 5, 5, 5, 5, 5, 5};
  d.scores = {0.9f, 0.8f};
  d.idxs = {0, 0};
  d.keep = {0, 1};
  d.num_kept = {2};
  CHECK(all_pass(d.check()));
  d.keep = {0, -1};
  d.num_kept = {1};
  CHECK_FALSE(d.check()[0].pass);
}

TEST_CASE("nms checker: repeated indices, bad padding and a bad count fail") {
  Detections d;
  d.keep = {3, 0, 0, -1};
  auto reports = d.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "box 0 is listed twice"));
  d.keep = {3, 0, 2, 7};
  reports = d.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[0].first_mismatch == 3);
  CHECK(contains(reports[0].summary, "must hold -1"));
  d.keep = {3, 0, 2, -1};
  d.num_kept = {5};
  reports = d.check();
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[0].pass);  // judged up to the first entry that is not a box index
  d.num_kept = {2};
  reports = d.check();
  CHECK(reports[1].pass);
  CHECK_FALSE(reports[0].pass);
}

TEST_CASE("nms checker: poison left in the outputs reads as unwritten") {
  Detections d;
  std::vector<std::int64_t> poisoned(4);
  judge::fill_poison(DType::kI64, poisoned.data(), poisoned.size(), 0);
  d.keep = poisoned;
  std::vector<std::int32_t> count(1);
  judge::fill_poison(DType::kI32, count.data(), 1, 0);
  d.num_kept = count;
  const auto reports = d.check();
  CHECK_FALSE(reports[0].pass);
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[1].unwritten == 1);
  CHECK(contains(reports[1].summary, "never written"));
}
