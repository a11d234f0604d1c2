// The science/hash_grid_encode oracle on hand-computed lookups (a dense level, a hashed level),
// the blend's bounds on a generated case, and the cases' level scales kept clear of integers.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

// One level of `size` entries, entry i = (i, -i), base resolution `base`, one point.
std::vector<double> encode_one(std::int64_t size, double base, std::vector<double> position) {
  std::vector<double> table;
  for (std::int64_t i = 0; i < size; ++i) table.insert(table.end(), {double(i), -double(i)});
  return oracle_test::call_oracle(
             "science/hash_grid_encode",
             {{"num_points", 1}, {"num_levels", 1}, {"table_size", size}},
             Tensors{
                 {"positions", {core::DType::kF32, {1, 3}, std::move(position)}},
                 {"table", {core::DType::kF16, {1, size, 2}, std::move(table)}},
                 {"out", {core::DType::kF16, {1, 1, 2}, {0.0, 0.0}}},
             },
             {{"base_resolution", base}, {"per_level_scale", 1.5}})
      .at("out")
      .values;
}

}  // namespace

TEST_CASE("hash_grid_encode oracle: a dense level blends the cell's corners trilinearly") {
  // Base 2: scale 1, R = 2, 2^3 = 8 entries: dense. x = (0.25, 0.5, 0.75): p = (0.75, 1, 1.25),
  // cell (0, 1, 1), fractions (0.75, 0, 0.25). Corners with y = 1 only (f_y = 0): indices
  // x + 2 y + 4 z mod 8 = 6, 7, 10 -> 2, 11 -> 3 with weights 0.1875, 0.5625, 0.0625, 0.1875.
  const auto out = encode_one(8, 2.0, {0.25, 0.5, 0.75});
  const double want = 6 * 0.1875 + 7 * 0.5625 + 2 * 0.0625 + 3 * 0.1875;
  CHECK(want == 5.75);
  CHECK(out[0] == doctest::Approx(want).epsilon(1e-12));
  CHECK(out[1] == doctest::Approx(-want).epsilon(1e-12));
}

TEST_CASE("hash_grid_encode oracle: a hashed level reads the corner's spatial hash") {
  // Base 2 with 4 entries: R^3 = 8 > 4, hashed. x = (0.5, 0.5, 0.5): p = 1 exactly, every
  // fraction 0, so the corner (1, 1, 1) alone, at 1 ^ 2654435761 ^ 805459861 (mod 2^32) mod 4.
  const std::uint32_t hash = 1u ^ 2654435761u ^ 805459861u;
  const auto out = encode_one(4, 2.0, {0.5, 0.5, 0.5});
  CHECK(out[0] == static_cast<double>(hash % 4u));
  CHECK(out[1] == -static_cast<double>(hash % 4u));
}

TEST_CASE("hash_grid_encode oracle: on a generated case each feature lies within the table") {
  // Weights are non-negative and sum to 1, so every output lies within the table's range.
  const tasks::Task& task = oracle_test::repository_task("science/hash_grid_encode");
  const Tensors tensors =
      oracle_test::run_case(task, oracle_test::case_named(task, "h_all_hashed"));
  const auto& out = tensors.at("out").values;
  double lo = 0.0, hi = 0.0;
  for (const double v : tensors.at("table").values) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  std::size_t outside = 0;
  std::size_t zero = 0;
  for (const double v : out) {
    outside += (v < lo - 1e-12 || v > hi + 1e-12) ? 1 : 0;
    zero += v == 0.0 ? 1 : 0;
  }
  CHECK(out.size() == 777u * 16 * 2);
  CHECK(outside == 0);
  CHECK(zero < out.size() / 100);
}

TEST_CASE("hash_grid_encode: every case's dense levels have scales clear of integers") {
  // R_l = ceil(scale_l) + 1 indexes a dense level; an fp32 scale_l within rounding of an integer
  // could give another R_l than the float64 oracle. Every case keeps dense levels' scales either
  // exact integers of a power-of-two per_level_scale (exact in fp32 too) or 1e-3 from one.
  const tasks::Task& task = oracle_test::repository_task("science/hash_grid_encode");
  for (const auto& c : task.cases) {
    const double base = c.scalars.at("base_resolution");
    const double growth = c.scalars.at("per_level_scale");
    const bool power_of_two = std::exp2(std::round(std::log2(growth))) == growth;
    for (std::int64_t l = 0; l < c.symbols.at("num_levels"); ++l) {
      const double scale = base * std::pow(growth, static_cast<double>(l)) - 1.0;
      const double resolution = std::ceil(scale) + 1.0;
      if (resolution * resolution * resolution > static_cast<double>(c.symbols.at("table_size"))) {
        continue;
      }
      const bool integral = scale == std::round(scale);
      INFO(c.name << " level " << l << " scale " << scale);
      CHECK((l == 0 || (integral && power_of_two) || std::abs(scale - std::round(scale)) > 1e-3));
    }
  }
}
