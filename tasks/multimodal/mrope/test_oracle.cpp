// The multimodal/mrope oracle on a hand-rotated head, against the 1-D rotary oracle section by
// section on its own task's generated cases, and the cases' layouts checked against their shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::case_named;
using oracle_test::Tensors;

const tasks::Task& mrope_task() { return oracle_test::repository_task("multimodal/mrope"); }

// The case's input value of `name` (before the call), decoded.
std::vector<double> input_values(const tasks::Task& task, const tasks::Case& c,
                                 const std::string& name) {
  const tasks::TensorSpec* spec = task.find_tensor(name);
  REQUIRE(spec != nullptr);
  auto bytes = tasks::generate_tensor(c, *spec, tasks::case_seed(c, 1), 0);
  REQUIRE(bytes.ok());
  return tasks::decode_values(spec->dtype, bytes->data(),
                              bytes->size() / core::dtype_size(spec->dtype));
}

}  // namespace

TEST_CASE("mrope oracle: each frequency turns by the angle of its section's position") {
  // head_size 6 (3 frequencies), sections [1, 1, 1]; token 0 at t = 1, h = 2, w = 0. Cache row
  // 0 is the identity, row 1 turns every frequency by 90 degrees, row 2 by 180.
  // Query pairs (q0, q3) = (1, 4) by 90 -> (-4, 1); (q1, q4) = (2, 5) by 180 -> (-2, -5);
  // (q2, q5) = (3, 6) unchanged.
  Tensors t{
      {"positions", {core::DType::kI64, {3, 1}, {1.0, 2.0, 0.0}}},
      {"query", {core::DType::kBF16, {1, 1, 6}, {1, 2, 3, 4, 5, 6}}},
      {"key", {core::DType::kBF16, {1, 1, 6}, {7, 8, 9, 10, 11, 12}}},
      {"cos_sin_cache",
       {core::DType::kBF16,
        {3, 6},
        {1, 1, 1, 0, 0, 0, /* row 1 */ 0, 0, 0, 1, 1, 1, /* row 2 */ -1, -1, -1, 0, 0, 0}}},
  };
  const auto status = oracle_test::oracle_status("multimodal/mrope",
                                                 {{"num_tokens", 1},
                                                  {"num_heads", 1},
                                                  {"num_kv_heads", 1},
                                                  {"head_size", 6},
                                                  {"max_position", 3},
                                                  {"mrope_section_t", 1},
                                                  {"mrope_section_h", 1},
                                                  {"mrope_section_w", 1}},
                                                 t);
  REQUIRE_MESSAGE(status.ok(), status.error().message);
  CHECK(t["query"].values == std::vector<double>{-4, -2, 3, 1, -5, 6});
  // Key: (7, 10) -> (-10, 7); (8, 11) -> (-8, -11); (9, 12) unchanged.
  CHECK(t["key"].values == std::vector<double>{-10, -8, 9, 7, -11, 12});
}

TEST_CASE("mrope oracle: refuses sections that do not split the half head") {
  Tensors t{
      {"positions", {core::DType::kI64, {3, 1}, {0.0, 0.0, 0.0}}},
      {"query", {core::DType::kBF16, {1, 1, 6}, {1, 2, 3, 4, 5, 6}}},
      {"key", {core::DType::kBF16, {1, 1, 6}, {1, 2, 3, 4, 5, 6}}},
      {"cos_sin_cache", {core::DType::kBF16, {1, 6}, {1, 1, 1, 0, 0, 0}}},
  };
  const auto status = oracle_test::oracle_status("multimodal/mrope",
                                                 {{"num_tokens", 1},
                                                  {"num_heads", 1},
                                                  {"num_kv_heads", 1},
                                                  {"head_size", 6},
                                                  {"max_position", 1},
                                                  {"mrope_section_t", 1},
                                                  {"mrope_section_h", 1},
                                                  {"mrope_section_w", 2}},
                                                 t);
  CHECK_FALSE(status.ok());
}

TEST_CASE("mrope oracle: every section equals the 1-D rotary embedding at that section's row") {
  // The 1-D oracle (llm/rotary_embedding, NeoX) run with positions = row i of the M-RoPE ids
  // must give exactly the M-RoPE result on the frequencies of section i; on text tokens (all
  // rows equal) the two agree everywhere.
  const tasks::Task& task = mrope_task();
  for (const char* name :
       {"h_sections_far_apart", "h_sections_24_20_20", "h_head_72_sections_6_12_18",
        "h_text_only_prefill", "prefill_image_1024_qwen2vl_7b"}) {
    CAPTURE(name);
    const tasks::Case& c = case_named(task, name);
    const Tensors got = oracle_test::run_case(task, c);
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const std::int64_t head_size = c.symbols.at("head_size");
    const std::int64_t half = head_size / 2;
    const std::int64_t sections[3] = {c.symbols.at("mrope_section_t"),
                                      c.symbols.at("mrope_section_h"),
                                      c.symbols.at("mrope_section_w")};
    const auto& positions = got.at("positions").values;
    std::int64_t first = 0;
    std::size_t compared = 0;
    for (std::int64_t row = 0; row < 3; ++row) {
      Tensors one{
          {"positions",
           {core::DType::kI64,
            {tokens},
            std::vector<double>(positions.begin() + row * tokens,
                                positions.begin() + (row + 1) * tokens)}},
          {"query", {core::DType::kBF16, got.at("query").shape, input_values(task, c, "query")}},
          {"key", {core::DType::kBF16, got.at("key").shape, input_values(task, c, "key")}},
          {"cos_sin_cache", got.at("cos_sin_cache")},
      };
      const auto status =
          oracle_test::oracle_status("llm/rotary_embedding",
                                     {{"num_tokens", tokens},
                                      {"num_heads", c.symbols.at("num_heads")},
                                      {"num_kv_heads", c.symbols.at("num_kv_heads")},
                                      {"head_size", head_size},
                                      {"max_position", c.symbols.at("max_position")}},
                                     one, {{"is_neox", 1.0}});
      REQUIRE_MESSAGE(status.ok(), status.error().message);
      for (const char* tensor : {"query", "key"}) {
        const auto& want = one.at(tensor).values;
        const auto& have = got.at(tensor).values;
        REQUIRE(want.size() == have.size());
        std::size_t bad = 0;
        for (std::size_t h = 0; h < want.size() / static_cast<std::size_t>(head_size); ++h) {
          for (std::int64_t k = first; k < first + sections[row]; ++k) {
            for (const std::int64_t i : {k, half + k}) {
              const std::size_t at =
                  h * static_cast<std::size_t>(head_size) + static_cast<std::size_t>(i);
              bad += want[at] == have[at] ? 0 : 1;
              ++compared;
            }
          }
        }
        CHECK(bad == 0);
      }
      first += sections[row];
    }
    CHECK(first == half);
    CHECK(compared == got.at("query").values.size() + got.at("key").values.size());
  }
}

TEST_CASE("mrope: every case's layout, cache and sections fit its shape") {
  // A generator cannot see the symbols: each case must give mrope_positions the case's token
  // count and a bound within the cache, and rope_cache the case's head_size.
  for (const auto& c : mrope_task().cases) {
    CAPTURE(c.name);
    const auto& cache = c.values.at("cos_sin_cache");
    REQUIRE(cache.kind == tasks::GeneratorKind::kRopeCache);
    CHECK(cache.dim == c.symbols.at("head_size"));
    const auto& positions = c.values.at("positions");
    REQUIRE(positions.kind == tasks::GeneratorKind::kMropePositions);
    CHECK(positions.mrope.tokens == c.symbols.at("num_tokens"));
    CHECK(positions.max <= c.symbols.at("max_position"));
    CHECK(c.symbols.at("mrope_section_t") + c.symbols.at("mrope_section_h") +
              c.symbols.at("mrope_section_w") ==
          c.symbols.at("head_size") / 2);
  }
}

TEST_CASE("mrope: prefill cases hold image tokens whose three ids differ; decode ids agree") {
  // What catches a kernel that reads one row for every section: the image and video cases,
  // visible ones included, have tokens whose height or width id is not the temporal id. Decode
  // cases are text positions (all three equal), and every id lies inside the cache.
  for (const auto& c : mrope_task().cases) {
    CAPTURE(c.name);
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const auto ids = input_values(mrope_task(), c, "positions");
    std::int64_t differing = 0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      const double tt = ids[static_cast<std::size_t>(t)];
      const double h = ids[static_cast<std::size_t>(tokens + t)];
      const double w = ids[static_cast<std::size_t>(2 * tokens + t)];
      differing += (h != tt || w != tt) ? 1 : 0;
      CHECK(std::min({tt, h, w}) >= 0.0);
      CHECK(std::max({tt, h, w}) < static_cast<double>(c.symbols.at("max_position")));
    }
    const bool has_vision = c.values.at("positions").mrope.frames > 0;
    CHECK((differing > 0) == has_vision);
    // The visible prefill cases: most tokens are image or video tokens.
    if (c.name.rfind("prefill_", 0) == 0) CHECK(differing > tokens / 2);
  }
  // The last-row case reaches the last row.
  const tasks::Case& last = case_named(mrope_task(), "h_last_cache_row");
  const auto ids = input_values(mrope_task(), last, "positions");
  CHECK(*std::max_element(ids.begin(), ids.end()) ==
        static_cast<double>(last.symbols.at("max_position") - 1));
}
