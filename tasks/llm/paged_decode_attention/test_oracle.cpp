// The llm/paged_decode_attention oracle on hand-computed contexts, against the stories260K
// calls recorded by tasks/capture, and the task's cases: their lengths fit their block tables,
// visible cases carry their exact context size, and timed calls see the same lengths.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tasks/captured.hpp"
#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "llm/paged_decode_attention";

const tasks::Task& attention_task() { return oracle_test::repository_task(kTask); }

struct Context {
  std::int64_t seqs, heads, kv_heads, head_size, blocks, block_size, width;
  std::vector<double> query, key_cache, value_cache, block_tables, seq_lens;
};

std::vector<double> attend(const Context& x, double scale) {
  const std::map<std::string, std::int64_t> symbols{{"num_seqs", x.seqs},
                                                    {"num_heads", x.heads},
                                                    {"num_kv_heads", x.kv_heads},
                                                    {"head_size", x.head_size},
                                                    {"num_blocks", x.blocks},
                                                    {"block_size", x.block_size},
                                                    {"max_blocks_per_seq", x.width},
                                                    {"context_tokens", x.seqs}};
  oracle_test::Tensors tensors{
      {"out",
       {core::DType::kBF16,
        {x.seqs, x.heads, x.head_size},
        std::vector<double>(static_cast<std::size_t>(x.seqs * x.heads * x.head_size), 0.0)}},
      {"query", {core::DType::kBF16, {x.seqs, x.heads, x.head_size}, x.query}},
      {"key_cache",
       {core::DType::kBF16, {x.blocks, x.block_size, x.kv_heads, x.head_size}, x.key_cache}},
      {"value_cache",
       {core::DType::kBF16, {x.blocks, x.block_size, x.kv_heads, x.head_size}, x.value_cache}},
      {"block_tables", {core::DType::kI32, {x.seqs, x.width}, x.block_tables}},
      {"seq_lens", {core::DType::kI32, {x.seqs}, x.seq_lens}},
  };
  return oracle_test::call_oracle(kTask, symbols, std::move(tensors), {{"scale", scale}})
      .at("out")
      .values;
}

// Whether the oracle computes one sequence of `length` tokens (one head of 8, blocks of 2, a
// cache of `blocks` blocks) with block table `table` of `width` entries, or refuses it.
bool oracle_accepts(std::int64_t blocks, std::int64_t width, std::vector<double> table,
                    double length) {
  const auto cache = static_cast<std::size_t>(blocks * 2 * 8);
  oracle_test::Tensors tensors{
      {"out", {core::DType::kBF16, {1, 1, 8}, std::vector<double>(8, 0.0)}},
      {"query", {core::DType::kBF16, {1, 1, 8}, std::vector<double>(8, 1.0)}},
      {"key_cache", {core::DType::kBF16, {blocks, 2, 1, 8}, std::vector<double>(cache, 1.0)}},
      {"value_cache", {core::DType::kBF16, {blocks, 2, 1, 8}, std::vector<double>(cache, 1.0)}},
      {"block_tables", {core::DType::kI32, {1, width}, std::move(table)}},
      {"seq_lens", {core::DType::kI32, {1}, {length}}},
  };
  return oracle_test::oracle_status(kTask,
                                    {{"num_seqs", 1},
                                     {"num_heads", 1},
                                     {"num_kv_heads", 1},
                                     {"head_size", 8},
                                     {"num_blocks", blocks},
                                     {"block_size", 2},
                                     {"max_blocks_per_seq", width},
                                     {"context_tokens", 1}},
                                    tensors)
      .ok();
}

}  // namespace

TEST_CASE("paged_decode_attention oracle: a hand-computed context across two blocks") {
  // One sequence of 3 tokens in blocks of 2: tokens 0, 1 in block 1, token 2 in block 0 (slot
  // 0). Head size 2, two query heads sharing one kv head. Keys (1, 0), (0, 1), (1, 1); values
  // (1, 2), (3, 4), (5, 6). Query head 0 = (2, 0): scores 2, 0, 2 (scale 1).
  Context x{1, 2, 1, 2, 2, 2, 2, {2, 0, 0, 0}, {}, {}, {1, 0}, {3}};
  x.key_cache = {1, 1, 0, 0, 1, 0, 0, 1};    // block 0: slot 0 = token 2, slot 1 unused (0, 0)
  x.value_cache = {5, 6, 9, 9, 1, 2, 3, 4};  // block 1: tokens 0 and 1; (9, 9) never read
  const auto out = attend(x, 1.0);
  const double e2 = std::exp(2.0), total = 2 * e2 + 1;
  CHECK(out[0] == doctest::Approx((e2 * 1 + 1 * 3 + e2 * 5) / total).epsilon(1e-14));
  CHECK(out[1] == doctest::Approx((e2 * 2 + 1 * 4 + e2 * 6) / total).epsilon(1e-14));
  // Head 1: query (0, 0), every score 0: the mean of the three values.
  CHECK(out[2] == doctest::Approx(3.0).epsilon(1e-14));
  CHECK(out[3] == doctest::Approx(4.0).epsilon(1e-14));
}

TEST_CASE("paged_decode_attention oracle: a context of one token returns its value") {
  Context x{2, 4, 2, 2, 3, 4, 1, {}, {}, {}, {2, 0}, {1, 1}};
  x.query = {1, -3, 7, 2, -5, 0.5, 0, 9, 1, 1, 2, 2, 3, 3, 4, 4};
  x.key_cache.assign(3 * 4 * 2 * 2, 0.25);
  x.value_cache.resize(x.key_cache.size());
  std::iota(x.value_cache.begin(), x.value_cache.end(), 0.0);
  const auto out = attend(x, 0.5);
  // Sequence 0 reads block 2 slot 0 (elements 32..35), sequence 1 block 0 slot 0 (0..3); query
  // heads 0, 1 read kv head 0, heads 2, 3 kv head 1.
  const std::vector<double> want{32, 33, 32, 33, 34, 35, 34, 35, 0, 1, 0, 1, 2, 3, 2, 3};
  CHECK(out == want);
}

TEST_CASE("paged_decode_attention oracle: lengths past the block table are refused") {
  CHECK_FALSE(oracle_accepts(1, 1, {0}, 3));
  CHECK(oracle_accepts(1, 1, {0}, 2));
}

TEST_CASE("paged_decode_attention oracle: a block id past the cache is refused, not read") {
  CHECK_FALSE(oracle_accepts(2, 2, {0, 2}, 3));
  // The same table is fine for a context that ends in block 0: entry 1 is never read.
  CHECK(oracle_accepts(2, 2, {0, 2}, 2));
}

TEST_CASE("paged_decode_attention oracle: scores far beyond exp's range stay finite") {
  // Scores of 1000 and 999 (scale 1): exp overflows unless the maximum is subtracted first.
  Context x{1, 1, 1, 2, 1, 2, 1, {1000, 0}, {1, 0, 0.999, 0}, {1, 0, 0, 1}, {0}, {2}};
  const auto out = attend(x, 1.0);
  const double p0 = 1.0 / (1.0 + std::exp(-1.0));
  CHECK(out[0] == doctest::Approx(p0).epsilon(1e-12));
  CHECK(out[1] == doctest::Approx(1.0 - p0).epsilon(1e-12));
}

TEST_CASE("paged_decode_attention oracle: reproduces every recorded stories260K decode call") {
  const tasks::Task& task = attention_task();
  const std::size_t calls = oracle_test::for_each_recorded_call(
      "paged_decode_attention",
      [&](const oracle_test::RecordedCall& call) {
        const auto* query = call.group.tensor(call.name, "query");
        const auto* cache = call.group.tensor(call.name, "key_cache");
        const auto* tables = call.group.tensor(call.name, "block_tables");
        REQUIRE(query != nullptr);
        REQUIRE(cache != nullptr);
        REQUIRE(tables != nullptr);
        tasks::Case c =
            oracle_test::case_reading(task, call,
                                      {{"num_seqs", query->shape[0]},
                                       {"num_heads", query->shape[1]},
                                       {"num_kv_heads", cache->shape[2]},
                                       {"head_size", query->shape[2]},
                                       {"num_blocks", cache->shape[0]},
                                       {"block_size", cache->shape[1]},
                                       {"max_blocks_per_seq", tables->shape[1]},
                                       {"context_tokens", query->shape[0]}},
                                      {{"scale", call.record().scalars.at("scale").get<double>()}});
        CHECK(oracle_test::compare_with_recording(task, c, call) == 4 * 8 * 8);
      },
      {"decode_step0", "decode_step3"});
  CHECK(calls == 4);
}

TEST_CASE("paged_decode_attention: captured cases read recorded calls and match their outputs") {
  const tasks::Task& task = attention_task();
  oracle_test::check_captured_cases(task, "paged_decode_attention", {"scale"}, true, {"decode"});
  oracle_test::compare_captured_cases(task);
}

TEST_CASE(
    "paged_decode_attention: every case's lengths fit its block table, context_tokens is their "
    "sum (visible) or a lower bound (hidden), and timed calls see the same lengths") {
  const tasks::Task& task = attention_task();
  const tasks::TensorSpec* lens_spec = task.find_tensor("seq_lens");
  const tasks::TensorSpec* tables_spec = task.find_tensor("block_tables");
  REQUIRE(lens_spec != nullptr);
  REQUIRE(tables_spec != nullptr);
  for (const auto& c : task.cases) {
    CAPTURE(c.name);
    const std::int64_t window = c.symbols.at("max_blocks_per_seq") * c.symbols.at("block_size");
    for (const std::uint64_t draw : {0, 1, 2}) {
      const std::uint64_t seed = tasks::case_seed(c, 7);
      auto lens_bytes = tasks::generate_tensor(c, *lens_spec, seed, draw);
      REQUIRE_MESSAGE(lens_bytes.ok(), lens_bytes.error().message);
      const auto lens =
          tasks::decode_values(core::DType::kI32, lens_bytes->data(), lens_bytes->size() / 4);
      REQUIRE(lens.size() == static_cast<std::size_t>(c.symbols.at("num_seqs")));
      for (const double n : lens) {
        CHECK(n >= 1);
        CHECK(n <= static_cast<double>(window));
      }
      const double sum = std::accumulate(lens.begin(), lens.end(), 0.0);
      if (c.hidden) {
        CHECK(sum >= static_cast<double>(c.symbols.at("context_tokens")));
      } else {
        CHECK(sum == static_cast<double>(c.symbols.at("context_tokens")));
      }
      auto table_bytes = tasks::generate_tensor(c, *tables_spec, seed, draw);
      REQUIRE_MESSAGE(table_bytes.ok(), table_bytes.error().message);
      const auto table =
          tasks::decode_values(core::DType::kI32, table_bytes->data(), table_bytes->size() / 4);
      const std::set<double> distinct(table.begin(), table.end());
      CHECK(distinct.size() == table.size());
      CHECK(*distinct.begin() >= 0);
      CHECK(*distinct.rbegin() < static_cast<double>(c.symbols.at("num_blocks")));
    }
    if (c.hidden) continue;
    // The runner's timed calls read windows of a longer stream at rotating offsets: a visible
    // case's lengths there are the same multiset (the same work in every timed call).
    const auto& spec = c.values.at("seq_lens");
    REQUIRE(spec.kind == tasks::GeneratorKind::kList);
    const std::size_t n = static_cast<std::size_t>(c.symbols.at("num_seqs"));
    CHECK(n % spec.list.size() == 0);
    std::vector<double> first;
    for (const std::uint64_t offset : {0u, 977u, 1954u, 16383u}) {
      std::vector<std::byte> bytes(4 * n);
      REQUIRE(tasks::generate_into(spec, core::DType::kI32, 5, bytes, offset).ok());
      auto window_lens = tasks::decode_values(core::DType::kI32, bytes.data(), n);
      std::sort(window_lens.begin(), window_lens.end());
      if (first.empty()) first = window_lens;
      CHECK(window_lens == first);
    }
  }
}
