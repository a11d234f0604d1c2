// The llm/moe_align_block_size oracle on a hand-laid-out example and on its task's cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::case_named;
using oracle_test::Tensors;

Tensors run_align(std::int64_t tokens, std::int64_t k, std::int64_t experts,
                  std::int64_t block_size, std::int64_t max_padded, std::vector<double> ids) {
  const std::int64_t max_blocks = (max_padded + block_size - 1) / block_size;
  return oracle_test::call_oracle(
      "llm/moe_align_block_size",
      {{"num_tokens", tokens},
       {"topk", k},
       {"max_num_tokens_padded", max_padded},
       {"max_num_m_blocks", max_blocks}},
      Tensors{
          {"topk_ids", {core::DType::kI32, {tokens, k}, std::move(ids)}},
          {"sorted_token_ids", {core::DType::kI32, {max_padded}, std::vector<double>(max_padded)}},
          {"experts_ids", {core::DType::kI32, {max_blocks}, std::vector<double>(max_blocks)}},
          {"num_tokens_post_pad", {core::DType::kI32, {1}, std::vector<double>(1)}},
      },
      {{"num_experts", static_cast<double>(experts)},
       {"block_size", static_cast<double>(block_size)}});
}

}  // namespace

TEST_CASE("moe_align_block_size oracle: three tokens, top-2, four experts, blocks of 4") {
  // Flat ids 0..5 route to experts 2, 0 | 2, 3 | 2, 0. Counts: e0 2, e1 0, e2 3, e3 1.
  // Padded to 4: e0 [0, 4), e1 empty, e2 [4, 8), e3 [8, 12); total 12. numel = 6 pads.
  // vLLM's bound: 6 + 4 * 3 = 18 positions, ceil(18 / 4) = 5 blocks.
  const auto out = run_align(3, 2, 4, 4, 18, {2, 0, 2, 3, 2, 0});
  CHECK(out.at("num_tokens_post_pad").values == std::vector<double>{12});
  CHECK(out.at("sorted_token_ids").values ==
        std::vector<double>{1, 5, 6, 6, 0, 2, 4, 6, 3, 6, 6, 6, 6, 6, 6, 6, 6, 6});
  CHECK(out.at("experts_ids").values == std::vector<double>{0, 2, 3, 0, 0});
}

TEST_CASE(
    "moe_align_block_size oracle: a full block needs no padding; too small a buffer is refused") {
  // Two experts, each chosen exactly 4 times with blocks of 4: no padding at all.
  const auto out = run_align(4, 2, 2, 4, 8, {0, 1, 1, 0, 0, 1, 1, 0});
  CHECK(out.at("num_tokens_post_pad").values == std::vector<double>{8});
  CHECK(out.at("sorted_token_ids").values == std::vector<double>{0, 3, 4, 7, 1, 2, 5, 6});
  CHECK(out.at("experts_ids").values == std::vector<double>{0, 1});

  Tensors tensors{
      {"topk_ids", {core::DType::kI32, {4, 2}, {0, 1, 1, 0, 0, 1, 1, 2}}},
      {"sorted_token_ids", {core::DType::kI32, {8}, std::vector<double>(8)}},
      {"experts_ids", {core::DType::kI32, {2}, std::vector<double>(2)}},
      {"num_tokens_post_pad", {core::DType::kI32, {1}, std::vector<double>(1)}},
  };
  // Expert 2 needs a block of its own: 12 positions do not fit in 8.
  CHECK_FALSE(
      oracle_test::oracle_status(
          "llm/moe_align_block_size",
          {{"num_tokens", 4}, {"topk", 2}, {"max_num_tokens_padded", 8}, {"max_num_m_blocks", 2}},
          tensors, {{"num_experts", 3.0}, {"block_size", 4.0}})
          .ok());
}

TEST_CASE("moe_align_block_size oracle: every case is sized as vLLM allocates and lays out") {
  const tasks::Task& task = oracle_test::repository_task("llm/moe_align_block_size");
  for (const tasks::Case& c : task.cases) {
    CAPTURE(c.name);
    const std::int64_t tokens = c.symbols.at("num_tokens");
    const std::int64_t k = c.symbols.at("topk");
    const auto experts = static_cast<std::int64_t>(c.scalars.at("num_experts"));
    const auto block_size = static_cast<std::int64_t>(c.scalars.at("block_size"));
    const std::int64_t numel = tokens * k;
    std::int64_t bound = numel + experts * (block_size - 1);
    if (numel < experts) bound = std::min(numel * block_size, bound);
    CHECK(c.symbols.at("max_num_tokens_padded") == bound);
    CHECK(c.symbols.at("max_num_m_blocks") == (bound + block_size - 1) / block_size);
    // The routing generator's expert count and top-k are the case's.
    const tasks::GeneratorSpec& ids = c.values.at("topk_ids");
    CHECK(ids.kind == tasks::GeneratorKind::kRouting);
    CHECK(ids.max == experts);
    CHECK(ids.topk == k);
  }
  for (const char* name :
       {"qwen3_decode_64", "h_qwen3_one_hot_set", "h_decode_fewer_ids_than_experts"}) {
    CAPTURE(name);
    const tasks::Case& c = case_named(task, name);
    const Tensors tensors = oracle_test::run_case(task, c);
    const auto& ids = tensors.at("topk_ids").values;
    const auto& sorted = tensors.at("sorted_token_ids").values;
    const auto& blocks = tensors.at("experts_ids").values;
    const auto block_size = static_cast<std::int64_t>(c.scalars.at("block_size"));
    const auto total = static_cast<std::int64_t>(tensors.at("num_tokens_post_pad").values[0]);
    const auto numel = static_cast<double>(ids.size());
    CHECK(total % block_size == 0);
    // Every flat index appears once, in a block of its expert; the rest is padding.
    std::vector<int> seen(ids.size(), 0);
    std::size_t bad = 0;
    for (std::int64_t p = 0; p < static_cast<std::int64_t>(sorted.size()); ++p) {
      if (sorted[p] == numel) continue;
      const auto i = static_cast<std::size_t>(sorted[p]);
      bad += (p < total && ids[i] == blocks[p / block_size] && seen[i]++ == 0) ? 0 : 1;
    }
    CHECK(bad == 0);
    CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(ids.size()));
  }
}
