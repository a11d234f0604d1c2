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
//  - for one of the top-p thresholds p' in {p - d, p, p + d} (d = kDrawTolerance), s is in the
//    nucleus N' of p' and u * Z_N' lies in [C'(s) - w[s] - d * Z_N', C'(s) + d * Z_N'], C'(s)
//    the sum of w over the tokens of N' up to and including s in vocabulary order.
// The three nuclei cover a kernel whose fp32 mass puts the boundary level on the other side of
// p * Z_K; d is relative to the filtered mass, 100 times the relative error of a float sum of
// 10^5 positive terms in a reasonable order (about 10^-6), and far below the probability of any
// token a wrong filter or a wrong draw would pick in the task's cases.
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

  // The smallest logit kept by the nucleus of p (the levels of K whose mass strictly above is
  // below p * Z_K). Orders K largest first, ties by index, only as far as the walk needs: the
  // top kPrefix tokens first (a nucleus is usually far smaller), all of K if the walk gets past
  // them.
  double nucleus_threshold(double p) {
    if (p >= 1.0) return k_threshold_;
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
      double threshold = k_threshold_;
      double above = 0.0;
      std::size_t i = 0;
      bool decided = false;
      while (i < sorted_) {
        const double level = l_[order_[i]];
        if (!(above < p * z_k_)) {
          decided = true;
          break;
        }
        threshold = level;
        while (i < order_.size() && l_[order_[i]] == level) {
          if (i >= sorted_) break;
          above += w_[order_[i++]];
        }
        // A level cut by the end of the ordered prefix is not complete: order everything.
        if (i == sorted_ && sorted_ < order_.size() && l_[order_[i]] == level) break;
      }
      if (decided || sorted_ == order_.size()) return threshold;
      std::sort(order_.begin(), order_.end(), larger);
      sorted_ = order_.size();
    }
  }

  // Whether token s, in the nucleus kept by `threshold`, has an interval holding the draw u.
  bool draw_in_interval(std::size_t s, double threshold, double u) const {
    if (!(l_[s] >= threshold)) return false;
    double before = 0.0, total = 0.0;
    for (std::size_t v = 0; v < l_.size(); ++v) {
      if (!(l_[v] >= threshold)) continue;
      total += w_[v];
      if (v < s) before += w_[v];
    }
    const double target = u * total;
    return target >= before - kDrawTolerance * total &&
           target <= before + w_[s] + kDrawTolerance * total;
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
          bool accepted = false;
          for (const double p_near : {p - kDrawTolerance, p, p + kDrawTolerance}) {
            const double threshold = row.nucleus_threshold(p_near);
            in_some_nucleus = in_some_nucleus || element_of(*logits, b * vocab + s) >= threshold;
            if (row.draw_in_interval(s, threshold, u)) {
              accepted = true;
              break;
            }
          }
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
