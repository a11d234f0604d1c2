// The recsys/csr_spmm oracle on a hand-computed 3-node graph (an empty row, a repeated column)
// and on its task's cases (degree law of the inputs, rows summed as the definition says).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

using oracle_test::Tensors;

TEST_CASE("csr_spmm oracle: rows of a 3-node graph, an empty row and a repeated column") {
  // Row 0: 0.5 * emb[2] + 0.25 * emb[1]; row 1: empty; row 2: 2 * emb[0] + 1 * emb[0].
  const Tensors out = oracle_test::call_oracle(
      "recsys/csr_spmm", {{"num_nodes", 3}, {"num_offsets", 4}, {"nnz", 4}, {"dim", 2}},
      Tensors{
          {"row_ptr", {core::DType::kI32, {4}, {0, 2, 2, 4}}},
          {"col_idx", {core::DType::kI32, {4}, {2, 1, 0, 0}}},
          {"values", {core::DType::kF32, {4}, {0.5, 0.25, 2, 1}}},
          {"emb", {core::DType::kF32, {3, 2}, {1, -1, 4, 8, 10, 20}}},
          {"out", {core::DType::kF32, {3, 2}, std::vector<double>(6)}},
      },
      {});
  CHECK(out.at("out").values == std::vector<double>{6, 12, 0, 0, 3, -3});
}

TEST_CASE("csr_spmm oracle: a bad row_ptr or column is refused") {
  Tensors bad{
      {"row_ptr", {core::DType::kI32, {3}, {0, 2, 1}}},
      {"col_idx", {core::DType::kI32, {1}, {0}}},
      {"values", {core::DType::kF32, {1}, {1}}},
      {"emb", {core::DType::kF32, {2, 2}, {1, 2, 3, 4}}},
      {"out", {core::DType::kF32, {2, 2}, std::vector<double>(4)}},
  };
  const std::map<std::string, std::int64_t> symbols{
      {"num_nodes", 2}, {"num_offsets", 3}, {"nnz", 1}, {"dim", 2}};
  CHECK_FALSE(oracle_test::oracle_status("recsys/csr_spmm", symbols, bad, {}).ok());
  bad.at("row_ptr").values = {0, 1, 1};
  bad.at("col_idx").values = {2};
  CHECK_FALSE(oracle_test::oracle_status("recsys/csr_spmm", symbols, bad, {}).ok());
  bad.at("col_idx").values = {1};
  CHECK(oracle_test::oracle_status("recsys/csr_spmm", symbols, bad, {}).ok());
}

TEST_CASE("csr_spmm: every case's offsets span nnz with power-law degrees; sizes agree") {
  const tasks::Task& task = oracle_test::repository_task("recsys/csr_spmm");
  for (const auto& c : task.cases) {
    CAPTURE(c.name);
    CHECK(c.symbols.at("num_offsets") == c.symbols.at("num_nodes") + 1);
    const auto& offsets = c.values.at("row_ptr");
    CHECK(offsets.kind == tasks::GeneratorKind::kPowerLawOffsets);
    CHECK(offsets.rows == c.symbols.at("num_nodes"));
    CHECK(offsets.max == c.symbols.at("nnz"));
    const auto& columns = c.values.at("col_idx");
    if (columns.kind == tasks::GeneratorKind::kUniform) {
      CHECK(columns.hi == static_cast<double>(c.symbols.at("num_nodes")));
    }
    CHECK(c.symbols.at("dim") % 2 == 0);
    CHECK(c.symbols.at("dim") <= 256);
  }
  // On a generated case the oracle's row sums match a direct recomputation of a few rows and
  // the hub is far above the mean degree.
  const tasks::Case& c = oracle_test::case_named(task, "h_hub_heavy");
  const Tensors t = oracle_test::run_case(task, c);
  const auto& row_ptr = t.at("row_ptr").values;
  double largest = 0.0;
  std::int64_t empty = 0;
  for (std::size_t i = 0; i + 1 < row_ptr.size(); ++i) {
    largest = std::max(largest, row_ptr[i + 1] - row_ptr[i]);
    empty += row_ptr[i + 1] == row_ptr[i] ? 1 : 0;
  }
  CHECK(largest > 50000);
  CHECK(empty > 1000);
  const std::int64_t dim = c.symbols.at("dim");
  for (const std::int64_t row : {0, 1, 7777, 19999}) {
    for (std::int64_t d = 0; d < dim; d += 13) {
      double want = 0.0;
      for (auto p = static_cast<std::int64_t>(row_ptr[row]); p < row_ptr[row + 1]; ++p) {
        want += t.at("values").values[p] *
                t.at("emb").values[static_cast<std::int64_t>(t.at("col_idx").values[p]) * dim + d];
      }
      CHECK(t.at("out").values[row * dim + d] == doctest::Approx(want).epsilon(1e-12));
    }
  }
}
