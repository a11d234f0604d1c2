// Oracle of diffusion/attention: non-causal multi-head attention on [batch, seq_len, num_heads,
// 128] tensors, every query token over every key token of its sample, softmax in double. Work is
// shared out among threads by (sample, head, block of query rows): the GPU suite checks cases of
// tens of billions of multiply-adds.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace crucible::tasks {
namespace {

constexpr std::int64_t kHeadDim = 128;
constexpr std::int64_t kRowsPerUnit = 64;  // query rows per unit of work

core::Status attention(const OracleCall& call) {
  const OracleTensor& query = call.tensor("query");
  const OracleTensor& key = call.tensor("key");
  const OracleTensor& value = call.tensor("value");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t seq_len = call.symbol("seq_len");
  const std::int64_t heads = call.symbol("num_heads");
  const double scale = call.scalar("scale");
  const std::int64_t row_stride = heads * kHeadDim;  // elements between consecutive tokens
  const std::int64_t row_blocks = (seq_len + kRowsPerUnit - 1) / kRowsPerUnit;
  const std::int64_t units = batch * heads * row_blocks;

  // One unit: rows [r0, r0 + kRowsPerUnit) of head h of sample b. The head's keys and values
  // are gathered into contiguous [seq_len, 128] arrays once per unit (they are strided by
  // num_heads rows in the tensors).
  auto run_unit = [&](std::int64_t unit, std::vector<double>& keys, std::vector<double>& values,
                      std::vector<double>& scores) {
    const std::int64_t b = unit / (heads * row_blocks);
    const std::int64_t h = unit / row_blocks % heads;
    const std::int64_t r0 = unit % row_blocks * kRowsPerUnit;
    const std::int64_t head_offset = b * seq_len * row_stride + h * kHeadDim;
    for (std::int64_t j = 0; j < seq_len; ++j) {
      const auto from = static_cast<std::size_t>(head_offset + j * row_stride);
      std::copy_n(key.values.begin() + static_cast<std::ptrdiff_t>(from), kHeadDim,
                  keys.begin() + j * kHeadDim);
      std::copy_n(value.values.begin() + static_cast<std::ptrdiff_t>(from), kHeadDim,
                  values.begin() + j * kHeadDim);
    }
    for (std::int64_t i = r0; i < std::min(seq_len, r0 + kRowsPerUnit); ++i) {
      const double* q = query.values.data() + head_offset + i * row_stride;
      double top = -INFINITY;
      for (std::int64_t j = 0; j < seq_len; ++j) {
        const double* k = keys.data() + j * kHeadDim;
        double dot = 0.0;
        for (std::int64_t d = 0; d < kHeadDim; ++d) dot += q[d] * k[d];
        scores[static_cast<std::size_t>(j)] = scale * dot;
        top = std::max(top, scale * dot);
      }
      double total = 0.0;
      double y[kHeadDim] = {};
      for (std::int64_t j = 0; j < seq_len; ++j) {
        const double p = std::exp(scores[static_cast<std::size_t>(j)] - top);
        total += p;
        const double* v = values.data() + j * kHeadDim;
        for (std::int64_t d = 0; d < kHeadDim; ++d) y[d] += p * v[d];
      }
      double* o = out.values.data() + head_offset + i * row_stride;
      for (std::int64_t d = 0; d < kHeadDim; ++d) o[d] = y[d] / total;
    }
  };

  // Small cases (the CPU suite's) stay on the calling thread.
  share_units(units, batch * heads * seq_len * seq_len >= (std::int64_t{1} << 20), [&] {
    return [&, keys = std::vector<double>(static_cast<std::size_t>(seq_len * kHeadDim)),
            values = std::vector<double>(static_cast<std::size_t>(seq_len * kHeadDim)),
            scores = std::vector<double>(static_cast<std::size_t>(seq_len))](
               std::int64_t unit) mutable { run_unit(unit, keys, values, scores); };
  });
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("diffusion/attention", attention);

}  // namespace crucible::tasks
