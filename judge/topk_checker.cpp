// The top-k routing checker: accepts every right answer of llm/topk_softmax and llm/grouped_topk
// under ties, recomputing the op's ranking in float64 from the case's inputs.
//
// Which op: a case with an input named `e_score_correction_bias` is grouped_topk (sigmoid
// scores, bias-corrected choice, groups; scalars num_expert_group, topk_group, renormalize and
// routed_scaling_factor must be in the request), any other case is topk_softmax (softmax over
// `gating_output`). Outputs are found by name: `topk_weights` and `topk_indices` (or
// `topk_ids`) are required, `token_expert_indices` is checked when present. A case that lacks
// them is the server's misconfiguration, an InternalError.
//
// Rules, per token row (k = the weights' last dimension, E = the logits' last dimension):
//  - ids: every slot written, 0 <= id < E, no id twice in the row.
//  - tie: two scores a, b tie when |a - b| <= atol + rtol * max(|a|, |b|), with the tolerance
//    of topk_weights; "clearly higher" means higher and not tied.
//  - topk_softmax top-k rule: no expert left out has a probability clearly higher than a
//    chosen one (compared at the extremes: the best left out against the worst chosen).
//  - grouped_topk: there must be a selection of topk_group groups, holding every chosen
//    expert, that is a top-topk_group selection of group scores (the best group left out is
//    not clearly above the worst kept) and within which no expert left out has a choice score
//    clearly above the worst chosen one. Such a selection exists iff the greedy one does: the
//    chosen experts' groups, topped up with the best-scoring groups whose left-out experts all
//    tie with or lie below the worst chosen expert.
//  - weights: each weight within tolerance of the float64 weight of the expert in its slot
//    (topk_softmax: its probability; grouped_topk: its sigmoid score, divided by the sum over
//    the row's chosen experts when renormalize is non-zero, times routed_scaling_factor);
//    topk_softmax also wants them in non-increasing order (a weight clearly above the one
//    before it fails). grouped_topk leaves the order free, as vLLM's torch.topk(sorted=False)
//    does. A weight whose slot holds an unusable id (or, for grouped_topk, any weight of a row
//    with an unusable id) is not judged by value: the ids report fails instead.
//  - token_expert_indices[t, j] == j * num_tokens + t exactly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"
#include "judge/task_checker.hpp"

namespace crucible::judge {
namespace {

using core::DType;

std::string tolerance_text(const Tolerance& tol) {
  return "atol " + format_number(tol.atol) + " + rtol " + format_number(tol.rtol) + " * |value|";
}

// Finds a tensor by name; nullptr when absent.
const HostTensorView* find_view(std::span<const HostTensorView> views, std::string_view name) {
  for (const auto& view : views) {
    if (view.name == name) return &view;
  }
  return nullptr;
}

std::optional<std::size_t> find_index(std::span<const HostTensorView> views,
                                      std::string_view name) {
  for (std::size_t i = 0; i < views.size(); ++i) {
    if (views[i].name == name) return i;
  }
  return std::nullopt;
}

double element(const HostTensorView& view, std::size_t index) {
  return core::element_as_double(view.dtype, view.data, index);
}

// Two scores tie when they are within the tolerance of each other.
struct TieRule {
  Tolerance tol;
  bool tied(double a, double b) const {
    return std::fabs(a - b) <= tol.atol + tol.rtol * std::max(std::fabs(a), std::fabs(b));
  }
  bool clearly_above(double a, double b) const { return a > b && !tied(a, b); }
};

// The failures of one output tensor, folded into a CompareReport at the end. Only the first
// failure's sentence is built.
class Tally {
 public:
  Tally(const HostTensorView& view, const Tolerance& tol, bool reveal) {
    report_.output_name = std::string(view.name);
    report_.count = view.count;
    report_.tolerance = tol;
    report_.values_revealed = reveal;
    shape_ = view.shape;
  }

  template <class Reason>
  void fail(std::size_t index, double got, double expected, bool unwritten, bool nan,
            Reason&& reason) {
    if (report_.mismatches == 0) {
      report_.first_mismatch = index;
      report_.first_mismatch_coords = flat_to_coords(index, report_.count, shape_);
      report_.first_got = got;
      report_.first_expected = expected;
      first_reason_ = reason();
    }
    ++report_.mismatches;
    if (unwritten) ++report_.unwritten;
    if (nan) ++report_.nan_mismatches;
  }

  void error(double got, double expected) {
    const double abs_error = std::fabs(got - expected);
    report_.max_abs_error = std::max(report_.max_abs_error, abs_error);
    if (expected != 0.0) {
      report_.max_rel_error = std::max(report_.max_rel_error, abs_error / std::fabs(expected));
    }
  }

  CompareReport& report() { return report_; }

  // `pass_text`: what a passing tensor satisfies; `rule_text`: the rule named in a failure.
  CompareReport finish(const std::string& pass_text, const std::string& rule_text) {
    const std::string head = "output '" + report_.output_name + "': ";
    if (!report_.values_revealed) {
      report_.first_got = 0.0;
      report_.first_expected = 0.0;
      report_.max_abs_error = 0.0;
      report_.max_rel_error = 0.0;
    }
    if (report_.reference_invalid()) {
      report_.pass = false;
      report_.summary = head + "the reference produced " + std::to_string(report_.reference_nans) +
                        " NaN value(s); this is a server-side fault (infra_error), not the "
                        "candidate's";
      return report_;
    }
    report_.pass = report_.mismatches == 0 && !report_.all_zero;
    if (report_.count == 0) {
      report_.summary = head + "empty, nothing to check";
    } else if (report_.pass) {
      report_.summary = head + pass_text;
    } else if (report_.mismatches == 0) {
      report_.summary = head +
                        "every weight is zero while the chosen experts' weights are not; "
                        "compute the real result";
    } else {
      report_.summary = head + std::to_string(report_.mismatches) + " of " +
                        std::to_string(report_.count) + " elements fail (" + rule_text +
                        "); first: " + first_reason_ + "; " + std::to_string(report_.unwritten) +
                        " unwritten";
      if (report_.nan_mismatches > 0) {
        report_.summary += "; " + std::to_string(report_.nan_mismatches) + " NaN/Inf";
      }
      if (report_.all_zero) report_.summary += "; the whole output is zero";
    }
    return report_;
  }

 private:
  CompareReport report_;
  std::vector<std::int64_t> shape_;
  std::string first_reason_;
};

// What the op is and the parameters the rules need.
struct Problem {
  bool grouped = false;
  std::int64_t tokens = 0;
  std::int64_t experts = 0;
  std::int64_t k = 0;
  std::int64_t groups = 1;
  std::int64_t kept_groups = 1;
  bool renormalize = false;
  double scaling = 1.0;
};

double required_scalar(const TaskCheckRequest& request, const std::string& name) {
  if (request.scalars == nullptr || request.scalars->count(name) == 0) {
    throw core::InternalError("topk checker: grouped_topk case without scalar '" + name + "'");
  }
  return request.scalars->at(name);
}

// Why a slot of the ids fails; the sentence is built only for the first failure.
enum class IdFault {
  kNone,
  kUnwritten,
  kInvalid,
  kDuplicate,
  kOutscored,  // an expert left out scores clearly higher than this chosen one
  kTooManyGroups,
  kGroupNotTop,  // this expert's group is not among the top groups
};

struct SlotVerdict {
  IdFault fault = IdFault::kNone;
  std::int64_t other_expert = -1;   // kDuplicate: the earlier slot; kOutscored: the expert left out
  std::int64_t group = -1;          // this expert's group
  std::int64_t other_group = -1;    // kGroupNotTop: the group that outscores it
  bool must_keep = false;           // kOutscored in grouped_topk: left-out expert's group
  std::int64_t groups_spanned = 0;  // kTooManyGroups: groups the chosen experts lie in
};

class RowChecker {
 public:
  RowChecker(const Problem& problem, const TieRule& tie) : p_(problem), tie_(tie) {
    rank_score_.resize(static_cast<std::size_t>(p_.experts));
    weight_score_.resize(static_cast<std::size_t>(p_.experts));
    chosen_.resize(static_cast<std::size_t>(p_.experts));
    group_score_.resize(static_cast<std::size_t>(p_.groups));
  }

  // Float64 scores of one row: the ranking score (probability, or choice score) and the score
  // a weight is made from (probability, or sigmoid score); grouped: the group scores.
  void score_row(const HostTensorView& gating, const HostTensorView* bias, std::int64_t row) {
    const std::size_t base = static_cast<std::size_t>(row * p_.experts);
    if (!p_.grouped) {
      double row_max = -std::numeric_limits<double>::infinity();
      for (std::int64_t e = 0; e < p_.experts; ++e) {
        rank_score_[e] = element(gating, base + e);
        row_max = std::max(row_max, rank_score_[e]);
      }
      double sum = 0.0;
      for (std::int64_t e = 0; e < p_.experts; ++e) {
        rank_score_[e] = std::exp(rank_score_[e] - row_max);
        sum += rank_score_[e];
      }
      for (std::int64_t e = 0; e < p_.experts; ++e) {
        rank_score_[e] /= sum;
        weight_score_[e] = rank_score_[e];
      }
      return;
    }
    for (std::int64_t e = 0; e < p_.experts; ++e) {
      weight_score_[e] = 1.0 / (1.0 + std::exp(-element(gating, base + e)));
      rank_score_[e] = weight_score_[e] + element(*bias, static_cast<std::size_t>(e));
    }
    const std::int64_t size = group_size();
    for (std::int64_t q = 0; q < p_.groups; ++q) {
      double first = -std::numeric_limits<double>::infinity();
      double second = first;
      for (std::int64_t e = q * size; e < (q + 1) * size; ++e) {
        const double c = rank_score_[e];
        if (c > first) {
          second = first;
          first = c;
        } else if (c > second) {
          second = c;
        }
      }
      group_score_[q] = first + second;
    }
  }

  // Verdicts for the k ids of one row (`ids[j]` < 0 marks an unwritten or invalid slot, which
  // `verdicts` already records).
  void judge_ids(const std::vector<std::int64_t>& ids, std::vector<SlotVerdict>& verdicts) {
    std::fill(chosen_.begin(), chosen_.end(), 0);
    bool usable = true;
    for (std::int64_t j = 0; j < p_.k; ++j) {
      if (verdicts[j].fault != IdFault::kNone) {
        usable = false;
        continue;
      }
      const std::int64_t id = ids[j];
      if (chosen_[id] != 0) {
        verdicts[j].fault = IdFault::kDuplicate;
        verdicts[j].other_expert = chosen_[id] - 1;  // the earlier slot
        usable = false;
        continue;
      }
      chosen_[id] = static_cast<std::int64_t>(j) + 1;
    }
    if (!usable) return;
    if (p_.grouped) {
      judge_grouped(ids, verdicts);
    } else {
      judge_plain(ids, verdicts);
    }
  }

  double rank_score(std::int64_t e) const { return rank_score_[e]; }
  double weight_score(std::int64_t e) const { return weight_score_[e]; }
  double group_score(std::int64_t q) const { return group_score_[q]; }
  std::int64_t group_size() const { return p_.experts / p_.groups; }

 private:
  // Marks every chosen slot whose expert `outscorer` clearly beats.
  void condemn_outscored(const std::vector<std::int64_t>& ids, std::int64_t outscorer,
                         bool must_keep, std::vector<SlotVerdict>& verdicts) const {
    for (std::int64_t j = 0; j < p_.k; ++j) {
      if (tie_.clearly_above(rank_score_[outscorer], rank_score_[ids[j]])) {
        verdicts[j].fault = IdFault::kOutscored;
        verdicts[j].other_expert = outscorer;
        verdicts[j].must_keep = must_keep;
        verdicts[j].group = ids[j] / group_size();
        verdicts[j].other_group = outscorer / group_size();
      }
    }
  }

  void judge_plain(const std::vector<std::int64_t>& ids, std::vector<SlotVerdict>& verdicts) {
    std::int64_t best_left_out = -1;
    for (std::int64_t e = 0; e < p_.experts; ++e) {
      if (chosen_[e] == 0 && (best_left_out < 0 || rank_score_[e] > rank_score_[best_left_out])) {
        best_left_out = e;
      }
    }
    if (best_left_out >= 0) condemn_outscored(ids, best_left_out, false, verdicts);
  }

  void judge_grouped(const std::vector<std::int64_t>& ids, std::vector<SlotVerdict>& verdicts) {
    const std::int64_t size = group_size();
    std::vector<char> used(static_cast<std::size_t>(p_.groups), 0);
    std::int64_t worst_chosen = ids[0];
    for (std::int64_t j = 0; j < p_.k; ++j) {
      used[ids[j] / size] = 1;
      if (rank_score_[ids[j]] < rank_score_[worst_chosen]) worst_chosen = ids[j];
    }
    // Groups ordered best first (exact ties: lower index), for the greedy completion.
    std::vector<std::int64_t> order(static_cast<std::size_t>(p_.groups));
    for (std::int64_t q = 0; q < p_.groups; ++q) order[q] = q;
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return group_score_[a] > group_score_[b];
    });
    const auto used_count = static_cast<std::int64_t>(std::count(used.begin(), used.end(), 1));
    if (used_count > p_.kept_groups) {
      // The used groups beyond the best kept_groups of them cannot all be kept.
      std::int64_t seen = 0;
      for (const std::int64_t q : order) {
        if (!used[q]) continue;
        if (++seen <= p_.kept_groups) continue;
        for (std::int64_t j = 0; j < p_.k; ++j) {
          if (ids[j] / size != q) continue;
          verdicts[j].fault = IdFault::kTooManyGroups;
          verdicts[j].group = q;
          verdicts[j].groups_spanned = used_count;
        }
      }
      return;
    }
    // The best expert left out of each group; a group may be kept only if that expert does not
    // clearly beat the worst chosen one.
    std::vector<std::int64_t> best_left_out(static_cast<std::size_t>(p_.groups), -1);
    for (std::int64_t e = 0; e < p_.experts; ++e) {
      if (chosen_[e] != 0) continue;
      std::int64_t& best = best_left_out[e / size];
      if (best < 0 || rank_score_[e] > rank_score_[best]) best = e;
    }
    auto allowed = [&](std::int64_t q) {
      return best_left_out[q] < 0 ||
             !tie_.clearly_above(rank_score_[best_left_out[q]], rank_score_[worst_chosen]);
    };
    for (const std::int64_t q : order) {
      if (used[q] && !allowed(q)) {
        condemn_outscored(ids, best_left_out[q], true, verdicts);
        return;
      }
    }
    std::vector<char> kept = used;
    std::int64_t missing = p_.kept_groups - used_count;
    for (const std::int64_t q : order) {
      if (missing == 0) break;
      if (!kept[q] && allowed(q)) {
        kept[q] = 1;
        --missing;
      }
    }
    if (missing > 0) {
      // Too few groups can be kept: the best group that cannot holds a left-out expert that
      // beats a chosen one.
      for (const std::int64_t q : order) {
        if (!kept[q] && !allowed(q)) {
          condemn_outscored(ids, best_left_out[q], true, verdicts);
          return;
        }
      }
      return;
    }
    std::int64_t best_out = -1;
    std::int64_t worst_in = -1;
    for (const std::int64_t q : order) {
      if (kept[q]) {
        worst_in = q;  // the last kept group in best-first order
      } else if (best_out < 0) {
        best_out = q;
      }
    }
    if (best_out < 0 || !tie_.clearly_above(group_score_[best_out], group_score_[worst_in])) {
      return;  // a valid selection
    }
    if (used[worst_in]) {
      for (std::int64_t j = 0; j < p_.k; ++j) {
        if (ids[j] / size != worst_in) continue;
        verdicts[j].fault = IdFault::kGroupNotTop;
        verdicts[j].group = worst_in;
        verdicts[j].other_group = best_out;
      }
    } else {
      // The greedy completion passed over best_out because it holds an expert left out that
      // beats a chosen one.
      condemn_outscored(ids, best_left_out[best_out], true, verdicts);
    }
  }

  const Problem& p_;
  TieRule tie_;
  std::vector<double> rank_score_;
  std::vector<double> weight_score_;
  std::vector<std::int64_t> chosen_;  // slot + 1 of each chosen expert, 0 when not chosen
  std::vector<double> group_score_;
};

std::string slot_text(std::int64_t row, std::int64_t slot) {
  return "row " + std::to_string(row) + ", slot " + std::to_string(slot) + ": ";
}

// The sentence for a failing id slot; numbers other than the row and slot only if `reveal`.
std::string id_reason(const SlotVerdict& v, std::int64_t row, std::int64_t slot, std::int64_t id,
                      const Problem& p, const RowChecker& scores, bool reveal) {
  const std::string at = slot_text(row, slot);
  const std::string score_name = p.grouped ? "choice score" : "probability";
  switch (v.fault) {
    case IdFault::kUnwritten:
      return at + "never written";
    case IdFault::kInvalid:
      return reveal ? at + "expert id " + std::to_string(id) + " is not in [0, " +
                          std::to_string(p.experts) + ")"
                    : at + "not a valid expert id";
    case IdFault::kDuplicate:
      return reveal ? at + "expert " + std::to_string(id) + " already chosen in slot " +
                          std::to_string(v.other_expert)
                    : at + "repeats an expert chosen earlier in the row";
    case IdFault::kOutscored:
      if (!reveal) {
        return at + "the chosen expert's " + score_name + " is clearly lower than that of an " +
               (v.must_keep ? "expert left out of a group that must be kept" : "expert left out") +
               " (top-k rule)";
      }
      return at + "expert " + std::to_string(id) + " chosen but expert " +
             std::to_string(v.other_expert) +
             (v.must_keep ? " (group " + std::to_string(v.other_group) + ", which must be kept)"
                          : std::string()) +
             " has a higher " + score_name + " (" +
             format_number(scores.rank_score(v.other_expert)) + " > " +
             format_number(scores.rank_score(id)) + ")";
    case IdFault::kTooManyGroups:
      return reveal ? at + "expert " + std::to_string(id) + " lies in group " +
                          std::to_string(v.group) + ", but the chosen experts span " +
                          std::to_string(v.groups_spanned) + " groups and only " +
                          std::to_string(p.kept_groups) + " are kept (group rule)"
                    : at + "the chosen experts span more groups than are kept (group rule)";
    case IdFault::kGroupNotTop:
      return reveal ? at + "expert " + std::to_string(id) + " lies in group " +
                          std::to_string(v.group) + ", which is not among the top " +
                          std::to_string(p.kept_groups) + " groups: group " +
                          std::to_string(v.other_group) + " scores higher (" +
                          format_number(scores.group_score(v.other_group)) + " > " +
                          format_number(scores.group_score(v.group)) + ")"
                    : at + "the chosen expert's group is not among the top groups (group rule)";
    case IdFault::kNone:
      break;
  }
  return at + "fails";
}

class TopKChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    const auto candidate = request.candidate;
    const auto reference = request.reference;
    if (reference.size() != candidate.size() || request.tolerances.size() != candidate.size()) {
      throw core::InternalError("topk checker: candidate, reference and tolerances differ in size");
    }
    const auto weights_at = find_index(candidate, "topk_weights");
    auto ids_at = find_index(candidate, "topk_indices");
    if (!ids_at) ids_at = find_index(candidate, "topk_ids");
    const auto token_expert_at = find_index(candidate, "token_expert_indices");
    if (!weights_at || !ids_at) {
      throw core::InternalError("topk checker: needs outputs topk_weights and topk_indices/ids");
    }
    for (std::size_t i = 0; i < candidate.size(); ++i) {
      if (i != *weights_at && i != *ids_at && (!token_expert_at || i != *token_expert_at)) {
        throw core::InternalError("topk checker: unexpected output '" +
                                  std::string(candidate[i].name) + "'");
      }
    }
    const HostTensorView* gating = find_view(request.inputs, "gating_output");
    const HostTensorView* bias = find_view(request.inputs, "e_score_correction_bias");
    if (gating == nullptr || gating->shape.empty() || !core::dtype_is_floating(gating->dtype)) {
      throw core::InternalError("topk checker: needs a floating input gating_output");
    }

    const HostTensorView& weights = candidate[*weights_at];
    const HostTensorView& ids = candidate[*ids_at];
    Problem p;
    p.grouped = bias != nullptr;
    p.experts = gating->shape.back();
    p.k = weights.shape.empty() ? 0 : weights.shape.back();
    if (p.experts <= 0 || p.k <= 0 || p.k > p.experts || !core::dtype_is_floating(weights.dtype) ||
        core::dtype_is_floating(ids.dtype) ||
        gating->count % static_cast<std::size_t>(p.experts) != 0) {
      throw core::InternalError("topk checker: inconsistent shapes or dtypes");
    }
    p.tokens = static_cast<std::int64_t>(gating->count) / p.experts;
    const auto row_elements = static_cast<std::size_t>(p.tokens * p.k);
    if (weights.count != row_elements || ids.count != row_elements ||
        (token_expert_at && candidate[*token_expert_at].count != row_elements)) {
      throw core::InternalError("topk checker: outputs are not [num_tokens, topk]");
    }
    if (p.grouped) {
      p.groups = static_cast<std::int64_t>(required_scalar(request, "num_expert_group"));
      p.kept_groups = static_cast<std::int64_t>(required_scalar(request, "topk_group"));
      p.renormalize = required_scalar(request, "renormalize") != 0.0;
      p.scaling = required_scalar(request, "routed_scaling_factor");
      if (bias->count != static_cast<std::size_t>(p.experts) || p.groups < 1 ||
          p.experts % p.groups != 0 || p.experts / p.groups < 2 || p.kept_groups < 1 ||
          p.kept_groups > p.groups || p.k > p.kept_groups * (p.experts / p.groups)) {
        throw core::InternalError("topk checker: grouped_topk parameters do not fit the shapes");
      }
    }

    const Tolerance weight_tol = request.tolerances[*weights_at];
    const TieRule tie{weight_tol};
    const bool reveal = request.reveal_values;
    const int variant = request.poison_variant;
    Tally weight_tally(weights, weight_tol, reveal);
    Tally id_tally(ids, request.tolerances[*ids_at], reveal);
    std::optional<Tally> token_expert_tally;
    if (token_expert_at) {
      token_expert_tally.emplace(candidate[*token_expert_at], request.tolerances[*token_expert_at],
                                 reveal);
    }

    // A reference that wrote NaN weights is broken: the server's fault.
    const HostTensorView& reference_weights = reference[*weights_at];
    const HostTensorView& reference_ids = reference[*ids_at];
    for (std::size_t i = 0; i < reference_weights.count; ++i) {
      if (std::isnan(element(reference_weights, i))) ++weight_tally.report().reference_nans;
    }

    RowChecker rows(p, tie);
    std::vector<std::int64_t> row_ids(static_cast<std::size_t>(p.k));
    std::vector<SlotVerdict> verdicts(static_cast<std::size_t>(p.k));
    bool candidate_nonzero = false;
    bool expected_nonzero = false;
    for (std::int64_t t = 0; t < p.tokens; ++t) {
      rows.score_row(*gating, bias, t);
      const std::size_t base = static_cast<std::size_t>(t * p.k);

      // Ids: written, valid, distinct; then the set rules.
      for (std::int64_t j = 0; j < p.k; ++j) {
        verdicts[j] = SlotVerdict{};
        row_ids[j] = -1;
        if (is_poison(ids.dtype, ids.data, base + j, variant)) {
          verdicts[j].fault = IdFault::kUnwritten;
          continue;
        }
        const double id = element(ids, base + j);
        if (!(id >= 0.0 && id < static_cast<double>(p.experts))) {
          verdicts[j].fault = IdFault::kInvalid;
          row_ids[j] = static_cast<std::int64_t>(std::clamp(id, -1e18, 1e18));
          continue;
        }
        row_ids[j] = static_cast<std::int64_t>(id);
      }
      rows.judge_ids(row_ids, verdicts);
      bool row_usable = true;
      for (std::int64_t j = 0; j < p.k; ++j) {
        const IdFault fault = verdicts[j].fault;
        if (fault == IdFault::kUnwritten || fault == IdFault::kInvalid ||
            fault == IdFault::kDuplicate) {
          row_usable = false;
        }
        if (fault == IdFault::kNone) continue;
        id_tally.fail(base + j, element(ids, base + j), element(reference_ids, base + j),
                      fault == IdFault::kUnwritten, false,
                      [&] { return id_reason(verdicts[j], t, j, row_ids[j], p, rows, reveal); });
      }

      // Weights: the float64 weight of the expert in each slot.
      double normaliser = 1.0;
      if (p.grouped && p.renormalize && row_usable) {
        normaliser = 0.0;
        for (std::int64_t j = 0; j < p.k; ++j) normaliser += rows.weight_score(row_ids[j]);
      }
      double previous = std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < p.k; ++j) {
        const std::size_t index = base + j;
        const double got = element(weights, index);
        const double reference_value = element(reference_weights, index);
        const bool id_usable = p.grouped ? row_usable
                                         : (verdicts[j].fault == IdFault::kNone ||
                                            verdicts[j].fault == IdFault::kOutscored);
        const double expected =
            id_usable ? rows.weight_score(row_ids[j]) / normaliser * p.scaling : reference_value;
        if (id_usable) expected_nonzero |= expected != 0.0;
        if (is_poison(weights.dtype, weights.data, index, variant)) {
          weight_tally.fail(index, got, expected, true, false,
                            [&] { return slot_text(t, j) + "never written"; });
          previous = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        candidate_nonzero |= !(got == 0.0);
        if (!std::isfinite(got)) {
          weight_tally.fail(index, got, expected, false, true,
                            [&] { return slot_text(t, j) + "NaN or Inf"; });
          previous = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        if (id_usable) {
          weight_tally.error(got, expected);
          if (!(std::fabs(got - expected) <=
                weight_tol.atol + weight_tol.rtol * std::fabs(expected))) {
            weight_tally.fail(index, got, expected, false, false, [&] {
              return reveal ? slot_text(t, j) + "weight " + format_number(got) + " but expert " +
                                  std::to_string(row_ids[j]) + "'s weight is " +
                                  format_number(expected)
                            : slot_text(t, j) +
                                  "the weight is not the float64 weight of the expert in the "
                                  "slot within tolerance";
            });
            previous = got;
            continue;
          }
        }
        // topk_softmax lists the experts largest first; a tie may come in either order.
        if (!p.grouped && j > 0 && std::isfinite(previous) && tie.clearly_above(got, previous)) {
          weight_tally.fail(index, got, expected, false, false, [&] {
            return reveal ? slot_text(t, j) + "weight " + format_number(got) +
                                " is larger than the one before it (" + format_number(previous) +
                                "); weights must be in non-increasing order"
                          : slot_text(t, j) +
                                "the weight is larger than the one before it; weights must be "
                                "in non-increasing order";
          });
        }
        previous = got;
      }

      // token_expert_indices: slot j of token t is row j * num_tokens + t.
      if (token_expert_tally) {
        const HostTensorView& view = candidate[*token_expert_at];
        for (std::int64_t j = 0; j < p.k; ++j) {
          const std::size_t index = base + j;
          const auto expected = static_cast<double>(j * p.tokens + t);
          if (is_poison(view.dtype, view.data, index, variant)) {
            token_expert_tally->fail(index, element(view, index), expected, true, false,
                                     [&] { return slot_text(t, j) + "never written"; });
            continue;
          }
          const double got = element(view, index);
          if (got != expected) {
            token_expert_tally->fail(index, got, expected, false, false, [&] {
              return reveal ? slot_text(t, j) + "got " + format_number(got) + ", expected slot * " +
                                  "num_tokens + token = " + format_number(expected)
                            : slot_text(t, j) + "not slot * num_tokens + token";
            });
          }
        }
      }
    }
    weight_tally.report().all_zero = !candidate_nonzero && expected_nonzero;

    const std::string ties = "ties within " + tolerance_text(weight_tol) + " in any order";
    const std::string score_name = p.grouped ? "choice score" : "probability";
    std::vector<CompareReport> reports(candidate.size());
    reports[*weights_at] = weight_tally.finish(
        "all " + std::to_string(weights.count) + " weights match the chosen experts' float64 " +
            "weights (" + tolerance_text(weight_tol) + ")" + (p.grouped ? "" : ", largest first"),
        "each weight must be the float64 weight of the expert in its slot within " +
            tolerance_text(weight_tol) + (p.grouped ? "" : ", largest first"));
    reports[*ids_at] = id_tally.finish(
        "every row is a valid top-" + std::to_string(p.k) + " choice (" + ties + ")",
        "distinct valid expert ids forming a top-" + std::to_string(p.k) + " set by " + score_name +
            (p.grouped ? " within the top groups" : "") + "; " + ties);
    if (token_expert_tally) {
      reports[*token_expert_at] =
          token_expert_tally->finish("all " + std::to_string(candidate[*token_expert_at].count) +
                                         " elements equal slot * num_tokens + token",
                                     "each element must equal slot * num_tokens + token exactly");
    }
    return reports;
  }
};

}  // namespace

const TaskChecker& topk_checker() {
  static const TopKChecker checker;
  return checker;
}

}  // namespace crucible::judge
