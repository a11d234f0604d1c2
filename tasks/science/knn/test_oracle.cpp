// The science/knn oracle on a hand-computed cloud (ties ordered by index) and on its task's
// cases (neighbours distinct and ascending; all tied at distance 0 among repeated points).
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

using oracle_test::Tensors;

TEST_CASE("knn oracle: nearest points in ascending order, equal distances by index") {
  // Query at the origin; points at squared distances 4, 1, 1, 9, 0.25.
  const Tensors out = oracle_test::call_oracle(
      "science/knn", {{"batch", 1}, {"num_query", 1}, {"num_ref", 5}, {"k", 3}},
      Tensors{
          {"query", {core::DType::kF32, {1, 1, 3}, {0, 0, 0}}},
          {"ref", {core::DType::kF32, {1, 5, 3}, {2, 0, 0, 0, 1, 0, 0, 0, -1, 3, 0, 0, 0.5, 0, 0}}},
          {"dists", {core::DType::kF32, {1, 1, 3}, std::vector<double>(3)}},
          {"idx", {core::DType::kI64, {1, 1, 3}, std::vector<double>(3)}},
      },
      {});
  CHECK(out.at("idx").values == std::vector<double>{4, 1, 2});
  CHECK(out.at("dists").values == std::vector<double>{0.25, 1, 1});
}

TEST_CASE("knn oracle: on the cases, neighbours are distinct and ascending") {
  const tasks::Task& task = oracle_test::repository_task("science/knn");
  for (const char* name : {"h_odd_sizes", "h_ref_equals_k", "h_k5", "h_repeated_points"}) {
    const tasks::Case& c = oracle_test::case_named(task, name);
    const Tensors t = oracle_test::run_case(task, c);
    const std::int64_t k = c.symbols.at("k");
    const auto& idx = t.at("idx").values;
    const auto& dists = t.at("dists").values;
    std::size_t bad = 0;
    for (std::size_t row = 0; row * k < idx.size(); ++row) {
      std::set<double> seen;
      for (std::int64_t j = 0; j < k; ++j) {
        bad += seen.insert(idx[row * k + j]).second ? 0 : 1;
        if (j > 0) bad += dists[row * k + j] < dists[row * k + j - 1] ? 1 : 0;
      }
    }
    INFO(name);
    CHECK(bad == 0);
  }
  // The repeated-point case: 256 copies at distance 0, so the 16 neighbours all lie at 0.
  const Tensors tied =
      oracle_test::run_case(task, oracle_test::case_named(task, "h_repeated_points"));
  for (const double d : tied.at("dists").values) CHECK(d == 0.0);
}
