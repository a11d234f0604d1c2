// Oracle of ssm/mamba_chunk_scan: Mamba-2's SSD chunk-scan output in double, token by token:
// the state entering the chunk read out by C and decayed, the causal decayed mix of the chunk's
// earlier tokens through cb, and the D skip.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status mamba_chunk_scan(const OracleCall& call) {
  const OracleTensor& cb = call.tensor("cb");
  const OracleTensor& x = call.tensor("x");
  const OracleTensor& dt = call.tensor("dt");
  const OracleTensor& da = call.tensor("dA_cumsum");
  const OracleTensor& c_in = call.tensor("C");
  const OracleTensor& states = call.tensor("states");
  const OracleTensor& d = call.tensor("D");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t seqlen = call.symbol("seqlen");
  const std::int64_t nchunks = call.symbol("nchunks");
  const std::int64_t chunk = call.symbol("chunk_size");
  const std::int64_t heads = call.symbol("nheads");
  const std::int64_t hdim = call.symbol("headdim");
  const std::int64_t groups = call.symbol("ngroups");
  const std::int64_t dstate = call.symbol("dstate");
  if (heads % groups != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument, "nheads is not a multiple of ngroups"};
  }
  if (nchunks != (seqlen + chunk - 1) / chunk) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "nchunks is not cdiv(seqlen, chunk_size)"};
  }
  const std::int64_t heads_per_group = heads / groups;
  std::vector<double> weights(static_cast<std::size_t>(chunk));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t c = 0; c < nchunks; ++c) {
      const std::int64_t first = c * chunk;
      const std::int64_t length = std::min(chunk, seqlen - first);
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t g = h / heads_per_group;
        const std::size_t row_base =
            static_cast<std::size_t>(((b * heads + h) * nchunks + c) * chunk);
        const std::size_t cb_base =
            static_cast<std::size_t>(((b * nchunks + c) * groups + g) * chunk * chunk);
        const std::size_t state_base =
            static_cast<std::size_t>(((b * nchunks + c) * heads + h) * hdim * dstate);
        for (std::int64_t t = 0; t < length; ++t) {
          const double da_t = da.values[row_base + static_cast<std::size_t>(t)];
          const double scale = std::exp(da_t);
          for (std::int64_t s = 0; s <= t; ++s) {
            const auto su = static_cast<std::size_t>(s);
            weights[su] = cb.values[cb_base + static_cast<std::size_t>(t * chunk + s)] *
                          std::exp(da_t - da.values[row_base + su]) * dt.values[row_base + su];
          }
          const std::size_t c_base =
              static_cast<std::size_t>(((b * seqlen + first + t) * groups + g) * dstate);
          for (std::int64_t p = 0; p < hdim; ++p) {
            double read = 0.0;
            for (std::int64_t n = 0; n < dstate; ++n) {
              read += c_in.values[c_base + static_cast<std::size_t>(n)] *
                      states.values[state_base + static_cast<std::size_t>(p * dstate + n)];
            }
            double mix = 0.0;
            for (std::int64_t s = 0; s <= t; ++s) {
              mix += weights[static_cast<std::size_t>(s)] *
                     x.values[static_cast<std::size_t>(
                         ((b * seqlen + first + s) * heads + h) * hdim + p)];
            }
            const std::size_t o =
                static_cast<std::size_t>(((b * seqlen + first + t) * heads + h) * hdim + p);
            out.values[o] =
                scale * read + mix + d.values[static_cast<std::size_t>(h)] * x.values[o];
          }
        }
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("ssm/mamba_chunk_scan", mamba_chunk_scan);

}  // namespace crucible::tasks
