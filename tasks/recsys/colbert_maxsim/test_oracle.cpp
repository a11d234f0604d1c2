// The recsys/colbert_maxsim oracle on a hand-computed passage (each query token's best match,
// padding excluded) and on generated cases (masking only lowers a score).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

double score(double len) {
  // Query tokens (1, 0) and (0, 1); passage tokens (1, 1), (2, -1), (-1, 3).
  return oracle_test::call_oracle(
             "recsys/colbert_maxsim",
             {{"query_len", 2}, {"num_docs", 1}, {"doc_maxlen", 3}, {"dim", 2}},
             Tensors{
                 {"query", {core::DType::kBF16, {2, 2}, {1, 0, 0, 1}}},
                 {"docs", {core::DType::kBF16, {1, 3, 2}, {1, 1, 2, -1, -1, 3}}},
                 {"doc_lens", {core::DType::kI32, {1}, {len}}},
                 {"scores", {core::DType::kF32, {1}, {0.0}}},
             })
      .at("scores")
      .values[0];
}

// Sum over query tokens of the best dot product over the first `rows` tokens of passage n.
double maxsim(const Tensors& t, std::int64_t n, std::int64_t rows, std::int64_t query_len,
              std::int64_t maxlen, std::int64_t dim) {
  const auto& q = t.at("query").values;
  const auto& d = t.at("docs").values;
  double total = 0.0;
  for (std::int64_t i = 0; i < query_len; ++i) {
    double best = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < rows; ++j) {
      double dot = 0.0;
      for (std::int64_t k = 0; k < dim; ++k) dot += q[i * dim + k] * d[(n * maxlen + j) * dim + k];
      best = std::max(best, dot);
    }
    total += best;
  }
  return total;
}

}  // namespace

TEST_CASE("colbert_maxsim oracle: each query token keeps its best match; padding never matches") {
  // All 3 tokens: token (1, 0) best 2 (second passage token), token (0, 1) best 3 (third): 5.
  CHECK(score(3) == 5.0);
  // Length 2: the third token is padding; token (0, 1) best is now 1: 2 + 1.
  CHECK(score(2) == 3.0);
  // Length 1: only (1, 1): 1 + 1.
  CHECK(score(1) == 2.0);
}

TEST_CASE("colbert_maxsim oracle: on generated cases, masking only lowers a score") {
  const tasks::Task& task = oracle_test::repository_task("recsys/colbert_maxsim");
  const Tensors t = oracle_test::run_case(task, oracle_test::case_named(task, "h_padding_decides"));
  const auto& lens = t.at("doc_lens").values;
  const auto& scores = t.at("scores").values;
  std::size_t lowered = 0;
  for (std::int64_t n = 0; n < 77; ++n) {
    const auto len = static_cast<std::int64_t>(lens[n]);
    CHECK(scores[n] == doctest::Approx(maxsim(t, n, len, 32, 180, 128)).epsilon(1e-12));
    const double unmasked = maxsim(t, n, 180, 32, 180, 128);
    CHECK(scores[n] <= unmasked + 1e-12);
    lowered += scores[n] < unmasked - 1e-9 ? 1 : 0;
  }
  // The padding rows hold values as large as the real ones: ignoring doc_lens changes most scores.
  CHECK(lowered > 50);
  const Tensors full =
      oracle_test::run_case(task, oracle_test::case_named(task, "h_full_length_one_doc"));
  CHECK(full.at("scores").values[0] ==
        doctest::Approx(maxsim(full, 0, 180, 32, 180, 128)).epsilon(1e-12));
}
