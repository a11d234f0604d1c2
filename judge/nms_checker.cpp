// The batched-NMS checker: accepts every right answer of edge/batched_nms, where boxes of equal
// score may be visited in any order (so which of two tied, overlapping boxes survives is free)
// and an IoU computed in fp32 may fall on either side of a threshold it lies next to,
// recomputing every overlap in float64 from the boxes.
//
// Inputs by name: `boxes` ([N, 4], x1 y1 x2 y2, floating), `scores` ([N], floating), `idxs`
// ([N], integer: the group, class or image * classes + class); scalar `iou_threshold`. Outputs
// by name: `keep` ([N], integer) and `num_kept` ([1], integer). A case without them is the
// server's misconfiguration, an InternalError.
//
// IoU(a, b) = inter / (area(a) + area(b) - inter), inter the clamped overlap of the two
// rectangles (torchvision's box_iou, no +1 pixel), 0 where the union is not positive (two
// zero-area boxes). Two boxes "clearly overlap" when they share a group and IoU > t + band,
// "may overlap" when they share a group and IoU > t - band (t the threshold, band kIouBand).
//
// Rules (K = num_kept):
//  - num_kept: an integer in [0, N].
//  - keep[0 .. K-1]: distinct box indices in [0, N), scores non-increasing along the list;
//    keep[K ..] holds -1.
//  - No kept box clearly overlaps a box kept before it.
//  - Every box left out may overlap a kept box of a score at least its own.
// Greedy NMS under some order of the tied scores satisfies these; conversely a list satisfying
// them is the greedy result under the order that visits kept boxes first among equal scores
// (by induction down the scores: the highest box of a group is kept, a box with no kept,
// overlapping box above it is kept, a box with one is not), up to pairs within the band.
// So neither an empty list nor every box passes where the boxes overlap.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"
#include "judge/checker_support.hpp"
#include "judge/task_checker.hpp"

namespace crucible::judge {
namespace {

// IoUs within this distance of the threshold may go either way: fp32 box arithmetic is off by
// about 1e-6 relative, so a correct kernel lands on the wrong side only inside it.
constexpr double kIouBand = 1e-5;

struct Box {
  double x1, y1, x2, y2;
};

double iou(const Box& a, const Box& b) {
  const double w = std::max(std::min(a.x2, b.x2) - std::max(a.x1, b.x1), 0.0);
  const double h = std::max(std::min(a.y2, b.y2) - std::max(a.y1, b.y1), 0.0);
  const double inter = w * h;
  const double area_a = (a.x2 - a.x1) * (a.y2 - a.y1);
  const double area_b = (b.x2 - b.x1) * (b.y2 - b.y1);
  const double uni = area_a + area_b - inter;
  return uni > 0.0 ? inter / uni : 0.0;
}

// An integer element exactly (i64 beyond 2^53 included).
std::int64_t integer_of(const HostTensorView& view, std::size_t index) {
  if (view.dtype == core::DType::kI64) {
    std::int64_t value = 0;
    std::memcpy(&value, static_cast<const char*>(view.data) + index * sizeof value, sizeof value);
    return value;
  }
  return static_cast<std::int64_t>(element_of(view, index));
}

std::string box_text(std::int64_t box) { return "box " + std::to_string(box); }

class NmsChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    const auto candidate = request.candidate;
    const HostTensorView* boxes = find_named(request.inputs, "boxes");
    const HostTensorView* scores = find_named(request.inputs, "scores");
    const HostTensorView* idxs = find_named(request.inputs, "idxs");
    const HostTensorView* keep = find_named(candidate, "keep");
    const HostTensorView* num_kept = find_named(candidate, "num_kept");
    if (candidate.size() != 2 || boxes == nullptr || scores == nullptr || idxs == nullptr ||
        keep == nullptr || num_kept == nullptr || !core::dtype_is_floating(boxes->dtype) ||
        !core::dtype_is_floating(scores->dtype) || core::dtype_is_floating(idxs->dtype) ||
        core::dtype_is_floating(keep->dtype) || core::dtype_is_floating(num_kept->dtype) ||
        num_kept->count != 1 || boxes->count != 4 * scores->count || idxs->count != scores->count ||
        keep->count != scores->count) {
      throw core::InternalError(
          "nms checker: needs boxes [N, 4] and scores [N] (floating), idxs [N] (integer) and the "
          "integer outputs keep [N] and num_kept [1]");
    }
    if (request.scalars == nullptr || request.scalars->count("iou_threshold") == 0) {
      throw core::InternalError("nms checker: case without scalar 'iou_threshold'");
    }
    const double threshold = request.scalars->at("iou_threshold");
    const std::size_t n = scores->count;
    const bool reveal = request.reveal_values;
    const int variant = request.poison_variant;

    std::vector<Box> box(n);
    std::vector<double> score(n);
    std::vector<std::int64_t> group(n);
    for (std::size_t i = 0; i < n; ++i) {
      box[i] = {element_of(*boxes, 4 * i), element_of(*boxes, 4 * i + 1),
                element_of(*boxes, 4 * i + 2), element_of(*boxes, 4 * i + 3)};
      score[i] = element_of(*scores, i);
      group[i] = integer_of(*idxs, i);
    }

    // num_kept: a count in [0, N]. When it is not, keep is judged up to its first entry that is
    // not a box index.
    Failures count_failures(*num_kept, Tolerance{0.0, 0.0}, reveal);
    const double got_count = element_of(*num_kept, 0);
    std::size_t kept_count = 0;
    if (got_count >= 0.0 && got_count <= static_cast<double>(n) &&
        got_count == std::trunc(got_count)) {
      kept_count = static_cast<std::size_t>(got_count);
    } else {
      const bool unwritten = is_poison(num_kept->dtype, num_kept->data, 0, variant);
      count_failures.fail(0, got_count, 0.0, unwritten, [&] {
        if (unwritten) return std::string("never written");
        return reveal ? "got " + format_number(got_count) + ", not a count in [0, " +
                            std::to_string(n) + "]"
                      : "not a count in [0, " + std::to_string(n) + "]";
      });
      while (kept_count < n && element_of(*keep, kept_count) >= 0.0) ++kept_count;
    }

    Failures keep_failures(*keep, Tolerance{0.0, 0.0}, reveal);
    std::vector<char> is_kept(n, 0);
    // The kept boxes of each group, in list order.
    std::unordered_map<std::int64_t, std::vector<std::size_t>> kept_in_group;
    double previous_score = 0.0;
    bool have_previous = false;
    for (std::size_t p = 0; p < n; ++p) {
      const double got = element_of(*keep, p);
      const bool unwritten = is_poison(keep->dtype, keep->data, p, variant);
      const std::string at = "position " + std::to_string(p) + ": ";
      if (p >= kept_count) {
        if (got != -1.0) {
          keep_failures.fail(p, got, -1.0, unwritten, [&] {
            return at + (unwritten ? std::string("never written")
                                   : std::string("a position at or past num_kept must hold -1"));
          });
        }
        continue;
      }
      const bool usable = got >= 0.0 && got < static_cast<double>(n) && got == std::trunc(got);
      if (!usable || is_kept[static_cast<std::size_t>(usable ? got : 0.0)] != 0) {
        keep_failures.fail(p, got, 0.0, unwritten, [&] {
          if (unwritten) return at + "never written";
          if (!usable) return at + "not a box index below N (positions below num_kept)";
          return at + (reveal ? box_text(static_cast<std::int64_t>(got)) + " is listed twice"
                              : std::string("a box is listed twice"));
        });
        continue;
      }
      const auto i = static_cast<std::size_t>(got);
      is_kept[i] = 1;
      if (have_previous && score[i] > previous_score) {
        keep_failures.fail(p, got, 0.0, false, [&] {
          return at + (reveal ? box_text(static_cast<std::int64_t>(i)) + " scores " +
                                    format_number(score[i]) + ", above the previous kept box's " +
                                    format_number(previous_score)
                              : std::string("the scores of the kept boxes must not increase "
                                            "along the list"));
        });
      }
      previous_score = score[i];
      have_previous = true;
      auto& same_group = kept_in_group[group[i]];
      for (const std::size_t k : same_group) {
        const double overlap = iou(box[k], box[i]);
        if (overlap > threshold + kIouBand) {
          keep_failures.fail(p, got, 0.0, false, [&] {
            return at + (reveal ? box_text(static_cast<std::int64_t>(i)) + " is kept although " +
                                      box_text(static_cast<std::int64_t>(k)) +
                                      ", kept before it in the same group, overlaps it with IoU " +
                                      format_number(overlap)
                                : std::string("kept although a box kept before it in the same "
                                              "group overlaps it above the IoU threshold"));
          });
          break;
        }
      }
      same_group.push_back(i);
    }

    // Every box left out needs a kept suppressor: same group, a score at least its own, an IoU
    // that may exceed the threshold. The failure is placed where the box would be listed.
    std::vector<double> kept_scores;
    for (std::size_t i = 0; i < n; ++i) {
      if (is_kept[i] != 0) kept_scores.push_back(score[i]);
    }
    std::sort(kept_scores.begin(), kept_scores.end(), std::greater<>());
    for (std::size_t j = 0; j < n; ++j) {
      if (is_kept[j] != 0) continue;
      bool suppressed = false;
      if (const auto found = kept_in_group.find(group[j]); found != kept_in_group.end()) {
        for (const std::size_t k : found->second) {
          if (score[k] >= score[j] && iou(box[k], box[j]) > threshold - kIouBand) {
            suppressed = true;
            break;
          }
        }
      }
      if (suppressed) continue;
      const auto above = static_cast<std::size_t>(
          std::upper_bound(kept_scores.begin(), kept_scores.end(), score[j], std::greater<>()) -
          kept_scores.begin());
      const std::size_t at = std::min(above, n - 1);
      keep_failures.fail(at, element_of(*keep, at), static_cast<double>(j), false, [&] {
        return "position " + std::to_string(at) + ": " +
               (reveal ? box_text(static_cast<std::int64_t>(j)) + " (score " +
                             format_number(score[j]) +
                             ") is left out, but no kept box of its group with a score at "
                             "least its own overlaps it above the IoU threshold"
                       : std::string("a box is left out that no kept box of its group with a "
                                     "score at least its own overlaps above the IoU threshold"));
      });
    }

    std::vector<CompareReport> reports(2);
    const std::string band = format_number(kIouBand);
    for (std::size_t o = 0; o < 2; ++o) {
      if (&candidate[o] == keep) {
        reports[o] = keep_failures.finish(
            "the kept boxes are greedy NMS's under an order of the tied scores",
            "num_kept distinct box indices with non-increasing scores, then -1; no kept box "
            "overlapping an earlier kept box of its group above the threshold, every box left "
            "out overlapping a kept box of its group with a score at least its own; IoUs within " +
                band + " of the threshold either way");
      } else {
        reports[o] = count_failures.finish("a count in [0, N]", "a count in [0, N]");
      }
    }
    return reports;
  }
};

}  // namespace

const TaskChecker& nms_checker() {
  static const NmsChecker checker;
  return checker;
}

}  // namespace crucible::judge
