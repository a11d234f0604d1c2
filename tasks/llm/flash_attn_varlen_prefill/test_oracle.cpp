// The llm/flash_attn_varlen_prefill oracle on a hand-computed causal chunk, on the properties
// that define it (a later chunk equals the same rows of the whole prompt, grouped heads share
// their kv head), on the inputs it must refuse, and on two hidden cases recomputed by an
// independent loop; and the task's cases: their offsets, lengths and block tables agree with
// their symbols.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "llm/flash_attn_varlen_prefill";

// One call of the oracle: shapes, then every input's values (row-major, as the task lays them
// out).
struct Call {
  std::int64_t heads, kv_heads, head_size, blocks, block_size, width;
  std::vector<double> cu_seqlens_q, seq_lens, block_tables;
  std::vector<double> query{}, key_cache{}, value_cache{};

  std::int64_t seqs() const { return static_cast<std::int64_t>(seq_lens.size()); }
  std::int64_t tokens() const { return static_cast<std::int64_t>(cu_seqlens_q.back()); }

  std::map<std::string, std::int64_t> symbols() const {
    return {{"num_tokens", tokens()}, {"num_seqs", seqs()},       {"num_offsets", seqs() + 1},
            {"num_heads", heads},     {"num_kv_heads", kv_heads}, {"head_size", head_size},
            {"num_blocks", blocks},   {"block_size", block_size}, {"max_blocks_per_seq", width},
            {"context_tokens", 1},    {"attended_pairs", 1}};
  }

  oracle_test::Tensors tensors() const {
    const std::vector<std::int64_t> rows{tokens(), heads, head_size};
    const std::vector<std::int64_t> cache{blocks, block_size, kv_heads, head_size};
    return {
        {"out",
         {core::DType::kBF16, rows,
          std::vector<double>(static_cast<std::size_t>(tokens() * heads * head_size), 0.0)}},
        {"query", {core::DType::kBF16, rows, query}},
        {"key_cache", {core::DType::kBF16, cache, key_cache}},
        {"value_cache", {core::DType::kBF16, cache, value_cache}},
        {"block_tables", {core::DType::kI32, {seqs(), width}, block_tables}},
        {"cu_seqlens_q", {core::DType::kI32, {seqs() + 1}, cu_seqlens_q}},
        {"seq_lens", {core::DType::kI32, {seqs()}, seq_lens}},
    };
  }

  // Query and caches filled with distinct, deterministic values of unit scale.
  void fill_values(double seed) {
    auto fill = [&](std::vector<double>& values, std::int64_t count, double salt) {
      values.resize(static_cast<std::size_t>(count));
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = 1.5 * std::sin(0.7 * static_cast<double>(i) * (1.0 + salt) + seed + salt);
      }
    };
    fill(query, tokens() * heads * head_size, 0.11);
    fill(key_cache, blocks * block_size * kv_heads * head_size, 0.23);
    fill(value_cache, blocks * block_size * kv_heads * head_size, 0.37);
  }
};

std::vector<double> attend(const Call& call, double scale) {
  return oracle_test::call_oracle(kTask, call.symbols(), call.tensors(), {{"scale", scale}})
      .at("out")
      .values;
}

// The oracle's status on `call` (scale 1).
core::Status status_of(const Call& call) {
  auto tensors = call.tensors();
  return oracle_test::oracle_status(kTask, call.symbols(), tensors, {{"scale", 1.0}});
}

// A call of one head of size 2, blocks of 2 tokens, a cache of `blocks` blocks, every value 1.
Call small_call(std::vector<double> cu_seqlens_q, std::vector<double> seq_lens,
                std::vector<double> block_tables, std::int64_t blocks, std::int64_t width) {
  Call call{1,
            1,
            2,
            blocks,
            2,
            width,
            std::move(cu_seqlens_q),
            std::move(seq_lens),
            std::move(block_tables)};
  call.query.assign(static_cast<std::size_t>(call.tokens() * 2), 1.0);
  call.key_cache.assign(static_cast<std::size_t>(blocks * 2 * 2), 1.0);
  call.value_cache = call.key_cache;
  return call;
}

// Whether the error message of `status` contains `text`.
bool refused_with(const core::Status& status, const std::string& text) {
  if (status.ok()) return false;
  const std::string& message = status.error().message;
  return message.find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("flash_attn_varlen_prefill oracle: a hand-computed chunk masks exactly the later keys") {
  // One sequence of n = 3 tokens whose last q = 2 are the new ones: row 0 is at position 1 and
  // sees keys 0 and 1, row 1 at position 2 sees keys 0, 1 and 2. Blocks of 2 in a shuffled
  // table: tokens 0 and 1 in block 1, token 2 in block 0 (slot 0; slot 1 is never read). Head
  // size 2, one head. Keys (1, 0), (0, 1), (1, 1); values (1, 2), (3, 4), (5, 6).
  Call call{1, 1, 2, 2, 2, 2, {0, 2}, {3}, {1, 0}};
  call.key_cache = {1, 1, 40, 40, 1, 0, 0, 1};
  call.value_cache = {5, 6, 900, 900, 1, 2, 3, 4};
  // Row 0: query (4, 0) at scale 0.5, scores 2 and 0 (key 2 would also score 2, if seen).
  // Row 1: query (0, 0), every score 0: the mean of all three values.
  call.query = {4, 0, 0, 0};
  const auto out = attend(call, 0.5);
  const double e2 = std::exp(2.0);
  CHECK(out[0] == doctest::Approx((e2 * 1 + 3) / (e2 + 1)).epsilon(1e-14));
  CHECK(out[1] == doctest::Approx((e2 * 2 + 4) / (e2 + 1)).epsilon(1e-14));
  CHECK(out[2] == doctest::Approx(3.0).epsilon(1e-14));
  CHECK(out[3] == doctest::Approx(4.0).epsilon(1e-14));

  // The same query on row 1 (position 2) sees key 2 as well: scores 2, 0, 2.
  call.query = {0, 0, 4, 0};
  const auto later = attend(call, 0.5);
  CHECK(later[0] == doctest::Approx(2.0).epsilon(1e-14));  // row 0: keys 0, 1, equal scores 0
  CHECK(later[1] == doctest::Approx(3.0).epsilon(1e-14));
  CHECK(later[2] == doctest::Approx((e2 * 1 + 3 + e2 * 5) / (2 * e2 + 1)).epsilon(1e-14));
  CHECK(later[3] == doctest::Approx((e2 * 2 + 4 + e2 * 6) / (2 * e2 + 1)).epsilon(1e-14));
}

TEST_CASE(
    "flash_attn_varlen_prefill oracle: a later chunk's rows equal the same rows of the whole "
    "prompt") {
  // Packed call: sequence 0 (2 new of 4), sequence 1 with no new token, sequence 2 whose last 3
  // of 7 tokens are new. Then sequence 2 alone as a fresh prompt of all 7 rows, same cache.
  Call chunk{2, 1, 4, 8, 3, 3, {0, 2, 2, 5}, {4, 5, 7}, {0, 1, 2, 3, 4, 5, 7, 2, 6}};
  chunk.fill_values(0.3);
  Call prompt = chunk;
  prompt.cu_seqlens_q = {0, 7};
  prompt.seq_lens = {7};
  prompt.block_tables = {7, 2, 6};
  prompt.fill_values(1.9);  // new queries everywhere; the caches are the chunk's again
  prompt.key_cache = chunk.key_cache;
  prompt.value_cache = chunk.value_cache;
  const std::int64_t row = chunk.heads * chunk.head_size;  // elements a token
  // Sequence 2's new rows take the prompt's rows 4 .. 6.
  std::copy(prompt.query.begin() + 4 * row, prompt.query.end(), chunk.query.begin() + 2 * row);
  const auto chunked = attend(chunk, 0.6);
  const auto whole = attend(prompt, 0.6);
  for (std::int64_t e = 0; e < 3 * row; ++e) {
    CAPTURE(e);
    CHECK(chunked[static_cast<std::size_t>(2 * row + e)] ==
          doctest::Approx(whole[static_cast<std::size_t>(4 * row + e)]).epsilon(1e-13));
  }
  // Aligned top-left, the chunk's first row would see key 0 alone and return its value (block
  // 7, slot 0): the bottom-right row at position 4 sees five keys and returns another output.
  const std::size_t token0 = 7 * 3 * 4;
  CHECK(chunked[2 * static_cast<std::size_t>(row)] !=
        doctest::Approx(chunk.value_cache[token0]).epsilon(1e-3));
}

TEST_CASE("flash_attn_varlen_prefill oracle: query heads of one kv head with equal queries agree") {
  // Four query heads over two kv heads: heads 0, 1 read kv head 0, heads 2, 3 kv head 1. Every
  // head gets the same query, so heads of one kv head must agree exactly and the two kv heads
  // (different keys and values) must differ.
  Call call{4, 2, 4, 6, 2, 3, {0, 3, 7}, {5, 4}, {3, 0, 5, 1, 4, 2}};
  call.fill_values(0.8);
  for (std::int64_t r = 0; r < call.tokens(); ++r) {
    for (std::int64_t h = 1; h < 4; ++h) {
      for (std::int64_t d = 0; d < 4; ++d) {
        call.query[static_cast<std::size_t>((r * 4 + h) * 4 + d)] =
            call.query[static_cast<std::size_t>(r * 16 + d)];
      }
    }
  }
  const auto out = attend(call, 0.5);
  for (std::int64_t r = 0; r < call.tokens(); ++r) {
    CAPTURE(r);
    for (std::int64_t d = 0; d < 4; ++d) {
      const auto at = [&](std::int64_t h) {
        return out[static_cast<std::size_t>(r * 16 + h * 4 + d)];
      };
      CHECK(at(0) == at(1));
      CHECK(at(2) == at(3));
      CHECK(at(0) != doctest::Approx(at(2)).epsilon(1e-6));
    }
  }
}

TEST_CASE("flash_attn_varlen_prefill oracle: refuses offsets, lengths and blocks it cannot read") {
  // Accepted: two sequences (2 new of 3, 1 new of 1), blocks of 2, two blocks a sequence.
  CHECK(status_of(small_call({0, 2, 3}, {3, 1}, {0, 1, 2, 3}, 4, 2)).ok());
  CHECK(refused_with(status_of(small_call({1, 2, 3}, {3, 1}, {0, 1, 2, 3}, 4, 2)),
                     "does not start at 0"));
  CHECK(refused_with(status_of(small_call({0, 2, 1, 3}, {3, 1, 1}, {0, 1, 2, 3, 4, 5}, 6, 2)),
                     "decreases"));
  // Offsets that end short of num_tokens: the query and out hold 4 rows, the offsets cover 3.
  const Call short_end = small_call({0, 2, 3}, {3, 1}, {0, 1, 2, 3}, 4, 2);
  auto symbols = short_end.symbols();
  symbols["num_tokens"] = 4;
  auto tensors = short_end.tensors();
  for (const char* name : {"out", "query"}) {
    tensors.at(name).values.resize(8, 1.0);
    tensors.at(name).shape[0] = 4;
  }
  CHECK(refused_with(oracle_test::oracle_status(kTask, symbols, tensors, {{"scale", 1.0}}),
                     "does not end at num_tokens"));
  // More new tokens than context.
  CHECK(refused_with(status_of(small_call({0, 2, 4}, {3, 1}, {0, 1, 2, 3}, 4, 2)),
                     "query tokens but a context"));
  // A context longer than its block table reaches (2 blocks of 2).
  CHECK(refused_with(status_of(small_call({0, 2, 3}, {5, 1}, {0, 1, 2, 3}, 4, 2)),
                     "more than max_blocks_per_seq"));
  // A block id past the cache, in a block the context reaches; the same id past the context's
  // last block is never read.
  CHECK(refused_with(status_of(small_call({0, 2, 3}, {3, 1}, {0, 4, 2, 3}, 4, 2)), "out of range"));
  CHECK(
      refused_with(status_of(small_call({0, 2, 3}, {3, 1}, {0, 1, -1, 3}, 4, 2)), "out of range"));
  CHECK(status_of(small_call({0, 2, 3}, {2, 1}, {0, 4, 2, 7}, 4, 2)).ok());
}

TEST_CASE("flash_attn_varlen_prefill oracle: agrees with an independent loop on hidden cases") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const char* name : {"h_mqa", "h_block_size_1"}) {
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, name);
    const oracle_test::Tensors t = oracle_test::run_case(task, c);
    const auto& query = t.at("query").values;
    const auto& keys = t.at("key_cache").values;
    const auto& values = t.at("value_cache").values;
    const auto& table = t.at("block_tables").values;
    const auto& cu = t.at("cu_seqlens_q").values;
    const auto& lens = t.at("seq_lens").values;
    const auto& out = t.at("out").values;
    const std::int64_t heads = c.symbols.at("num_heads");
    const std::int64_t kv_heads = c.symbols.at("num_kv_heads");
    const std::int64_t dims = c.symbols.at("head_size");
    const std::int64_t block_size = c.symbols.at("block_size");
    const std::int64_t width = c.symbols.at("max_blocks_per_seq");
    const double scale = c.scalars.at("scale");
    // Rows: the first two and last two of every sequence, and every 13th.
    std::set<std::int64_t> rows;
    for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
      for (const double r : {cu[s], cu[s] + 1, cu[s + 1] - 2, cu[s + 1] - 1}) {
        if (r >= cu[s] && r < cu[s + 1]) rows.insert(static_cast<std::int64_t>(r));
      }
    }
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(cu.back()); r += 13) rows.insert(r);
    std::size_t compared = 0;
    double worst = 0.0;  // largest |oracle - loop| / (1 + |loop|)
    for (const std::int64_t r : rows) {
      const auto s = static_cast<std::int64_t>(
          std::upper_bound(cu.begin(), cu.end(), static_cast<double>(r)) - cu.begin() - 1);
      const auto n = static_cast<std::int64_t>(lens[static_cast<std::size_t>(s)]);
      const auto q = static_cast<std::int64_t>(cu[static_cast<std::size_t>(s + 1)] -
                                               cu[static_cast<std::size_t>(s)]);
      const std::int64_t visible =
          n - q + (r - static_cast<std::int64_t>(cu[static_cast<std::size_t>(s)])) + 1;
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t g = h * kv_heads / heads;
        // Walk the block table block by block; weights relative to the first score.
        std::vector<double> weights;
        std::vector<std::size_t> at;  // element offset of each visible key's head row
        for (std::int64_t b = 0; b * block_size < visible; ++b) {
          const auto block =
              static_cast<std::int64_t>(table[static_cast<std::size_t>(s * width + b)]);
          for (std::int64_t o = 0; o < block_size && b * block_size + o < visible; ++o) {
            at.push_back(
                static_cast<std::size_t>(((block * block_size + o) * kv_heads + g) * dims));
          }
        }
        REQUIRE(static_cast<std::int64_t>(at.size()) == visible);
        double largest = -INFINITY;
        for (const std::size_t k : at) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < dims; ++d) {
            dot += query[static_cast<std::size_t>((r * heads + h) * dims + d)] *
                   keys[k + static_cast<std::size_t>(d)];
          }
          weights.push_back(dot * scale);
          largest = std::max(largest, dot * scale);
        }
        double total = 0.0;
        for (double& w : weights) total += (w = std::exp(w - largest));
        for (std::int64_t d = 0; d < dims; ++d) {
          double want = 0.0;
          for (std::size_t j = 0; j < at.size(); ++j) {
            want += weights[j] / total * values[at[j] + static_cast<std::size_t>(d)];
          }
          const double got = out[static_cast<std::size_t>((r * heads + h) * dims + d)];
          worst = std::max(worst, std::abs(got - want) / (1.0 + std::abs(want)));
          ++compared;
        }
      }
    }
    CHECK(worst <= 1e-12);
    CHECK(compared == rows.size() * static_cast<std::size_t>(heads * dims));
    CHECK(rows.size() >= 10);
  }
}

TEST_CASE(
    "flash_attn_varlen_prefill: every case's offsets, lengths and block tables agree with its "
    "symbols") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const tasks::TensorSpec* tables_spec = task.find_tensor("block_tables");
  REQUIRE(tables_spec != nullptr);
  for (const auto& c : task.cases) {
    CAPTURE(c.name);
    const std::int64_t seqs = c.symbols.at("num_seqs");
    const auto& cu_spec = c.values.at("cu_seqlens_q");
    const auto& lens_spec = c.values.at("seq_lens");
    REQUIRE(cu_spec.kind == tasks::GeneratorKind::kList);
    REQUIRE(lens_spec.kind == tasks::GeneratorKind::kList);
    // The lists are the tensors themselves (not repeated), so every call sees these values.
    const std::vector<double>& cu = cu_spec.list;
    const std::vector<double>& lens = lens_spec.list;
    REQUIRE(static_cast<std::int64_t>(cu.size()) == seqs + 1);
    REQUIRE(static_cast<std::int64_t>(lens.size()) == seqs);
    CHECK(c.symbols.at("num_offsets") == seqs + 1);
    CHECK(cu.front() == 0);
    CHECK(cu.back() == static_cast<double>(c.symbols.at("num_tokens")));
    const std::int64_t window = c.symbols.at("max_blocks_per_seq") * c.symbols.at("block_size");
    std::int64_t context = 0, pairs = 0;
    for (std::int64_t s = 0; s < seqs; ++s) {
      const auto q = static_cast<std::int64_t>(cu[static_cast<std::size_t>(s + 1)] -
                                               cu[static_cast<std::size_t>(s)]);
      const auto n = static_cast<std::int64_t>(lens[static_cast<std::size_t>(s)]);
      CHECK(q >= 0);
      CHECK(q <= n);
      CHECK(n <= window);
      context += n;
      pairs += q * (n - q) + q * (q + 1) / 2;
    }
    CHECK(context == c.symbols.at("context_tokens"));
    CHECK(pairs == c.symbols.at("attended_pairs"));
    for (const std::uint64_t draw : {0, 1}) {
      auto bytes = tasks::generate_tensor(c, *tables_spec, tasks::case_seed(c, 7), draw);
      REQUIRE_MESSAGE(bytes.ok(), bytes.error().message);
      const auto table = tasks::decode_values(core::DType::kI32, bytes->data(), bytes->size() / 4);
      const std::set<double> distinct(table.begin(), table.end());
      CHECK(distinct.size() == table.size());
      CHECK(*distinct.begin() >= 0);
      CHECK(*distinct.rbegin() < static_cast<double>(c.symbols.at("num_blocks")));
    }
  }
}
