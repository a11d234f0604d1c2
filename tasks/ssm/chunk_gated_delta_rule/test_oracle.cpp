// The ssm/chunk_gated_delta_rule oracle: a hand-computed token, agreement with the decode-step
// oracle (ssm/fused_recurrent_gated_delta_rule) applied token by token over a varlen batch, and
// the malformed batches it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "ssm/chunk_gated_delta_rule";

struct Batch {
  std::int64_t k_heads, v_heads, kdim, vdim;
  std::vector<double> q, k, v, g, beta, state, cu;
  double scale = 1.0;
};

std::int64_t seqs_of(const Batch& b) { return static_cast<std::int64_t>(b.cu.size()) - 1; }
std::int64_t tokens_of(const Batch& b) { return static_cast<std::int64_t>(b.g.size()) / b.v_heads; }

oracle_test::Tensors tensors_of(const Batch& b) {
  const std::int64_t seqs = seqs_of(b), tokens = tokens_of(b);
  const std::vector<std::int64_t> state_shape = {seqs, b.v_heads, b.kdim, b.vdim};
  return {
      {"q", {core::DType::kBF16, {tokens, b.k_heads, b.kdim}, b.q}},
      {"k", {core::DType::kBF16, {tokens, b.k_heads, b.kdim}, b.k}},
      {"v", {core::DType::kBF16, {tokens, b.v_heads, b.vdim}, b.v}},
      {"g", {core::DType::kF32, {tokens, b.v_heads}, b.g}},
      {"beta", {core::DType::kBF16, {tokens, b.v_heads}, b.beta}},
      {"initial_state", {core::DType::kF32, state_shape, b.state}},
      {"cu_seqlens", {core::DType::kI32, {seqs + 1}, b.cu}},
      {"o",
       {core::DType::kBF16,
        {tokens, b.v_heads, b.vdim},
        std::vector<double>(static_cast<std::size_t>(tokens * b.v_heads * b.vdim), 0.0)}},
      {"final_state", {core::DType::kF32, state_shape, std::vector<double>(b.state.size(), 0.0)}},
  };
}

std::map<std::string, std::int64_t> symbols_of(const Batch& b) {
  return {
      {"num_tokens", tokens_of(b)}, {"num_seqs", seqs_of(b)},   {"num_seq_bounds", seqs_of(b) + 1},
      {"num_k_heads", b.k_heads},   {"num_v_heads", b.v_heads}, {"head_k_dim", b.kdim},
      {"head_v_dim", b.vdim}};
}

oracle_test::Tensors run(const Batch& b) {
  return oracle_test::call_oracle(kTask, symbols_of(b), tensors_of(b), {{"scale", b.scale}});
}

bool accepts(const Batch& b) {
  auto tensors = tensors_of(b);
  return oracle_test::oracle_status(kTask, symbols_of(b), tensors, {{"scale", b.scale}}).ok();
}

// A deterministic value in [lo, hi) for index i (no generator needed for a small batch).
double spread(std::size_t i, double lo, double hi) {
  return lo + (hi - lo) * std::fmod(0.6180339887498949 * static_cast<double>(i + 1), 1.0);
}

// Two key heads, four value heads, K = 4, V = 3; sequences of 3, 1 and 2 tokens.
Batch small_batch() {
  Batch b{2, 4, 4, 3, {}, {}, {}, {}, {}, {}, {0, 3, 4, 6}};
  b.scale = 0.5;
  const std::size_t tokens = 6;
  for (std::size_t i = 0; i < tokens * 2 * 4; ++i) {
    b.q.push_back(spread(i, -2, 2));
    b.k.push_back(spread(i + 1000, -2, 2));
  }
  for (std::size_t i = 0; i < tokens * 4 * 3; ++i) b.v.push_back(spread(i + 2000, -1, 1));
  for (std::size_t i = 0; i < tokens * 4; ++i) {
    b.g.push_back(spread(i + 3000, -1, -0.01));
    b.beta.push_back(spread(i + 4000, 0.1, 0.9));
  }
  for (std::size_t i = 0; i < 3 * 4 * 4 * 3; ++i) b.state.push_back(spread(i + 5000, -0.5, 0.5));
  return b;
}

}  // namespace

TEST_CASE("chunk_gated_delta_rule oracle: one hand-computed token") {
  // K = V = 2, one head, q = (0, 3) and k = (4, 0) normalised (with 1e-6 under the root), scale
  // 1, S = [[1, 2], [3, 4]] halved by exp(g), beta 1/2, v = (2, 2).
  Batch b{1, 1, 2, 2, {0, 3}, {4, 0}, {2, 2}, {std::log(0.5)}, {0.5}, {1, 2, 3, 4}, {0, 1}};
  const auto result = run(b);
  const double kn = 4.0 / std::sqrt(16.0 + 1e-6), qn = 3.0 / std::sqrt(9.0 + 1e-6);
  const double u0 = 0.5 * (2 - kn * 0.5), u1 = 0.5 * (2 - kn * 1.0);
  const auto& state = result.at("final_state").values;
  CHECK(state[0] == doctest::Approx(0.5 + kn * u0).epsilon(1e-14));
  CHECK(state[1] == doctest::Approx(1.0 + kn * u1).epsilon(1e-14));
  CHECK(state[2] == doctest::Approx(1.5).epsilon(1e-14));
  CHECK(state[3] == doctest::Approx(2.0).epsilon(1e-14));
  CHECK(result.at("o").values[0] == doctest::Approx(qn * 1.5).epsilon(1e-14));
  CHECK(result.at("o").values[1] == doctest::Approx(qn * 2.0).epsilon(1e-14));
}

TEST_CASE("chunk_gated_delta_rule oracle: equals the decode step applied token by token") {
  const Batch b = small_batch();
  const auto result = run(b);
  const std::string step_task = "ssm/fused_recurrent_gated_delta_rule";
  const std::size_t kq = 2 * 4, vrow = 4 * 3, heads = 4, line = 4 * 4 * 3;
  for (std::size_t n = 0; n + 1 < b.cu.size(); ++n) {
    std::vector<double> state(b.state.begin() + static_cast<std::ptrdiff_t>(n * line),
                              b.state.begin() + static_cast<std::ptrdiff_t>((n + 1) * line));
    for (auto t = static_cast<std::size_t>(b.cu[n]); t < static_cast<std::size_t>(b.cu[n + 1]);
         ++t) {
      auto at = [](const std::vector<double>& x, std::size_t begin, std::size_t count) {
        return std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>(begin),
                                   x.begin() + static_cast<std::ptrdiff_t>(begin + count));
      };
      oracle_test::Tensors step = {
          {"q", {core::DType::kBF16, {1, 2, 4}, at(b.q, t * kq, kq)}},
          {"k", {core::DType::kBF16, {1, 2, 4}, at(b.k, t * kq, kq)}},
          {"v", {core::DType::kBF16, {1, 4, 3}, at(b.v, t * vrow, vrow)}},
          {"g", {core::DType::kF32, {1, 4}, at(b.g, t * heads, heads)}},
          {"beta", {core::DType::kBF16, {1, 4}, at(b.beta, t * heads, heads)}},
          {"initial_state", {core::DType::kF32, {1, 4, 4, 3}, state}},
          {"ssm_state_indices", {core::DType::kI32, {1}, {0}}},
          {"o", {core::DType::kBF16, {1, 4, 3}, std::vector<double>(vrow, 0.0)}},
      };
      const auto out =
          oracle_test::call_oracle(step_task,
                                   {{"num_seqs", 1},
                                    {"num_k_heads", 2},
                                    {"num_v_heads", 4},
                                    {"head_k_dim", 4},
                                    {"head_v_dim", 3},
                                    {"num_cache_lines", 1}},
                                   step, {{"scale", b.scale}, {"use_qk_l2norm_in_kernel", 1.0}});
      state = out.at("initial_state").values;
      for (std::size_t j = 0; j < vrow; ++j) {
        CHECK(result.at("o").values[t * vrow + j] ==
              doctest::Approx(out.at("o").values[j]).epsilon(1e-13));
      }
    }
    for (std::size_t j = 0; j < line; ++j) {
      CHECK(result.at("final_state").values[n * line + j] ==
            doctest::Approx(state[j]).epsilon(1e-13));
    }
  }
}

TEST_CASE("chunk_gated_delta_rule oracle: refuses malformed cu_seqlens and ungrouped heads") {
  CHECK(accepts(small_batch()));
  Batch shifted = small_batch();
  shifted.cu = {1, 3, 4, 6};
  CHECK_FALSE(accepts(shifted));
  Batch empty = small_batch();
  empty.cu = {0, 3, 3, 6};
  CHECK_FALSE(accepts(empty));
  Batch short_end = small_batch();
  short_end.cu = {0, 3, 4, 5};
  CHECK_FALSE(accepts(short_end));
  Batch three = small_batch();
  three.k_heads = 3;
  three.q.resize(6 * 3 * 4);
  three.k.resize(6 * 3 * 4);
  CHECK_FALSE(accepts(three));
}

TEST_CASE("chunk_gated_delta_rule: every case fits the kernel's stated guarantees") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const auto& c : task.cases) {
    const auto& cu = c.values.at("cu_seqlens");
    REQUIRE_MESSAGE(cu.kind == tasks::GeneratorKind::kList, c.name);
    REQUIRE_MESSAGE(static_cast<std::int64_t>(cu.list.size()) == c.symbols.at("num_seq_bounds"),
                    c.name);
    CHECK_MESSAGE(c.symbols.at("num_seq_bounds") == c.symbols.at("num_seqs") + 1, c.name);
    CHECK_MESSAGE(cu.list.front() == 0.0, c.name);
    CHECK_MESSAGE(cu.list.back() == static_cast<double>(c.symbols.at("num_tokens")), c.name);
    for (std::size_t i = 1; i < cu.list.size(); ++i)
      CHECK_MESSAGE(cu.list[i] > cu.list[i - 1], c.name);
    CHECK_MESSAGE(c.symbols.at("num_v_heads") % c.symbols.at("num_k_heads") == 0, c.name);
    CHECK_MESSAGE(c.symbols.at("head_k_dim") == 128, c.name);
    CHECK_MESSAGE(c.symbols.at("head_v_dim") == 128, c.name);
  }
}

TEST_CASE("chunk_gated_delta_rule oracle: strong decay stays finite") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, "h_strong_decay"));
  for (const double v : tensors.at("o").values) REQUIRE(std::isfinite(v));
  for (const double v : tensors.at("final_state").values) REQUIRE(std::isfinite(v));
}
