// The recsys/embedding_bag oracle on hand-computed bags: table offsets, repeated ids, the
// output's sample-major layout.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

struct Call {
  std::int64_t batch, tables, rows, dim, pooling;
};

Tensors run(const Call& c, std::vector<double> weights, std::vector<double> indices) {
  return oracle_test::call_oracle(
      "recsys/embedding_bag",
      {{"batch", c.batch},
       {"num_tables", c.tables},
       {"num_rows", c.rows},
       {"dim", c.dim},
       {"pooling", c.pooling}},
      Tensors{
          {"weights", {core::DType::kF16, {c.tables, c.rows, c.dim}, std::move(weights)}},
          {"indices", {core::DType::kI64, {c.tables, c.batch, c.pooling}, std::move(indices)}},
          {"out",
           {core::DType::kF32,
            {c.batch, c.tables, c.dim},
            std::vector<double>(c.batch * c.tables * c.dim, 0.0)}},
      });
}

}  // namespace

TEST_CASE("embedding_bag oracle: sums each bag's rows, tables side by side per sample") {
  // 2 tables of 3 rows x 2, 2 samples, 2 ids per bag. Row r of table t = (10 t + r, -r).
  const Call c{2, 2, 3, 2, 2};
  std::vector<double> weights;
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < 3; ++r) weights.insert(weights.end(), {10.0 * t + r, -1.0 * r});
  }
  // indices[t, b, l]: table 0: sample 0 {0, 2}, sample 1 {1, 1}; table 1: {2, 2}, {0, 1}.
  const auto out = run(c, weights, {0, 2, 1, 1, 2, 2, 0, 1}).at("out").values;
  // out[b, t, :]
  const std::vector<double> want = {
      2,  -2,  // b0 t0: rows 0 + 2 of table 0
      24, -4,  // b0 t1: rows 2 + 2 of table 1 (a repeated id counts twice)
      2,  -2,  // b1 t0: rows 1 + 1
      21, -1,  // b1 t1: rows 0 + 1 of table 1 (10 + 11)
  };
  REQUIRE(out.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(out[i] == want[i]);
}

TEST_CASE("embedding_bag oracle: refuses an id outside its table") {
  Tensors tensors{
      {"weights", {core::DType::kF16, {1, 2, 4}, std::vector<double>(8, 1.0)}},
      {"indices", {core::DType::kI64, {1, 1, 1}, {2.0}}},
      {"out", {core::DType::kF32, {1, 1, 4}, std::vector<double>(4, 0.0)}},
  };
  const auto status = oracle_test::oracle_status(
      "recsys/embedding_bag",
      {{"batch", 1}, {"num_tables", 1}, {"num_rows", 2}, {"dim", 4}, {"pooling", 1}}, tensors);
  CHECK_FALSE(status.ok());
}

TEST_CASE("embedding_bag oracle: on a generated case, matches a direct sum and the hot-row bags") {
  // h_hot_rows draws every id among 4 rows: each 27-id bag repeats ids. Recompute one bag by
  // counting how often each row occurs: the same sum, formed another way.
  const tasks::Task& task = oracle_test::repository_task("recsys/embedding_bag");
  const tasks::Case& c = oracle_test::case_named(task, "h_hot_rows");
  const Tensors tensors = oracle_test::run_case(task, c);
  const auto& weights = tensors.at("weights").values;
  const auto& indices = tensors.at("indices").values;
  const auto& out = tensors.at("out").values;
  const std::int64_t batch = 97, tables = 2, rows = 5000, dim = 128, pooling = 27;
  std::size_t wrong = 0;
  for (std::int64_t t = 0; t < tables; ++t) {
    for (std::int64_t b = 0; b < batch; ++b) {
      std::vector<int> count(4, 0);
      for (std::int64_t l = 0; l < pooling; ++l) {
        const auto id = static_cast<std::int64_t>(indices[(t * batch + b) * pooling + l]);
        REQUIRE(id >= 0);
        REQUIRE(id < 4);
        ++count[id];
      }
      for (std::int64_t d = 0; d < dim; ++d) {
        double want = 0.0;
        for (int r = 0; r < 4; ++r) want += count[r] * weights[(t * rows + r) * dim + d];
        wrong += std::abs(out[(b * tables + t) * dim + d] - want) <= 1e-12 ? 0 : 1;
      }
    }
  }
  CHECK(wrong == 0);
}
