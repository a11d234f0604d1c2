// Oracle of edge/batched_nms: greedy NMS in float64 per group (torchvision.ops.batched_nms), the
// boxes visited by decreasing score, equal scores by increasing index.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <unordered_map>
#include <vector>

namespace crucible::tasks {
namespace {

// torchvision's IoU (no +1 pixel); 0 where the union is not positive, as the fp32 division's
// NaN compares false there.
double box_iou(const double* a, const double* b) {
  const double w = std::max(std::min(a[2], b[2]) - std::max(a[0], b[0]), 0.0);
  const double h = std::max(std::min(a[3], b[3]) - std::max(a[1], b[1]), 0.0);
  const double inter = w * h;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0.0 ? inter / uni : 0.0;
}

core::Status batched_nms(const OracleCall& call) {
  const OracleTensor& boxes = call.tensor("boxes");
  const OracleTensor& scores = call.tensor("scores");
  const OracleTensor& idxs = call.tensor("idxs");
  OracleTensor& keep = call.tensor("keep");
  OracleTensor& num_kept = call.tensor("num_kept");
  const double threshold = call.scalar("iou_threshold");
  const auto n = static_cast<std::int64_t>(scores.size());
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return scores.values[a] > scores.values[b];
  });
  // Kept boxes by group: a box is compared only with the kept boxes of its own group.
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> kept_in_group;
  std::int64_t count = 0;
  for (const std::int64_t i : order) {
    auto& kept = kept_in_group[static_cast<std::int64_t>(idxs.values[i])];
    const bool suppressed = std::any_of(kept.begin(), kept.end(), [&](std::int64_t k) {
      return box_iou(&boxes.values[k * 4], &boxes.values[i * 4]) > threshold;
    });
    if (suppressed) continue;
    kept.push_back(i);
    keep.values[count++] = static_cast<double>(i);
  }
  std::fill(keep.values.begin() + count, keep.values.end(), -1.0);
  num_kept.values[0] = static_cast<double>(count);
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("edge/batched_nms", batched_nms);

}  // namespace crucible::tasks
