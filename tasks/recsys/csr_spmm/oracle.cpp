// Oracle of recsys/csr_spmm: a CSR matrix times dense embeddings (LightGCN's propagation), in
// float64.
#include "tasks/oracle.hpp"

#include <cstdint>
#include <string>

namespace crucible::tasks {
namespace {

core::Status csr_spmm(const OracleCall& call) {
  const OracleTensor& row_ptr = call.tensor("row_ptr");
  const OracleTensor& col_idx = call.tensor("col_idx");
  const OracleTensor& values = call.tensor("values");
  const OracleTensor& emb = call.tensor("emb");
  OracleTensor& out = call.tensor("out");
  const std::int64_t nodes = call.symbol("num_nodes");
  const std::int64_t nnz = call.symbol("nnz");
  const std::int64_t dim = call.symbol("dim");
  if (call.symbol("num_offsets") != nodes + 1) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "csr_spmm: num_offsets must be num_nodes + 1"};
  }
  if (row_ptr.values[0] != 0.0 || row_ptr.values[nodes] != static_cast<double>(nnz)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "csr_spmm: row_ptr must start at 0 and end at nnz"};
  }
  for (std::int64_t i = 0; i < nodes; ++i) {
    const auto begin = static_cast<std::int64_t>(row_ptr.values[i]);
    const auto end = static_cast<std::int64_t>(row_ptr.values[i + 1]);
    if (end < begin) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "csr_spmm: row_ptr decreases at row " + std::to_string(i)};
    }
    double* dst = out.values.data() + i * dim;
    for (std::int64_t d = 0; d < dim; ++d) dst[d] = 0.0;
    for (std::int64_t p = begin; p < end; ++p) {
      const auto c = static_cast<std::int64_t>(col_idx.values[p]);
      if (c < 0 || c >= nodes) {
        return core::Error{core::ErrorCode::kInvalidArgument,
                           "csr_spmm: col_idx out of range at nonzero " + std::to_string(p)};
      }
      const double v = values.values[p];
      const double* src = emb.values.data() + c * dim;
      for (std::int64_t d = 0; d < dim; ++d) dst[d] += v * src[d];
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("recsys/csr_spmm", csr_spmm);

}  // namespace crucible::tasks
