// The remasking checker: any token of a tied maximum and any choice among tied scores pass; a
// wrong token, a changed unmasked token, a wrong count, a chosen unmasked position, a position
// left out that scores clearly higher and unwritten flags fail.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
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

// One row of four positions over a vocabulary of 3, mask id 9, x = (9, 5, 9, 9):
//   position 0: logits (1, 2, 2)  maxima tied at tokens 1 and 2, score -log(2 + e^-1)
//   position 2: logits (0, 0, 3)  token 2, score -log(1 + 2 e^-3)
//   position 3: logits (0, 0, 3)  the same score as position 2 (an exact tie)
// k = 2: position 0 scores lowest, so {2, 3} is the only right choice.
struct Step {
  std::vector<float> logits{1, 2, 2, 7, 7, 7, 0, 0, 3, 0, 0, 3};
  std::vector<std::int64_t> x{9, 5, 9, 9};
  std::vector<float> noise{0, 0, 0, 0};
  std::vector<std::int64_t> want{2};
  std::vector<std::int64_t> x0{1, 5, 2, 2};
  std::vector<std::uint8_t> transfer{0, 0, 1, 1};
  std::map<std::string, double> scalars{{"mask_id", 9.0}};
  DType flag_type = DType::kI8;

  std::vector<CompareReport> check(bool reveal = true) const {
    const std::vector<HostTensorView> inputs{
        {"logits", DType::kF32, logits.data(), logits.size(), {1, 4, 3}},
        {"x", DType::kI64, x.data(), x.size(), {1, 4}},
        {"noise", DType::kF32, noise.data(), noise.size(), {1, 4}},
        {"num_transfer_tokens", DType::kI64, want.data(), want.size(), {1}}};
    const std::vector<HostTensorView> candidate{
        {"x0", DType::kI64, x0.data(), x0.size(), {1, 4}},
        {"transfer_index", flag_type, transfer.data(), transfer.size(), {1, 4}}};
    const std::vector<Tolerance> tolerances{{0.0, 0.0}, {1e-4, 1e-5}};
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = candidate;
    request.tolerances = tolerances;
    request.scalars = &scalars;
    request.reveal_values = reveal;
    return judge::llada_remask_checker().check(request);
  }
};

}  // namespace

TEST_CASE("llada_remask checker: the right step and either tied maximum token pass") {
  Step s;
  CHECK(all_pass(s.check()));
  s.x0[0] = 2;  // the other token of position 0's tied maxima
  CHECK(all_pass(s.check()));
  s.flag_type = DType::kBool;  // a bool mask is read the same way
  CHECK(all_pass(s.check()));
}

TEST_CASE("llada_remask checker: any choice among tied scores passes") {
  Step s;
  s.want = {1};  // positions 2 and 3 tie for the one slot
  s.transfer = {0, 0, 1, 0};
  CHECK(all_pass(s.check()));
  s.transfer = {0, 0, 0, 1};
  CHECK(all_pass(s.check()));
  // Scores within the tolerance tie too.
  s.noise = {0, 0, 0, 5e-5f};
  s.transfer = {0, 0, 1, 0};
  CHECK(all_pass(s.check()));
}

TEST_CASE("llada_remask checker: a token below the maximum or a changed unmasked token fails") {
  Step s;
  s.x0[2] = 1;
  auto reports = s.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[1].pass);
  CHECK(contains(reports[0].summary, "row 0, position 2: token 1 has logit 0"));
  CHECK_FALSE(s.check(false)[0].summary.find("logit 0") != std::string::npos);

  Step t;
  t.x0[1] = 2;
  reports = t.check();
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "not masked, so x0 must equal x"));
}

TEST_CASE("llada_remask checker: a clearly higher position left out fails, naming it") {
  Step s;
  s.transfer = {1, 0, 1, 0};  // position 0 (lowest score) chosen instead of position 3
  const auto reports = s.check();
  CHECK(reports[0].pass);
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "row 0, position 3: left out with score"));
  CHECK(reports[1].first_mismatch == 3);
}

TEST_CASE("llada_remask checker: wrong counts, unmasked picks and unwritten flags fail") {
  Step s;
  s.transfer = {0, 0, 1, 0};
  auto reports = s.check();
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "1 positions chosen, expected"));

  s.transfer = {0, 1, 1, 1};
  reports = s.check();
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "position 1: chosen, but the position is not masked"));

  s.transfer = {0, 0, 1, 0xAB};
  reports = s.check();
  CHECK_FALSE(reports[1].pass);
  CHECK(contains(reports[1].summary, "position 3:"));

  // k above the masked count: every masked position, nothing else.
  s.want = {10};
  s.transfer = {1, 0, 1, 1};
  CHECK(all_pass(s.check()));
  s.want = {0};
  s.transfer = {0, 0, 0, 0};
  CHECK(all_pass(s.check()));
}
