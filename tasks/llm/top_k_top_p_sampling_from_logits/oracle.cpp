// Oracle of llm/top_k_top_p_sampling_from_logits: the inverse CDF, at the row's uniform draw, of
// the softmax filtered by top-k and then top-p, tokens in vocabulary order; in double.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace crucible::tasks {
namespace {

// One row, following the task description step by step. Logits are fp32 values held exactly in
// double; exp(l - max) is a double weight (the softmax's common scale cancels out of every
// ratio). Ties are exact comparisons, so -0 and +0 are one logit.
std::int64_t sample_row(const double* l, std::int64_t vocab, std::int64_t k, double p, double u) {
  const double m = *std::max_element(l, l + vocab);
  std::vector<double> w(static_cast<std::size_t>(vocab));
  for (std::int64_t v = 0; v < vocab; ++v) w[v] = std::exp(l[v] - m);

  // Tokens by logit, largest first.
  std::vector<std::int64_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return l[a] > l[b]; });

  // K: #{x : l[x] > l[v]} < k, i.e. l[v] >= the k-th largest logit.
  double k_threshold = -INFINITY;
  if (k > 0 && k < vocab) k_threshold = l[order[k - 1]];
  double z_k = 0.0;
  for (std::int64_t v = 0; v < vocab; ++v) z_k += l[v] >= k_threshold ? w[v] : 0.0;

  // N: walk the levels of K from the top; a level (all tokens of one logit value) is kept while
  // the mass strictly above it is below p * Z_K.
  double n_threshold = k_threshold;
  if (p < 1.0) {
    double above = 0.0;
    std::size_t i = 0;
    while (i < order.size() && l[order[i]] >= k_threshold) {
      const double level = l[order[i]];
      if (!(above < p * z_k)) break;
      n_threshold = level;
      while (i < order.size() && l[order[i]] == level) above += w[order[i++]];
    }
  }

  double z_n = 0.0;
  for (std::int64_t v = 0; v < vocab; ++v) z_n += l[v] >= n_threshold ? w[v] : 0.0;
  const double target = u * z_n;
  double cumulative = 0.0;
  std::int64_t last = -1;
  for (std::int64_t v = 0; v < vocab; ++v) {
    if (!(l[v] >= n_threshold)) continue;
    cumulative += w[v];
    last = v;
    if (cumulative > target) return v;
  }
  return last;
}

core::Status top_k_top_p_sampling_from_logits(const OracleCall& call) {
  const OracleTensor& logits = call.tensor("logits");
  const OracleTensor& uniform = call.tensor("uniform_samples");
  const OracleTensor& top_k = call.tensor("top_k");
  const OracleTensor& top_p = call.tensor("top_p");
  OracleTensor& samples = call.tensor("samples");
  const std::int64_t batch = call.symbol("batch_size");
  const std::int64_t vocab = call.symbol("vocab_size");
  for (std::int64_t b = 0; b < batch; ++b) {
    const double* row = logits.values.data() + b * vocab;
    if (!std::all_of(row, row + vocab, [](double x) { return std::isfinite(x); })) {
      return core::Error{core::ErrorCode::kInvalidArgument, "logits must be finite"};
    }
    const double p = top_p.values[b];
    const double u = uniform.values[b];
    if (!(p > 0.0) || !(u >= 0.0 && u <= 1.0)) {
      return core::Error{core::ErrorCode::kInvalidArgument,
                         "top_p must be positive and uniform_samples in [0, 1]"};
    }
    samples.values[b] = static_cast<double>(
        sample_row(row, vocab, static_cast<std::int64_t>(top_k.values[b]), p, u));
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/top_k_top_p_sampling_from_logits", top_k_top_p_sampling_from_logits);

}  // namespace crucible::tasks
