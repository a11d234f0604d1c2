// Oracle of science/knn: the k nearest reference points of each query point in float64 (squared
// distances of the fp32 coordinates; equal distances ordered by index).
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status knn(const OracleCall& call) {
  const OracleTensor& query = call.tensor("query");
  const OracleTensor& ref = call.tensor("ref");
  OracleTensor& dists = call.tensor("dists");
  OracleTensor& idx = call.tensor("idx");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t queries = call.symbol("num_query");
  const std::int64_t refs = call.symbol("num_ref");
  const std::int64_t k = call.symbol("k");
  if (k > refs) {
    return core::Error{core::ErrorCode::kInvalidArgument, "knn: k must not exceed num_ref"};
  }
  std::vector<std::pair<double, std::int64_t>> candidates(static_cast<std::size_t>(refs));
  for (std::int64_t b = 0; b < batch; ++b) {
    const double* cloud = ref.values.data() + b * refs * 3;
    for (std::int64_t q = 0; q < queries; ++q) {
      const double* p = query.values.data() + (b * queries + q) * 3;
      for (std::int64_t r = 0; r < refs; ++r) {
        const double dx = p[0] - cloud[r * 3];
        const double dy = p[1] - cloud[r * 3 + 1];
        const double dz = p[2] - cloud[r * 3 + 2];
        candidates[r] = {dx * dx + dy * dy + dz * dz, r};
      }
      std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end());
      const std::int64_t out = (b * queries + q) * k;
      for (std::int64_t j = 0; j < k; ++j) {
        dists.values[out + j] = candidates[j].first;
        idx.values[out + j] = static_cast<double>(candidates[j].second);
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("science/knn", knn);

}  // namespace crucible::tasks
