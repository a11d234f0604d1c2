// Oracle of recsys/colbert_maxsim: scores[n] = sum_i max_{j < doc_lens[n]} query[i] . docs[n, j],
// in float64.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace crucible::tasks {
namespace {

core::Status colbert_maxsim(const OracleCall& call) {
  const OracleTensor& query = call.tensor("query");
  const OracleTensor& docs = call.tensor("docs");
  const OracleTensor& lens = call.tensor("doc_lens");
  OracleTensor& scores = call.tensor("scores");
  const std::int64_t query_len = call.symbol("query_len");
  const std::int64_t num_docs = call.symbol("num_docs");
  const std::int64_t maxlen = call.symbol("doc_maxlen");
  const std::int64_t dim = call.symbol("dim");
  for (std::int64_t n = 0; n < num_docs; ++n) {
    const auto len = static_cast<std::int64_t>(lens.values[n]);
    if (len < 1 || len > maxlen) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "colbert_maxsim: a doc length outside [1, doc_maxlen]"};
    }
    double total = 0.0;
    for (std::int64_t i = 0; i < query_len; ++i) {
      double best = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < len; ++j) {
        double dot = 0.0;
        for (std::int64_t k = 0; k < dim; ++k) {
          dot += query.values[i * dim + k] * docs.values[(n * maxlen + j) * dim + k];
        }
        best = std::max(best, dot);
      }
      total += best;
    }
    scores.values[n] = total;
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("recsys/colbert_maxsim", colbert_maxsim);

}  // namespace crucible::tasks
