// The remasking checker: accepts every right answer of world/llada_remask, where exactly tied
// maximum logits make several tokens right and tied scores several position sets, recomputing
// the scores in float64 from the inputs.
//
// Inputs by name: `logits` ([batch, seq_len, vocab], floating), `x` and `num_transfer_tokens`
// (integer), `noise` (floating); scalar `mask_id`. Outputs by name: `x0` (integer) and
// `transfer_index` (bool, i8 or u8: 1 chosen, 0 not), both [batch, seq_len]. A case without them is
// the server's misconfiguration, an InternalError.
//
// Rules, per row b (a position is masked when x == mask_id; k_b = min(num_transfer_tokens[b],
// masked count)):
//  - x0 at an unmasked position equals x exactly; at a masked one it is a token v < vocab whose
//    logit equals the position's maximum logit exactly.
//  - transfer_index holds 0 or 1 (any other byte is unwritten or garbage), is 1 at no unmasked
//    position and at exactly k_b masked ones.
//  - score = logit max - log(sum exp(logit)) + noise, in float64; two scores tie when they
//    differ by at most atol + rtol * max(|a|, |b|) (transfer_index's tolerance). No masked
//    position left out may score clearly above the lowest chosen one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"
#include "judge/checker_support.hpp"
#include "judge/task_checker.hpp"

namespace crucible::judge {
namespace {

std::string at_text(std::int64_t b, std::int64_t l) {
  return "row " + std::to_string(b) + ", position " + std::to_string(l) + ": ";
}

class LladaRemaskChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    const auto candidate = request.candidate;
    const HostTensorView* logits = find_named(request.inputs, "logits");
    const HostTensorView* x = find_named(request.inputs, "x");
    const HostTensorView* noise = find_named(request.inputs, "noise");
    const HostTensorView* want = find_named(request.inputs, "num_transfer_tokens");
    const HostTensorView* x0 = find_named(candidate, "x0");
    const HostTensorView* transfer = find_named(candidate, "transfer_index");
    if (candidate.size() != 2 || request.tolerances.size() != 2 || logits == nullptr ||
        x == nullptr || noise == nullptr || want == nullptr || x0 == nullptr ||
        transfer == nullptr || logits->shape.size() != 3 ||
        core::dtype_size(transfer->dtype) != 1 || core::dtype_is_floating(transfer->dtype) ||
        core::dtype_is_floating(x0->dtype) || core::dtype_is_floating(x->dtype)) {
      throw core::InternalError(
          "llada_remask checker: needs logits [batch, seq_len, vocab], x, noise, "
          "num_transfer_tokens and the outputs x0 (integer) and transfer_index (one byte a flag)");
    }
    const std::int64_t batch = logits->shape[0];
    const std::int64_t length = logits->shape[1];
    const std::int64_t vocab = logits->shape[2];
    const auto rows = static_cast<std::size_t>(batch * length);
    if (x->count != rows || noise->count != rows || x0->count != rows || transfer->count != rows ||
        want->count != static_cast<std::size_t>(batch)) {
      throw core::InternalError("llada_remask checker: tensor sizes disagree with logits' shape");
    }
    if (request.scalars == nullptr || request.scalars->count("mask_id") == 0) {
      throw core::InternalError("llada_remask checker: case without scalar 'mask_id'");
    }
    const double mask_id = request.scalars->at("mask_id");
    const Tolerance tie = request.tolerances[candidate[0].name == "transfer_index" ? 0 : 1];
    const bool reveal = request.reveal_values;
    const int variant = request.poison_variant;
    const auto* flags = static_cast<const std::uint8_t*>(transfer->data);

    Failures token_failures(*x0, Tolerance{0.0, 0.0}, reveal);
    Failures pick_failures(*transfer, tie, reveal);
    std::vector<double> score(static_cast<std::size_t>(length));
    std::vector<double> max_logit(static_cast<std::size_t>(length));
    for (std::int64_t b = 0; b < batch; ++b) {
      std::int64_t masked = 0;
      for (std::int64_t l = 0; l < length; ++l) {
        const auto row = static_cast<std::size_t>(b * length + l);
        const double token = element_of(*x, row);
        const double got = element_of(*x0, row);
        if (token != mask_id) {
          if (got != token) {
            const bool unwritten = is_poison(x0->dtype, x0->data, row, variant);
            token_failures.fail(row, got, token, unwritten, [&] {
              return at_text(b, l) + (unwritten ? std::string("never written")
                                                : std::string("not masked, so x0 must equal x"));
            });
          }
          continue;
        }
        ++masked;
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t v = 0; v < vocab; ++v) {
          top = std::max(top, element_of(*logits, row * static_cast<std::size_t>(vocab) + v));
        }
        double sum = 0.0;
        for (std::int64_t v = 0; v < vocab; ++v) {
          sum += std::exp(element_of(*logits, row * static_cast<std::size_t>(vocab) + v) - top);
        }
        max_logit[l] = top;
        score[l] = element_of(*noise, row) - std::log(sum);
        const bool in_range =
            got >= 0.0 && got < static_cast<double>(vocab) && got == std::trunc(got);
        const bool is_max =
            in_range && element_of(*logits, row * static_cast<std::size_t>(vocab) +
                                                static_cast<std::size_t>(got)) == top;
        if (!is_max) {
          const bool unwritten = is_poison(x0->dtype, x0->data, row, variant);
          token_failures.fail(row, got, element_of(*x0, row), unwritten, [&] {
            if (unwritten) return at_text(b, l) + "never written";
            if (!in_range) return at_text(b, l) + "not a token id below vocab";
            return at_text(b, l) +
                   (reveal ? "token " + format_number(got) + " has logit " +
                                 format_number(
                                     element_of(*logits, row * static_cast<std::size_t>(vocab) +
                                                             static_cast<std::size_t>(got))) +
                                 ", below the position's maximum " + format_number(top)
                           : std::string("not a token of the position's maximum logit"));
          });
        }
      }

      // transfer_index of row b.
      const double wanted = element_of(*want, static_cast<std::size_t>(b));
      const std::int64_t k =
          std::min<std::int64_t>(wanted > 0.0 ? static_cast<std::int64_t>(wanted) : 0, masked);
      std::int64_t chosen = 0;
      double lowest_chosen = std::numeric_limits<double>::infinity();
      bool row_readable = true;
      for (std::int64_t l = 0; l < length; ++l) {
        const auto row = static_cast<std::size_t>(b * length + l);
        const std::uint8_t flag = flags[row];
        const bool is_masked = element_of(*x, row) == mask_id;
        if (flag > 1) {
          row_readable = false;
          const bool unwritten = is_poison(transfer->dtype, transfer->data, row, variant);
          pick_failures.fail(row, flag, 0.0, unwritten, [&] {
            return at_text(b, l) +
                   (unwritten ? std::string("never written") : std::string("must hold 0 or 1"));
          });
          continue;
        }
        if (flag == 0) continue;
        if (!is_masked) {
          row_readable = false;
          pick_failures.fail(row, 1.0, 0.0, false, [&] {
            return at_text(b, l) + "chosen, but the position is not masked";
          });
          continue;
        }
        ++chosen;
        lowest_chosen = std::min(lowest_chosen, score[l]);
      }
      if (!row_readable) continue;
      if (chosen != k) {
        const auto first = static_cast<std::size_t>(b * length);
        pick_failures.fail(first, static_cast<double>(chosen), static_cast<double>(k), false, [&] {
          return "row " + std::to_string(b) + ": " + std::to_string(chosen) +
                 " positions chosen, expected min(num_transfer_tokens, masked positions) = " +
                 std::to_string(k);
        });
        continue;
      }
      for (std::int64_t l = 0; l < length && chosen > 0; ++l) {
        const auto row = static_cast<std::size_t>(b * length + l);
        if (flags[row] != 0 || element_of(*x, row) != mask_id) continue;
        const double a = score[l];
        const bool tied = std::fabs(a - lowest_chosen) <=
                          tie.atol + tie.rtol * std::max(std::fabs(a), std::fabs(lowest_chosen));
        if (a > lowest_chosen && !tied) {
          pick_failures.fail(row, 0.0, 1.0, false, [&] {
            return at_text(b, l) +
                   (reveal ? "left out with score " + format_number(a) +
                                 ", clearly above the lowest chosen score " +
                                 format_number(lowest_chosen)
                           : std::string("left out, but its score is clearly above a chosen "
                                         "position's"));
          });
        }
      }
    }

    std::vector<CompareReport> reports(2);
    for (std::size_t i = 0; i < 2; ++i) {
      if (&candidate[i] == x0) {
        reports[i] = token_failures.finish(
            "every masked position proposes a token of its maximum logit, the others keep x",
            "a token of the maximum logit at masked positions, x elsewhere");
      } else {
        reports[i] = pick_failures.finish(
            "every row unmasks min(k, masked) positions of top score (ties free)",
            "exactly min(num_transfer_tokens, masked) masked positions a row, none left out "
            "scoring clearly above a chosen one");
      }
    }
    return reports;
  }
};

}  // namespace

const TaskChecker& llada_remask_checker() {
  static const LladaRemaskChecker checker;
  return checker;
}

}  // namespace crucible::judge
