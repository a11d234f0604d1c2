// The k-nearest-neighbour checker: accepts every right answer of science/knn, where reference
// points at equal distance make several neighbour sets right, recomputing the distances in
// float64 from the clouds.
//
// Inputs by name: `query` ([batch, num_query, 3]) and `ref` ([batch, num_ref, 3]), floating.
// Outputs by name: `dists` (floating) and `idx` (integer), both [batch, num_query, k]. A case
// without them is the server's misconfiguration, an InternalError.
//
// Rules, per query row (d(r) the float64 squared distance of reference point r, tolerance that
// of dists: a and b tie when |a - b| <= atol + rtol * max(|a|, |b|)):
//  - idx: every entry written, an integer in [0, num_ref), no index twice in the row; and no
//    chosen point clearly farther than the k-th smallest distance of the cloud (so no point
//    left out is clearly closer than a chosen one).
//  - dists: dists[j] ties with d(idx[j]) (not judged where idx[j] is unusable: the idx report
//    fails instead), and no dists[j] lies clearly below dists[j - 1] (ascending order).
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

std::string at_text(std::int64_t b, std::int64_t q, std::int64_t j) {
  return "cloud " + std::to_string(b) + ", query " + std::to_string(q) + ", neighbour " +
         std::to_string(j) + ": ";
}

class KnnChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    const auto candidate = request.candidate;
    const HostTensorView* query = find_named(request.inputs, "query");
    const HostTensorView* ref = find_named(request.inputs, "ref");
    const HostTensorView* dists = find_named(candidate, "dists");
    const HostTensorView* idx = find_named(candidate, "idx");
    if (candidate.size() != 2 || request.tolerances.size() != 2 || query == nullptr ||
        ref == nullptr || dists == nullptr || idx == nullptr || query->shape.size() != 3 ||
        ref->shape.size() != 3 || dists->shape.size() != 3 ||
        !core::dtype_is_floating(dists->dtype) || core::dtype_is_floating(idx->dtype)) {
      throw core::InternalError(
          "knn checker: needs query and ref [batch, points, 3] and the outputs dists (floating) "
          "and idx (integer) [batch, num_query, k]");
    }
    const std::int64_t batch = query->shape[0];
    const std::int64_t queries = query->shape[1];
    const std::int64_t refs = ref->shape[1];
    const std::int64_t k = dists->shape[2];
    if (ref->shape[0] != batch || dists->shape[0] != batch || dists->shape[1] != queries ||
        idx->count != dists->count || k > refs) {
      throw core::InternalError("knn checker: shapes of query, ref, dists and idx disagree");
    }
    const Tolerance tol = request.tolerances[&candidate[0] == dists ? 0 : 1];
    const auto tied = [&](double a, double b) {
      return std::fabs(a - b) <= tol.atol + tol.rtol * std::max(std::fabs(a), std::fabs(b));
    };
    const bool reveal = request.reveal_values;
    const int variant = request.poison_variant;

    Failures index_failures(*idx, Tolerance{0.0, 0.0}, reveal);
    Failures distance_failures(*dists, tol, reveal);
    std::vector<double> distance(static_cast<std::size_t>(refs));
    std::vector<double> sorted(static_cast<std::size_t>(refs));
    std::vector<std::int64_t> seen_in_row(static_cast<std::size_t>(refs), -1);
    std::vector<double> cloud(static_cast<std::size_t>(refs * 3));
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t e = 0; e < refs * 3; ++e) {
        cloud[static_cast<std::size_t>(e)] =
            element_of(*ref, static_cast<std::size_t>(b * refs * 3 + e));
      }
      for (std::int64_t q = 0; q < queries; ++q) {
        const std::int64_t row = b * queries + q;
        double p[3];
        for (int c = 0; c < 3; ++c)
          p[c] = element_of(*query, static_cast<std::size_t>(row * 3 + c));
        for (std::int64_t r = 0; r < refs; ++r) {
          double sum = 0.0;
          for (int c = 0; c < 3; ++c) {
            const double d = p[c] - cloud[static_cast<std::size_t>(r * 3 + c)];
            sum += d * d;
          }
          distance[static_cast<std::size_t>(r)] = sum;
        }
        sorted = distance;
        std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end());
        const double kth = sorted[static_cast<std::size_t>(k - 1)];

        double previous = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < k; ++j) {
          const auto at = static_cast<std::size_t>(row * k + j);
          const double got_index = element_of(*idx, at);
          const double got_distance = element_of(*dists, at);
          const bool usable = got_index >= 0.0 && got_index < static_cast<double>(refs) &&
                              got_index == std::trunc(got_index);
          const auto r = usable ? static_cast<std::int64_t>(got_index) : std::int64_t{-1};
          const bool repeated = usable && seen_in_row[static_cast<std::size_t>(r)] == row;
          if (!usable || repeated) {
            const bool unwritten = is_poison(idx->dtype, idx->data, at, variant);
            index_failures.fail(at, got_index, 0.0, unwritten, [&] {
              if (unwritten) return at_text(b, q, j) + "never written";
              if (!usable) return at_text(b, q, j) + "not a reference index below num_ref";
              return at_text(b, q, j) +
                     (reveal ? "index " + format_number(got_index) + " appears twice in the row"
                             : std::string("an index appears twice in the row"));
            });
          } else {
            seen_in_row[static_cast<std::size_t>(r)] = row;
            const double true_distance = distance[static_cast<std::size_t>(r)];
            if (true_distance > kth && !tied(true_distance, kth)) {
              index_failures.fail(at, got_index, 0.0, false, [&] {
                return at_text(b, q, j) +
                       (reveal ? "point " + format_number(got_index) + " at squared distance " +
                                     format_number(true_distance) +
                                     " is not among the k nearest (the k-th lies at " +
                                     format_number(kth) + ")"
                               : std::string("not among the k nearest points: a point left "
                                             "out is clearly closer"));
              });
            }
            if (!tied(got_distance, true_distance)) {
              const bool unwritten = is_poison(dists->dtype, dists->data, at, variant);
              distance_failures.fail(at, got_distance, true_distance, unwritten, [&] {
                if (unwritten) return at_text(b, q, j) + "never written";
                return at_text(b, q, j) +
                       (reveal ? "got " + format_number(got_distance) +
                                     ", the squared distance of point " + format_number(got_index) +
                                     " is " + format_number(true_distance)
                               : std::string("not the squared distance of the point in idx"));
              });
            }
          }
          if (got_distance < previous && !tied(got_distance, previous)) {
            distance_failures.fail(at, got_distance, previous, false, [&] {
              return at_text(b, q, j) +
                     "below the previous neighbour's distance (dists must "
                     "ascend)";
            });
          }
          if (!std::isnan(got_distance)) previous = std::max(previous, got_distance);
        }
      }
    }

    std::vector<CompareReport> reports(2);
    for (std::size_t i = 0; i < 2; ++i) {
      if (&candidate[i] == idx) {
        reports[i] = index_failures.finish(
            "every row holds k distinct points of the k smallest distances (ties free)",
            "k distinct reference indices, none clearly farther than the k-th nearest");
      } else {
        reports[i] = distance_failures.finish(
            "every distance is its point's squared distance, ascending",
            "the squared distance of the point in idx within " + format_number(tol.atol) + " + " +
                format_number(tol.rtol) + " * |value|, non-decreasing");
      }
    }
    return reports;
  }
};

}  // namespace

const TaskChecker& knn_checker() {
  static const KnnChecker checker;
  return checker;
}

}  // namespace crucible::judge
