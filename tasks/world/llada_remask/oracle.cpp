// Oracle of world/llada_remask: LLaDA's low-confidence remasking step in float64 (the first
// argmax token, its log-softmax confidence plus the noise, a stable per-row top-k).
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status llada_remask(const OracleCall& call) {
  const OracleTensor& logits = call.tensor("logits");
  const OracleTensor& x = call.tensor("x");
  const OracleTensor& noise = call.tensor("noise");
  const OracleTensor& want = call.tensor("num_transfer_tokens");
  OracleTensor& x0 = call.tensor("x0");
  OracleTensor& transfer = call.tensor("transfer_index");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t length = call.symbol("seq_len");
  const std::int64_t vocab = call.symbol("vocab");
  const double mask_id = call.scalar("mask_id");
  std::vector<double> score(static_cast<std::size_t>(length));
  std::vector<std::int64_t> order;
  for (std::int64_t b = 0; b < batch; ++b) {
    order.clear();
    for (std::int64_t l = 0; l < length; ++l) {
      const std::int64_t row = b * length + l;
      transfer.values[row] = 0.0;
      if (x.values[row] != mask_id) {
        x0.values[row] = x.values[row];
        continue;
      }
      const double* v = logits.values.data() + row * vocab;
      std::int64_t best = 0;
      for (std::int64_t t = 1; t < vocab; ++t) best = v[t] > v[best] ? t : best;
      double sum = 0.0;
      for (std::int64_t t = 0; t < vocab; ++t) sum += std::exp(v[t] - v[best]);
      x0.values[row] = static_cast<double>(best);
      score[l] = noise.values[row] - std::log(sum);
      order.push_back(l);
    }
    // Highest score first; equal scores keep the lower position first.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t c) { return score[a] > score[c]; });
    const auto k = std::min<std::int64_t>(static_cast<std::int64_t>(std::max(want.values[b], 0.0)),
                                          static_cast<std::int64_t>(order.size()));
    for (std::int64_t i = 0; i < k; ++i) transfer.values[b * length + order[i]] = 1.0;
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("world/llada_remask", llada_remask);

}  // namespace crucible::tasks
