// Oracle of llm/fp8_scaled_linear: out[t, n] = a_scales[t] * b_scales[n] * sum_k a[t, k] * b[n, k]
// in double from the decoded e4m3 and f32 values (every e4m3 product, and every sum the GPU
// suite's cases produce, is exact in double). Output rows are shared out among threads: the GPU
// suite checks prefill-sized cases with billions of multiply-adds.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <thread>
#include <vector>

namespace crucible::tasks {
namespace {

core::Status fp8_scaled_linear(const OracleCall& call) {
  const OracleTensor& a = call.tensor("a");
  const OracleTensor& b = call.tensor("b");
  const OracleTensor& a_scales = call.tensor("a_scales");
  const OracleTensor& b_scales = call.tensor("b_scales");
  OracleTensor& out = call.tensor("out");
  const std::int64_t tokens = call.symbol("num_tokens");
  const std::int64_t k_size = call.symbol("in_features");
  const std::int64_t n_size = call.symbol("out_features");
  auto rows = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t t = first; t < last; ++t) {
      const double* x = a.values.data() + t * k_size;
      const double token_scale = a_scales.values[static_cast<std::size_t>(t)];
      for (std::int64_t n = 0; n < n_size; ++n) {
        const double* w = b.values.data() + n * k_size;
        double sum = 0.0;
        for (std::int64_t k = 0; k < k_size; ++k) sum += x[k] * w[k];
        out.values[static_cast<std::size_t>(t * n_size + n)] =
            token_scale * b_scales.values[static_cast<std::size_t>(n)] * sum;
      }
    }
  };
  const std::int64_t threads = std::clamp<std::int64_t>(
      std::min<std::int64_t>(std::thread::hardware_concurrency(), tokens), 1, 64);
  if (threads == 1 || tokens * n_size * k_size < (std::int64_t{1} << 24)) {
    rows(0, tokens);
    return {};
  }
  std::vector<std::thread> workers;
  const std::int64_t share = (tokens + threads - 1) / threads;
  for (std::int64_t first = 0; first < tokens; first += share) {
    workers.emplace_back(rows, first, std::min(tokens, first + share));
  }
  for (auto& worker : workers) worker.join();
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("llm/fp8_scaled_linear", fp8_scaled_linear);

}  // namespace crucible::tasks
