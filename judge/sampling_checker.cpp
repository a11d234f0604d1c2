// The sampling checker: accepts every right answer of llm/top_k_top_p_sampling_from_logits, a
// token per row whose probability interval under the top-k then top-p filtered softmax holds the
// row's uniform draw, within fp32 accumulation error (kernels sum up to 10^5 weights in fp32 in
// any order, so neither the nucleus boundary nor the interval ends are exact).
//
// Inputs by name: `logits` (floating, [batch, vocab]), `uniform_samples` ([batch]), `top_k`
// (integer, [batch]), `top_p` ([batch]). Output: `samples` (integer, [batch]). A case without
// them is the server's misconfiguration, an InternalError.
//
// For row b (the task's description has the definitions of w, K, Z_K, N and Z_N), a token s
// passes when:
//  - 0 <= s < vocab and s is in K exactly (logit comparisons are exact);
//  - for some top-p threshold p' in [p - d, p + d] (d = kDrawTolerance), s is in the nucleus N'
//    of p' and u * Z_N' lies in [C'(s) - w[s] - d * Z_N', C'(s) + d * Z_N'], C'(s) the sum of w
//    over the tokens of N' up to and including s in vocabulary order. The nuclei of [p - d,
//    p + d] are N(p - d), N(p + d) and every nucleus between them that differs by whole levels;
//    each is tried with its own Z_N' and C'(s). p >= 1 is no top-p filter: N' = K exactly.
// Why every nucleus in between, not only N(p - d), N(p) and N(p + d): a kernel's fp32 sums put
// the boundary level on either side of p * Z_K when its mass-above is within their error of it,
// giving N(p) plus or minus one level. In a flat row (10^5 tokens of about 10^-5 of the mass
// each, h_flat_large_nucleus) several levels lie within d of p, so that nucleus is neither
// N(p) nor N(p + d); judged against N(p + d), a boundary token's interval moves by the mass of
// the levels N(p + d) adds in front of it, up to d * Z_K, which is d / p of Z_N, more than the
// draw tolerance (tests/judge/test_sampling_checker.cpp has such a row).
// d is relative to the filtered mass. The reference kernel's fp32 sums, emulated on the host
// (same partition into warps and lanes, same shuffle trees, exp as ex2 of the fp32 product)
// on both draws of every hidden case and of the three largest visible cases, are within
// 2.8e-7 of the exact filtered mass Z_N and 8.9e-7 of the exact row mass Z; d = 1e-4 is over
// 100 times that, and far below the probability of any token a wrong filter or a wrong draw
// would pick in the task's cases.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"
#include "judge/checker_support.hpp"
#include "judge/task_checker.hpp"

namespace crucible::judge {
namespace {

constexpr double kDrawTolerance = 1e-4;

// One row's filtered distribution, in double.
class Row {
 public:
  Row(const HostTensorView& logits, std::size_t row, std::size_t vocab, double k_value)
      : l_(vocab), w_(vocab) {
    for (std::size_t v = 0; v < vocab; ++v) l_[v] = element_of(logits, row * vocab + v);
    const double m = *std::max_element(l_.begin(), l_.end());
    for (std::size_t v = 0; v < vocab; ++v) w_[v] = std::exp(l_[v] - m);
    order_.resize(vocab);
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    if (k_value >= 1.0 && k_value < static_cast<double>(vocab)) {
      const auto k = static_cast<std::size_t>(k_value);
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       order_.end(), [&](std::size_t a, std::size_t b) { return l_[a] > l_[b]; });
      k_threshold_ = l_[order_[k - 1]];
    }
    // Only K matters from here on; nucleus_threshold() orders as much of it as it walks.
    order_.erase(std::remove_if(order_.begin(), order_.end(),
                                [&](std::size_t v) { return !(l_[v] >= k_threshold_); }),
                 order_.end());
    for (const std::size_t v : order_) z_k_ += w_[v];
  }

  bool in_k(std::size_t v) const { return l_[v] >= k_threshold_; }
  double weight(std::size_t v) const { return w_[v]; }

  // How many of K's tokens, largest logit first (ties by index), the nucleus of p holds: the
  // levels of K whose mass strictly above is below p * Z_K, and always the top level (the
  // nucleus of any p > 0; also taken for p <= 0). Orders K only as far as the walk needs: the
  // top kPrefix tokens first (a nucleus is usually far smaller), all of K if the walk gets past
  // them. On return order_[0, result) is in order.
  std::size_t nucleus_size(double p) {
    constexpr std::size_t kPrefix = 4096;
    const auto larger = [&](std::size_t a, std::size_t b) {
      return l_[a] > l_[b] || (l_[a] == l_[b] && a < b);
    };
    for (;;) {
      if (sorted_ < std::min(kPrefix, order_.size())) {
        sorted_ = std::min(kPrefix, order_.size());
        std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(sorted_ - 1),
                         order_.end(), larger);
        std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(sorted_), larger);
      }
      double above = 0.0;
      std::size_t i = 0;
      bool complete = true;  // false: a level may run past the ordered prefix
      while (i < sorted_) {
        if (i > 0 && !(above < p * z_k_)) return i;
        const double level = l_[order_[i]];
        std::size_t j = i;
        while (j < sorted_ && l_[order_[j]] == level) above += w_[order_[j++]];
        if (j == sorted_ && sorted_ < order_.size()) {
          complete = false;
          break;
        }
        i = j;
      }
      if (complete) return i;
      std::sort(order_.begin(), order_.end(), larger);
      sorted_ = order_.size();
    }
  }

  // Whether token s (in K, of positive weight) is a right answer for the draw u: for some
  // nucleus N between N(p - d) and N(p + d), nested by whole levels, s is in N and u * Z_N lies
  // within d * Z_N of [C_N(s) - w[s], C_N(s)], C_N(s) the sum of w over the tokens of N up to
  // and including s in vocabulary order. p >= 1 is no top-p filter: N = K exactly.
  // `in_some_nucleus` says whether s was in any of those nuclei.
  bool accepts(std::size_t s, double p, double u, bool& in_some_nucleus) {
    std::size_t lo = order_.size(), hi = order_.size();
    double lo_threshold = k_threshold_;
    if (p < 1.0) {
      lo = nucleus_size(p - kDrawTolerance);
      hi = nucleus_size(p + kDrawTolerance);
      lo_threshold = l_[order_[lo - 1]];
    }
    // The smallest nucleus, in one pass over the vocabulary.
    double total = 0.0, through_s = 0.0;
    for (std::size_t v = 0; v < l_.size(); ++v) {
      if (!(l_[v] >= lo_threshold)) continue;
      total += w_[v];
      if (v <= s) through_s += w_[v];
    }
    const auto holds_draw = [&] {
      const double target = u * total;
      return target >= through_s - w_[s] - kDrawTolerance * total &&
             target <= through_s + kDrawTolerance * total;
    };
    bool in_nucleus = l_[s] >= lo_threshold;
    in_some_nucleus = in_nucleus;
    if (in_nucleus && holds_draw()) return true;
    // The larger nuclei, one level of K at a time.
    for (std::size_t i = lo; i < hi;) {
      const double level = l_[order_[i]];
      for (; i < hi && l_[order_[i]] == level; ++i) {
        const std::size_t x = order_[i];
        total += w_[x];
        if (x <= s) through_s += w_[x];
        in_nucleus = in_nucleus || x == s;
      }
      in_some_nucleus = in_some_nucleus || in_nucleus;
      if (in_nucleus && holds_draw()) return true;
    }
    return false;
  }

 private:
  std::vector<double> l_;
  std::vector<double> w_;
  std::vector<std::size_t> order_;
  std::size_t sorted_ = 0;  // order_[0, sorted_) is in order and holds the largest of K
  double k_threshold_ = -INFINITY;
  double z_k_ = 0.0;
};

class SamplingChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    if (request.candidate.size() != 1 || request.tolerances.size() != 1) {
      throw core::InternalError("sampling checker: needs exactly the output samples");
    }
    const HostTensorView& samples = request.candidate[0];
    const HostTensorView* logits = find_named(request.inputs, "logits");
    const HostTensorView* uniform = find_named(request.inputs, "uniform_samples");
    const HostTensorView* top_k = find_named(request.inputs, "top_k");
    const HostTensorView* top_p = find_named(request.inputs, "top_p");
    if (samples.name != "samples" || logits == nullptr || uniform == nullptr || top_k == nullptr ||
        top_p == nullptr || core::dtype_is_floating(samples.dtype) ||
        !core::dtype_is_floating(logits->dtype) || core::dtype_is_floating(top_k->dtype) ||
        samples.count == 0 || logits->count % samples.count != 0 ||
        uniform->count != samples.count || top_k->count != samples.count ||
        top_p->count != samples.count) {
      throw core::InternalError(
          "sampling checker: needs logits [batch, vocab], uniform_samples, top_k, top_p and "
          "integer samples, all [batch]");
    }
    const std::size_t batch = samples.count;
    const std::size_t vocab = logits->count / batch;
    const bool reveal = request.reveal_values;

    CompareReport report;
    report.output_name = std::string(samples.name);
    report.count = batch;
    report.tolerance = Tolerance{0.0, 0.0};
    report.values_revealed = reveal;
    std::string first_reason;
    for (std::size_t b = 0; b < batch; ++b) {
      const double got = element_of(samples, b);
      std::string reason;
      bool unwritten = false;
      if (is_poison(samples.dtype, samples.data, b, request.poison_variant)) {
        unwritten = true;
        reason = "never written";
      } else if (!(got >= 0.0 && got < static_cast<double>(vocab))) {
        reason = reveal ? "token " + format_number(got) + " is not a vocabulary index"
                        : "not a vocabulary index";
      } else {
        const auto s = static_cast<std::size_t>(got);
        Row row(*logits, b, vocab, element_of(*top_k, b));
        const double p = element_of(*top_p, b);
        const double u = element_of(*uniform, b);
        if (!row.in_k(s)) {
          reason = "the token is outside the row's top-k set";
        } else if (row.weight(s) <= 0.0) {
          reason = "the token has zero probability";
        } else {
          bool in_some_nucleus = false;
          const bool accepted = row.accepts(s, p, u, in_some_nucleus);
          if (!accepted) {
            reason = in_some_nucleus
                         ? "the token's probability interval does not hold the row's draw"
                         : "the token is outside the row's top-p nucleus";
          }
        }
        if (!reason.empty() && reveal) {
          reason = "token " + format_number(got) + ": " + reason;
        }
      }
      if (reason.empty()) continue;
      if (report.mismatches == 0) {
        report.first_mismatch = b;
        report.first_mismatch_coords = flat_to_coords(b, batch, samples.shape);
        report.first_got = reveal ? got : 0.0;
        first_reason = "row " + std::to_string(b) + ": " + reason;
      }
      ++report.mismatches;
      if (unwritten) ++report.unwritten;
    }
    const std::string head = "output '" + report.output_name + "': ";
    report.pass = report.mismatches == 0;
    if (report.pass) {
      report.summary = head +
                       "every row's token is in its top-k set and top-p nucleus and its "
                       "probability interval holds the row's draw";
    } else {
      report.summary = head + std::to_string(report.mismatches) + " of " + std::to_string(batch) +
                       " rows fail (the token must be in the top-k set and the top-p nucleus, "
                       "and its interval of the filtered CDF in vocabulary order must hold the "
                       "draw, within 1e-4); first: " +
                       first_reason + "; " + std::to_string(report.unwritten) + " unwritten";
    }
    return {report};
  }
};

}  // namespace

const TaskChecker& sampling_checker() {
  static const SamplingChecker checker;
  return checker;
}

}  // namespace crucible::judge
