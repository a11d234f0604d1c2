// The edge/batched_nms oracle on hand-computed boxes (class-aware suppression, ties by index,
// zero-area boxes) and on its task's cases (every left-out box has a kept suppressor).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

using oracle_test::Tensors;

namespace {

Tensors run(const std::vector<double>& boxes, const std::vector<double>& scores,
            const std::vector<double>& idxs, double threshold) {
  const auto n = static_cast<std::int64_t>(scores.size());
  return oracle_test::call_oracle(
      "edge/batched_nms", {{"num_boxes", n}},
      Tensors{
          {"boxes", {core::DType::kF32, {n, 4}, boxes}},
          {"scores", {core::DType::kF32, {n}, scores}},
          {"idxs", {core::DType::kI64, {n}, idxs}},
          {"keep", {core::DType::kI64, {n}, std::vector<double>(static_cast<std::size_t>(n))}},
          {"num_kept", {core::DType::kI32, {1}, {0.0}}},
      },
      {{"iou_threshold", threshold}});
}

double iou(const double* a, const double* b) {
  const double w = std::max(std::min(a[2], b[2]) - std::max(a[0], b[0]), 0.0);
  const double h = std::max(std::min(a[3], b[3]) - std::max(a[1], b[1]), 0.0);
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h;
  return uni > 0.0 ? w * h / uni : 0.0;
}

}  // namespace

TEST_CASE("batched_nms oracle: suppression inside a class only, kept boxes by score") {
  // Boxes 0 and 1 overlap with IoU 90 / 110; box 2 is box 1 in class 1; box 3 stands apart.
  const Tensors out = run({0, 0, 10, 10, 1, 0, 11, 10, 1, 0, 11, 10, 20, 20, 30, 30},
                          {0.9, 0.8, 0.7, 0.95}, {0, 0, 1, 0}, 0.7);
  CHECK(out.at("keep").values == std::vector<double>{3, 0, 2, -1});
  CHECK(out.at("num_kept").values[0] == 3);
  // At 0.85 the pair no longer counts as overlapping.
  const Tensors loose = run({0, 0, 10, 10, 1, 0, 11, 10, 1, 0, 11, 10, 20, 20, 30, 30},
                            {0.9, 0.8, 0.7, 0.95}, {0, 0, 1, 0}, 0.85);
  CHECK(loose.at("keep").values == std::vector<double>{3, 0, 1, 2});
}

TEST_CASE("batched_nms oracle: a suppressed box suppresses nothing; ties go to the lower index") {
  // A chain 0 -> 1 -> 2 (each overlapping the next by 0.818, 0 and 2 by 0.667): 1 is
  // suppressed by 0, so 2 survives at 0.7.
  const Tensors chain =
      run({0, 0, 10, 10, 1, 0, 11, 10, 2, 0, 12, 10}, {0.9, 0.8, 0.7}, {0, 0, 0}, 0.7);
  CHECK(chain.at("keep").values == std::vector<double>{0, 2, -1});
  // Equal scores: box 0 comes first and removes box 1.
  const Tensors tied = run({0, 0, 10, 10, 1, 0, 11, 10}, {0.5, 0.5}, {0, 0}, 0.7);
  CHECK(tied.at("keep").values == std::vector<double>{0, -1});
  // Zero-area boxes, even identical ones, overlap nothing.
  const Tensors points = run({5, 5, 5, 5, 5, 5, 5, 5}, {0.5, 0.4}, {0, 0}, 0.1);
  CHECK(points.at("keep").values == std::vector<double>{0, 1});
}

TEST_CASE("batched_nms oracle: on the cases, every box left out has a kept suppressor") {
  const tasks::Task& task = oracle_test::repository_task("edge/batched_nms");
  for (const char* name : {"predict_b1_512", "rtdetr_b8_300", "h_odd_1000", "h_one_group",
                           "h_distinct_groups", "h_identical_boxes", "h_signed_groups"}) {
    INFO(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const Tensors t = oracle_test::run_case(task, c);
    const auto& boxes = t.at("boxes").values;
    const auto& scores = t.at("scores").values;
    const auto& idxs = t.at("idxs").values;
    const auto& keep = t.at("keep").values;
    const auto kept = static_cast<std::size_t>(t.at("num_kept").values[0]);
    const double threshold = c.scalars.at("iou_threshold");
    std::vector<char> is_kept(scores.size(), 0);
    for (std::size_t p = 0; p < kept; ++p) is_kept[static_cast<std::size_t>(keep[p])] = 1;
    std::size_t unsuppressed = 0;
    for (std::size_t j = 0; j < scores.size(); ++j) {
      if (is_kept[j] != 0) continue;
      bool found = false;
      for (std::size_t p = 0; p < kept && !found; ++p) {
        const auto k = static_cast<std::size_t>(keep[p]);
        found = idxs[k] == idxs[j] && scores[k] >= scores[j] &&
                iou(&boxes[4 * k], &boxes[4 * j]) > threshold;
      }
      unsuppressed += found ? 0 : 1;
    }
    CHECK(unsuppressed == 0);
    for (std::size_t p = kept; p < keep.size(); ++p) CHECK(keep[p] == -1);
    // The data is what the case says it is: candidates collapse (a tenth kept or fewer at 0.7)
    // except where every box is its own group.
    if (std::string(name) == "h_distinct_groups") {
      CHECK(kept == scores.size());
    } else if (std::string(name) == "h_identical_boxes") {
      // Every box the same: exactly one kept box a group.
      CHECK(kept == std::set<double>(idxs.begin(), idxs.end()).size());
    } else if (std::string(name) != "h_signed_groups") {
      CHECK(kept < scores.size() / 2);
      CHECK(kept > 1);
    }
  }
}
