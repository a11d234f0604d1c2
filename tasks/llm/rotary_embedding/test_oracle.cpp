// The llm/rotary_embedding oracle on hand-rotated heads of both styles, on its own task's
// generated cases, and against the stories260K calls recorded by tasks/capture.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "tasks/captured.hpp"
#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::case_named;
using oracle_test::Tensors;

const tasks::Task& rotary_task() { return oracle_test::repository_task("llm/rotary_embedding"); }

// Runs the oracle on explicit tensors; shapes give the symbols.
void run(Tensors& tensors, bool is_neox) {
  const auto& query = tensors.at("query").shape;
  const auto status =
      oracle_test::oracle_status("llm/rotary_embedding",
                                 {{"num_tokens", query[0]},
                                  {"num_heads", query[1]},
                                  {"num_kv_heads", tensors.at("key").shape[1]},
                                  {"head_size", query[2]},
                                  {"max_position", tensors.at("cos_sin_cache").shape[0]}},
                                 tensors, {{"is_neox", is_neox ? 1.0 : 0.0}});
  REQUIRE_MESSAGE(status.ok(), status.error().message);
}

// One token at position 1 of a two-row cache whose row 1 turns frequency 0 by 90 degrees and
// frequency 1 by 180 degrees (row 0 is the identity). head_size 4: one query, one key head.
Tensors quarter_and_half_turn() {
  return Tensors{
      {"positions", {core::DType::kI64, {1}, {1.0}}},
      {"query", {core::DType::kBF16, {1, 1, 4}, {1.0, 2.0, 3.0, 4.0}}},
      {"key", {core::DType::kBF16, {1, 1, 4}, {5.0, 6.0, 7.0, 8.0}}},
      {"cos_sin_cache",
       {core::DType::kBF16, {2, 4}, {1.0, 1.0, 0.0, 0.0, /* row 1 */ 0.0, -1.0, 1.0, 0.0}}},
  };
}

}  // namespace

TEST_CASE("rotary_embedding oracle: NeoX style turns the pairs (k, half + k) of every head") {
  // Pairs (q0, q2) = (1, 3) by 90 degrees -> (-3, 1); (q1, q3) = (2, 4) by 180 -> (-2, -4).
  Tensors t = quarter_and_half_turn();
  run(t, true);
  CHECK(t["query"].values == std::vector<double>{-3.0, -2.0, 1.0, -4.0});
  // Key heads too: (5, 7) -> (-7, 5); (6, 8) -> (-6, -8).
  CHECK(t["key"].values == std::vector<double>{-7.0, -6.0, 5.0, -8.0});
}

TEST_CASE("rotary_embedding oracle: GPT-J style turns the interleaved pairs (2k, 2k + 1)") {
  // Pair 0 = (1, 2) by 90 degrees -> (-2, 1); pair 1 = (3, 4) by 180 -> (-3, -4).
  Tensors t = quarter_and_half_turn();
  run(t, false);
  CHECK(t["query"].values == std::vector<double>{-2.0, 1.0, -3.0, -4.0});
  CHECK(t["key"].values == std::vector<double>{-6.0, 5.0, -7.0, -8.0});
}

TEST_CASE("rotary_embedding oracle: each token reads its own position's row") {
  // Token 0 at position 1 (turned), token 1 at position 0 (identity), two heads each.
  Tensors t = quarter_and_half_turn();
  t["positions"].values = {1.0, 0.0};
  t["query"] = {core::DType::kBF16, {2, 2, 4}, {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}};
  t["key"] = {core::DType::kBF16, {2, 1, 4}, {5, 6, 7, 8, 5, 6, 7, 8}};
  run(t, true);
  CHECK(t["query"].values ==
        std::vector<double>{-3, -2, 1, -4, -3, -2, 1, -4, 1, 2, 3, 4, 1, 2, 3, 4});
  CHECK(t["key"].values == std::vector<double>{-7, -6, 5, -8, 5, 6, 7, 8});
}

TEST_CASE("rotary_embedding oracle: position 0 of the generated cache is the identity") {
  // cos(0) = 1 and sin(0) = 0 exactly, in bf16 too: both styles leave every value as it was.
  const tasks::Task& task = rotary_task();
  for (const char* name : {"h_tokens_7", "h_head_72_gptj"}) {
    CAPTURE(name);
    tasks::Case c = case_named(task, name);
    tasks::GeneratorSpec zeros;
    zeros.kind = tasks::GeneratorKind::kZeros;
    c.values["positions"] = zeros;
    const std::uint64_t seed = tasks::case_seed(c, 1);
    const Tensors tensors = oracle_test::run_case(task, c);
    for (const auto& spec : task.tensors) {
      if (spec.name != "query" && spec.name != "key") continue;
      auto before = tasks::generate_tensor(c, spec, seed, 0);
      REQUIRE(before.ok());
      const auto& after = tensors.at(spec.name).values;
      CHECK(tasks::decode_values(spec.dtype, before->data(), after.size()) == after);
    }
  }
}

TEST_CASE("rotary_embedding oracle: every pair keeps its length, scaled by cos^2 + sin^2") {
  // A rotation preserves |(x, y)|; the bf16 cache makes cos^2 + sin^2 differ from 1 by a few
  // 2^-9, so the length is checked against that factor. Wrong pairing or a wrong row fails.
  const tasks::Task& task = rotary_task();
  for (const char* name : {"h_tokens_7", "h_head_72_gptj", "h_head_8_neox"}) {
    CAPTURE(name);
    const tasks::Case& c = case_named(task, name);
    const std::uint64_t seed = tasks::case_seed(c, 1);
    const Tensors tensors = oracle_test::run_case(task, c);
    const std::int64_t head_size = c.symbols.at("head_size");
    const std::int64_t half = head_size / 2;
    const bool is_neox = c.scalars.at("is_neox") != 0.0;
    const auto& positions = tensors.at("positions").values;
    const auto& cache = tensors.at("cos_sin_cache").values;
    std::size_t checked = 0;
    for (const auto& spec : task.tensors) {
      if (spec.name != "query" && spec.name != "key") continue;
      auto before_bytes = tasks::generate_tensor(c, spec, seed, 0);
      REQUIRE(before_bytes.ok());
      const auto& after = tensors.at(spec.name).values;
      const auto before = tasks::decode_values(spec.dtype, before_bytes->data(), after.size());
      const std::int64_t heads = tensors.at(spec.name).shape[1];
      for (std::int64_t t = 0; t < c.symbols.at("num_tokens"); ++t) {
        const double* row = cache.data() + static_cast<std::int64_t>(positions[t]) * head_size;
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t base = (t * heads + h) * head_size;
          for (std::int64_t k = 0; k < half; ++k) {
            const std::int64_t xi = base + (is_neox ? k : 2 * k);
            const std::int64_t yi = base + (is_neox ? half + k : 2 * k + 1);
            const double scale = row[k] * row[k] + row[half + k] * row[half + k];
            const double length2 = before[xi] * before[xi] + before[yi] * before[yi];
            CHECK(after[xi] * after[xi] + after[yi] * after[yi] ==
                  doctest::Approx(length2 * scale).epsilon(1e-12));
            ++checked;
          }
        }
      }
    }
    CHECK(checked > 100);
  }
}

TEST_CASE("rotary_embedding oracle: reproduces every recorded stories260K call within tolerance") {
  // tasks/capture recorded query and key before and after each call; the oracle, run on the
  // recorded inputs, must land within the task tolerance of the recorded outputs.
  const tasks::TensorSpec* query = rotary_task().find_tensor("query");
  REQUIRE(query != nullptr);
  REQUIRE(query->tolerance.has_value());
  const tasks::Tolerance& tolerance = *query->tolerance;
  std::size_t compared = 0;
  oracle_test::for_each_recorded_call(
      "rotary_embedding", [&](const oracle_test::RecordedCall& call) {
        const tasks::CapturedCase& rec = call.record();
        const auto head_size = rec.scalars.at("head_size").get<std::int64_t>();
        Tensors t;
        for (const char* arg : {"positions", "query", "key", "cos_sin_cache"}) {
          const tasks::CapturedTensor* recorded = call.group.tensor(call.name, arg);
          REQUIRE(recorded != nullptr);
          t[arg] = oracle_test::decoded(*recorded);
        }
        // Recorded 2-D [tokens, heads * head_size]; the task declares [tokens, heads, head_size].
        for (const char* arg : {"query", "key"}) {
          auto& shape = t[arg].shape;
          shape = {shape[0], shape[1] / head_size, head_size};
        }
        run(t, rec.scalars.at("is_neox").get<bool>());
        for (const char* arg : {"query", "key"}) {
          const tasks::CapturedTensor* after = call.group.tensor(call.name, arg, true);
          REQUIRE(after != nullptr);
          const auto want = oracle_test::decoded(*after).values;
          REQUIRE(want.size() == t[arg].values.size());
          std::size_t bad = 0;
          for (std::size_t i = 0; i < want.size(); ++i) {
            bad += oracle_test::within(want[i], t[arg].values[i], tolerance) ? 0 : 1;
          }
          CHECK(bad == 0);
          compared += want.size();
        }
      });
  CHECK(compared > 5000);
}

TEST_CASE(
    "rotary_embedding oracle: the task's captured cases are the recordings, shapes included") {
  // The hidden captured cases read the recorded inputs through the manifest (generator
  // "captured"); their symbols must give exactly the recorded sizes, and the oracle's result
  // must match the recorded outputs.
  const tasks::Task& task = rotary_task();
  oracle_test::check_captured_cases(task, "rotary_embedding", {}, false);
  oracle_test::compare_captured_cases(task);
}

TEST_CASE("rotary_embedding: every generated case's cache fits its head and its positions") {
  // A generator cannot see the symbols: each case must give rope_cache the case's head_size and
  // draw positions below max_position, else the cache is the wrong table or out of reach.
  for (const auto& c : rotary_task().cases) {
    CAPTURE(c.name);
    const auto& cache = c.values.at("cos_sin_cache");
    const auto& positions = c.values.at("positions");
    if (cache.kind == tasks::GeneratorKind::kRopeCache) {
      CHECK(cache.dim == c.symbols.at("head_size"));
    }
    const auto max_position = c.symbols.at("max_position");
    if (positions.kind == tasks::GeneratorKind::kPositions) CHECK(positions.max <= max_position);
    if (positions.kind == tasks::GeneratorKind::kUniform) {
      CHECK(positions.lo >= 0.0);
      CHECK(positions.hi <= static_cast<double>(max_position));
    }
    CHECK(c.symbols.at("head_size") % 2 == 0);
  }
}
