// The world/rope_3d oracle on hand-computed heads: the three axes, V-JEPA 2's per-element
// frequencies, the untouched tail and value slot.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

// One token of one head: qkv [1, 1, 3, 1, head_dim] (query, key, value) at grid id `id`.
std::vector<double> rotate_one(std::int64_t head_dim, std::int64_t grid_h, std::int64_t grid_w,
                               double id, std::vector<double> qkv) {
  return oracle_test::call_oracle(
             "world/rope_3d",
             {{"batch", 1},
              {"num_tokens", 1},
              {"num_heads", 1},
              {"head_dim", head_dim},
              {"grid_h", grid_h},
              {"grid_w", grid_w}},
             Tensors{
                 {"qkv", {core::DType::kBF16, {1, 1, 3, 1, head_dim}, std::move(qkv)}},
                 {"token_ids", {core::DType::kI64, {1, 1}, {id}}},
             })
      .at("qkv")
      .values;
}

}  // namespace

TEST_CASE("rope_3d oracle: head_dim 6 turns each pair by the frame, row and column index") {
  // s = 2, half = 1: one frequency (omega 1) per axis. Grid 2 x 3, id 11 = frame 1, row 1,
  // column 2.
  const std::vector<double> x = {1, 0, 0, 1, 1, 1};
  std::vector<double> qkv = x;
  qkv.insert(qkv.end(), x.begin(), x.end());
  qkv.insert(qkv.end(), {5, 6, 7, 8, 9, 10});
  const auto out = rotate_one(6, 2, 3, 11, qkv);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(2.0), s2 = std::sin(2.0);
  const std::vector<double> want = {c1, s1, -s1, c1, c2 - s2, c2 + s2};
  for (int slot = 0; slot < 2; ++slot) {
    for (int c = 0; c < 6; ++c) CHECK(out[slot * 6 + c] == doctest::Approx(want[c]).epsilon(1e-14));
  }
  for (int c = 0; c < 6; ++c) CHECK(out[12 + c] == 5 + c);  // the value slot is untouched
}

TEST_CASE("rope_3d oracle: the two elements of a pair take different frequencies, as V-JEPA 2") {
  // head_dim 12: s = 4, half = 2, frame axis holds elements 0..3 with j = 0, 1, 0, 1 (omega 1
  // and 10000^-1/2 = 0.01). Frame 3 (grid 1 x 1, id 3): element 0 turns by 3 rad, its partner
  // element 1 by 0.03 rad. A shared-angle RoPE would give x1 * cos 3 + x0 * sin 3.
  std::vector<double> qkv(36, 0.0);
  qkv[0] = 0.5;
  qkv[1] = 2.0;
  const auto out = rotate_one(12, 1, 1, 3, qkv);
  CHECK(out[0] == doctest::Approx(0.5 * std::cos(3.0) - 2.0 * std::sin(3.0)).epsilon(1e-14));
  CHECK(out[1] == doctest::Approx(2.0 * std::cos(0.03) + 0.5 * std::sin(0.03)).epsilon(1e-14));
  CHECK(out[1] == doctest::Approx(2.0140978).epsilon(1e-7));
  // Row and column are 0 (grid 1 x 1): the other axes stay put.
  for (int c = 2; c < 12; ++c) CHECK(out[c] == 0.0);
}

TEST_CASE("rope_3d oracle: elements past 3 s are left as they are; id 0 rotates nothing") {
  // head_dim 8: s = 2, elements 6 and 7 unrotated. Id 0: every position 0, every angle 0.
  std::vector<double> qkv(24);
  for (int i = 0; i < 24; ++i) qkv[i] = 0.25 * i - 3.0;
  const auto same = rotate_one(8, 4, 4, 0, qkv);
  for (int i = 0; i < 24; ++i) CHECK(same[i] == doctest::Approx(qkv[i]).epsilon(1e-15));
  // Id 63 in a 4 x 4 grid: frame 3, row 3, column 3; the tail (6, 7) of q and k still unchanged.
  const auto out = rotate_one(8, 4, 4, 63, qkv);
  for (int slot = 0; slot < 2; ++slot) {
    CHECK(out[slot * 8 + 6] == qkv[slot * 8 + 6]);
    CHECK(out[slot * 8 + 7] == qkv[slot * 8 + 7]);
    CHECK(out[slot * 8 + 0] != doctest::Approx(qkv[slot * 8 + 0]));
  }
}

TEST_CASE("rope_3d oracle: on a generated case the value slot is untouched and q, k are not") {
  const tasks::Task& task = oracle_test::repository_task("world/rope_3d");
  const tasks::Case& c = oracle_test::case_named(task, "h_wide_grid");
  const auto inputs = tasks::case_inputs(task, c, tasks::case_seed(c, 1));
  REQUIRE(inputs.ok());
  const std::vector<std::byte>& bytes = inputs->at("qkv");
  const auto before = tasks::decode_values(core::DType::kBF16, bytes.data(), bytes.size() / 2);
  const auto after = oracle_test::run_case(task, c).at("qkv").values;
  REQUIRE(after.size() == before.size());
  const std::int64_t row = 16 * 64;  // one slot of a token
  std::size_t changed_qk = 0;
  std::size_t changed_v = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const bool value_slot = (i / row) % 3 == 2;
    const bool changed = std::abs(after[i] - before[i]) > 1e-12;
    (value_slot ? changed_v : changed_qk) += changed ? 1 : 0;
  }
  CHECK(changed_v == 0);
  // Every token but the one at id 0 of each clip has a non-zero position on some axis.
  CHECK(changed_qk > after.size() / 2);
}
