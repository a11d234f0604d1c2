// Oracle of recsys/embedding_bag: out[b, t, :] = sum over the bag's ids of weights[t, id, :], in
// float64.
#include "tasks/oracle.hpp"

#include <string>

namespace crucible::tasks {
namespace {

core::Status embedding_bag(const OracleCall& call) {
  const OracleTensor& weights = call.tensor("weights");
  const OracleTensor& indices = call.tensor("indices");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t tables = call.symbol("num_tables");
  const std::int64_t rows = call.symbol("num_rows");
  const std::int64_t dim = call.symbol("dim");
  const std::int64_t pooling = call.symbol("pooling");
  for (std::int64_t t = 0; t < tables; ++t) {
    for (std::int64_t b = 0; b < batch; ++b) {
      double* dst = out.values.data() + (b * tables + t) * dim;
      for (std::int64_t l = 0; l < pooling; ++l) {
        const auto id = static_cast<std::int64_t>(indices.values[(t * batch + b) * pooling + l]);
        if (id < 0 || id >= rows) {
          return core::Error{core::ErrorCode::kInvalidArgument,
                             "embedding_bag: id " + std::to_string(id) + " outside the table"};
        }
        const double* row = weights.values.data() + (t * rows + id) * dim;
        for (std::int64_t d = 0; d < dim; ++d) dst[d] += row[d];
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("recsys/embedding_bag", embedding_bag);

}  // namespace crucible::tasks
