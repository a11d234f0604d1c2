// The k-nearest-neighbour checker: any choice among equidistant points passes; a point clearly
// farther than the k-th, a repeated or unwritten index, a wrong distance and a descending list
// fail.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"
#include "tests/judge/checker_test_support.hpp"

using namespace crucible;
using core::DType;
using judge::CompareReport;
using judge::HostTensorView;
using judge::Tolerance;
using testing::all_pass;
using testing::contains;

namespace {

// One cloud, one query at the origin, five reference points at squared distances
// 4, 1, 1, 9, 0.25 (points 1 and 2 tie); k = 3: {4, 1, 2} in either order of 1 and 2.
struct Neighbours {
  std::vector<float> query{0, 0, 0};
  std::vector<float> ref{2, 0, 0, 0, 1, 0, 0, 0, -1, 3, 0, 0, 0.5f, 0, 0};
  std::vector<float> dists{0.25f, 1, 1};
  std::vector<std::int64_t> idx{4, 1, 2};
  std::int64_t k = 3;

  std::vector<CompareReport> check(bool reveal = true) const {
    const std::vector<HostTensorView> inputs{
        {"query", DType::kF32, query.data(), query.size(), {1, 1, 3}},
        {"ref", DType::kF32, ref.data(), ref.size(), {1, 5, 3}}};
    const std::vector<HostTensorView> candidate{
        {"dists", DType::kF32, dists.data(), dists.size(), {1, 1, k}},
        {"idx", DType::kI64, idx.data(), idx.size(), {1, 1, k}}};
    const std::vector<Tolerance> tolerances{{1e-6, 1e-4}, {0.0, 0.0}};
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = candidate;
    request.tolerances = tolerances;
    request.reveal_values = reveal;
    return judge::knn_checker().check(request);
  }
};

}  // namespace

TEST_CASE("knn checker: the nearest points pass, in either order of a tie") {
  Neighbours n;
  CHECK(all_pass(n.check()));
  n.idx = {4, 2, 1};
  CHECK(all_pass(n.check()));
  // k = 2, the tie at the boundary: either tied point is right, point 0 (at 4) is not.
  n.k = 2;
  n.dists = {0.25f, 1};
  n.idx = {4, 2};
  CHECK(all_pass(n.check()));
  n.idx = {4, 1};
  CHECK(all_pass(n.check()));
  n.idx = {4, 0};
  n.dists = {0.25f, 4};
  CHECK_FALSE(n.check()[1].pass);
}

TEST_CASE("knn checker: a point clearly farther than the k-th fails, naming the slot") {
  Neighbours n;
  n.idx = {4, 1, 0};  // point 0 at 4 instead of point 2 at 1
  n.dists = {0.25f, 1, 4};
  const auto reports = n.check();
  CHECK(reports[0].pass);
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "cloud 0, query 0, neighbour 2: point 0"));
  CHECK(reports[1].first_mismatch == 2);
  CHECK(contains(n.check(false)[1].summary, "a point left out is clearly closer"));
}

TEST_CASE("knn checker: repeated, out-of-range and unwritten indices fail") {
  Neighbours n;
  n.idx = {4, 1, 1};
  auto reports = n.check();
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "appears twice"));
  n.idx = {4, 1, 5};
  reports = n.check();
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "not a reference index below num_ref"));
}

TEST_CASE("knn checker: a wrong distance or a descending list fails the dists report") {
  Neighbours n;
  n.dists = {0.25f, 1, 1.01f};
  auto reports = n.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[1].pass);
  CHECK(contains(reports[0].summary, "the squared distance of point 2 is 1"));
  // Within tolerance passes.
  n.dists = {0.25f, 1, 1.00005f};
  CHECK(all_pass(n.check()));
  // Descending: neighbours listed far to near.
  n.idx = {2, 1, 4};
  n.dists = {1, 1, 0.25f};
  reports = n.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "dists must ascend"));
}
