// The MoE alignment checker: accepts every right answer of llm/moe_align_block_size, where the
// order of the token slots inside one expert's segment is free (vLLM's kernel fills them with
// atomics, so no two runs need agree), recomputing the layout from topk_ids.
//
// Inputs by name: `topk_ids` (integer, [num_tokens, topk], flat index i = token * topk + slot);
// scalars `num_experts` and `block_size`. Outputs by name: `sorted_token_ids` (integer,
// [max_num_tokens_padded]), `experts_ids` (integer, [max_num_m_blocks]) and
// `num_tokens_post_pad` (integer, [1]). A case without them is the server's misconfiguration,
// an InternalError.
//
// The layout, with numel = topk_ids' element count, c_e the number of flat indices i with
// topk_ids[i] == e (ids outside [0, num_experts) are skipped, as vLLM skips them), the padded
// count p_e = ceil(c_e / block_size) * block_size and the segment of expert e the positions
// [o_e, o_e + p_e), o_e = p_0 + ... + p_{e-1}, total = o_{num_experts}:
//  - num_tokens_post_pad[0] == total exactly.
//  - experts_ids[b] == the expert whose segment holds position b * block_size, for b * block_size
//    < total; 0 for every later block (vLLM's fill).
//  - sorted_token_ids: the segment of e holds each flat index i with topk_ids[i] == e exactly
//    once and the padding value numel in its other p_e - c_e positions, in any order; every
//    position from total on holds numel.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"
#include "judge/checker_support.hpp"
#include "judge/task_checker.hpp"

namespace crucible::judge {
namespace {

double scalar_named(const TaskCheckRequest& request, const std::string& name) {
  if (request.scalars == nullptr || request.scalars->count(name) == 0) {
    throw core::InternalError("moe_align checker: case without scalar '" + name + "'");
  }
  return request.scalars->at(name);
}

std::string at_text(std::size_t index) { return "position " + std::to_string(index) + ": "; }

class MoeAlignChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    const auto candidate = request.candidate;
    if (request.reference.size() != candidate.size() ||
        request.tolerances.size() != candidate.size() || candidate.size() != 3) {
      throw core::InternalError(
          "moe_align checker: needs exactly the outputs sorted_token_ids, experts_ids and "
          "num_tokens_post_pad");
    }
    const HostTensorView* ids = find_named(request.inputs, "topk_ids");
    const HostTensorView* sorted = find_named(candidate, "sorted_token_ids");
    const HostTensorView* blocks = find_named(candidate, "experts_ids");
    const HostTensorView* post_pad = find_named(candidate, "num_tokens_post_pad");
    if (ids == nullptr || sorted == nullptr || blocks == nullptr || post_pad == nullptr ||
        core::dtype_is_floating(ids->dtype) || core::dtype_is_floating(sorted->dtype) ||
        core::dtype_is_floating(blocks->dtype) || core::dtype_is_floating(post_pad->dtype) ||
        post_pad->count != 1) {
      throw core::InternalError(
          "moe_align checker: needs integer topk_ids, sorted_token_ids, experts_ids and a "
          "one-element num_tokens_post_pad");
    }
    const auto experts = static_cast<std::int64_t>(scalar_named(request, "num_experts"));
    const auto block_size = static_cast<std::int64_t>(scalar_named(request, "block_size"));
    if (experts < 1 || block_size < 1) {
      throw core::InternalError("moe_align checker: num_experts and block_size must be positive");
    }
    const std::size_t numel = ids->count;
    const auto padding = static_cast<double>(numel);

    // The layout from the inputs: counts, padded segment offsets, total.
    std::vector<std::int64_t> expert_of(numel, -1);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(experts), 0);
    for (std::size_t i = 0; i < numel; ++i) {
      const double id = element_of(*ids, i);
      if (id >= 0.0 && id < static_cast<double>(experts)) {
        expert_of[i] = static_cast<std::int64_t>(id);
        ++counts[static_cast<std::size_t>(expert_of[i])];
      }
    }
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(experts) + 1, 0);
    for (std::int64_t e = 0; e < experts; ++e) {
      const std::int64_t padded = (counts[e] + block_size - 1) / block_size * block_size;
      offsets[e + 1] = offsets[e] + padded;
    }
    const std::int64_t total = offsets[experts];
    if (static_cast<std::int64_t>(sorted->count) < total ||
        static_cast<std::int64_t>(blocks->count) * block_size < total) {
      throw core::InternalError(
          "moe_align checker: the case's max_num_tokens_padded or max_num_m_blocks is smaller "
          "than the padded layout");
    }

    const bool reveal = request.reveal_values;
    const int variant = request.poison_variant;
    std::vector<CompareReport> reports(candidate.size());

    // num_tokens_post_pad.
    Failures post_pad_verdicts(*post_pad, Tolerance{0.0, 0.0}, reveal);
    {
      const double got = element_of(*post_pad, 0);
      const auto expected = static_cast<double>(total);
      if (is_poison(post_pad->dtype, post_pad->data, 0, variant) && got != expected) {
        post_pad_verdicts.fail(0, got, expected, true, [] { return std::string("never written"); });
      } else if (got != expected) {
        post_pad_verdicts.fail(0, got, expected, false, [&] {
          return reveal ? "got " + format_number(got) + ", the padded total is " +
                              format_number(expected)
                        : std::string(
                              "not the total of the per-expert counts, each rounded up "
                              "to a multiple of block_size");
        });
      }
    }

    // experts_ids: one expert per block of the padded layout, then zeros.
    Failures block_verdicts(*blocks, Tolerance{0.0, 0.0}, reveal);
    {
      std::int64_t e = 0;
      for (std::size_t b = 0; b < blocks->count; ++b) {
        const auto start = static_cast<std::int64_t>(b) * block_size;
        while (e < experts && offsets[e + 1] <= start) ++e;
        const double expected = start < total ? static_cast<double>(e) : 0.0;
        const double got = element_of(*blocks, b);
        if (got == expected) continue;
        const bool unwritten = is_poison(blocks->dtype, blocks->data, b, variant);
        block_verdicts.fail(b, got, expected, unwritten, [&] {
          if (unwritten) return "block " + std::to_string(b) + ": never written";
          if (!reveal) {
            return "block " + std::to_string(b) +
                   (start < total ? ": not the expert whose segment holds the block"
                                  : ": a block past num_tokens_post_pad must hold 0");
          }
          return "block " + std::to_string(b) + ": got " + format_number(got) + ", expected " +
                 format_number(expected);
        });
      }
    }

    // sorted_token_ids: each segment a permutation of its tokens and its padding.
    Failures sorted_verdicts(*sorted, Tolerance{0.0, 0.0}, reveal);
    std::vector<char> seen(numel, 0);
    for (std::int64_t e = 0; e < experts; ++e) {
      std::int64_t found = 0;
      std::size_t first_padding = static_cast<std::size_t>(offsets[e + 1]);
      for (auto p = static_cast<std::size_t>(offsets[e]);
           p < static_cast<std::size_t>(offsets[e + 1]); ++p) {
        const double got = element_of(*sorted, p);
        if (got == padding) {
          first_padding = std::min(first_padding, p);
          continue;
        }
        const bool in_range = got >= 0.0 && got < padding;
        const auto token = in_range ? static_cast<std::size_t>(got) : std::size_t{0};
        if (in_range && expert_of[token] == e && seen[token] == 0) {
          seen[token] = 1;
          ++found;
          continue;
        }
        const bool unwritten = is_poison(sorted->dtype, sorted->data, p, variant);
        sorted_verdicts.fail(p, got, padding, unwritten, [&] {
          const std::string where = at_text(p) + "in expert " + std::to_string(e) + "'s segment, ";
          if (unwritten) return where + "never written";
          if (!in_range) {
            return where + (reveal
                                ? "holds " + format_number(got) + ", neither a flat index below " +
                                      format_number(padding) + " nor the padding value"
                                : std::string("neither a flat index of topk_ids nor the "
                                              "padding value numel"));
          }
          if (expert_of[token] != e) {
            return where +
                   (reveal ? "holds flat index " + format_number(got) +
                                 ", which is routed to expert " + std::to_string(expert_of[token])
                           : std::string("holds a flat index routed to another expert"));
          }
          return where + (reveal ? "holds flat index " + format_number(got) + " a second time"
                                 : std::string("holds a flat index a second time"));
        });
      }
      if (found < counts[e]) {
        // Tokens of e are missing; blame the first padding slot that should have held one.
        const std::size_t p = first_padding < static_cast<std::size_t>(offsets[e + 1])
                                  ? first_padding
                                  : static_cast<std::size_t>(offsets[e]);
        sorted_verdicts.fail(p, element_of(*sorted, p), padding, false, [&] {
          return at_text(p) + "expert " + std::to_string(e) + "'s segment is missing " +
                 std::to_string(counts[e] - found) + " of its " + std::to_string(counts[e]) +
                 " flat indices";
        });
      }
    }
    for (auto p = static_cast<std::size_t>(total); p < sorted->count; ++p) {
      const double got = element_of(*sorted, p);
      if (got == padding) continue;
      const bool unwritten = is_poison(sorted->dtype, sorted->data, p, variant);
      sorted_verdicts.fail(p, got, padding, unwritten, [&] {
        return at_text(p) + (unwritten ? std::string("never written")
                                       : std::string("past num_tokens_post_pad; must hold the "
                                                     "padding value numel"));
      });
    }

    for (std::size_t i = 0; i < candidate.size(); ++i) {
      if (&candidate[i] == sorted) {
        reports[i] = sorted_verdicts.finish(
            "every expert's segment holds exactly its flat indices and the padding value, the "
            "tail holds the padding value",
            "each expert's segment: its flat indices once each, in any order, and numel in the "
            "other positions; numel past num_tokens_post_pad");
      } else if (&candidate[i] == blocks) {
        reports[i] = block_verdicts.finish(
            "every block names the expert of its segment, later blocks hold 0",
            "exact: the expert of each block of the padded layout, 0 past it");
      } else if (&candidate[i] == post_pad) {
        reports[i] = post_pad_verdicts.finish(
            "the padded total is right",
            "exact: the sum over experts of the count rounded up to block_size");
      } else {
        throw core::InternalError("moe_align checker: unexpected output '" +
                                  std::string(candidate[i].name) + "'");
      }
    }
    return reports;
  }
};

}  // namespace

const TaskChecker& moe_align_checker() {
  static const MoeAlignChecker checker;
  return checker;
}

}  // namespace crucible::judge
