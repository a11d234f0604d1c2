// The llm/silu_and_mul oracle on hand-computed rows, on its own task's values, and against the
// stories260K calls recorded by tasks/capture.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/captured.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::RecordedCall;
using oracle_test::Tensors;

// Runs the oracle on `rows` rows of width d; `input` holds [gate | up] per row.
std::vector<double> run_oracle(std::int64_t rows, std::int64_t d, std::vector<double> input) {
  return oracle_test::call_oracle(
             "llm/silu_and_mul", {{"num_tokens", rows}, {"d", d}},
             Tensors{
                 {"input", {core::DType::kBF16, {rows, 2, d}, std::move(input)}},
                 {"out", {core::DType::kBF16, {rows, d}, std::vector<double>(rows * d, 0.0)}},
             })
      .at("out")
      .values;
}

const tasks::Task& silu_task() { return oracle_test::repository_task("llm/silu_and_mul"); }

// A case that reads the input of `call` from its recording, symbols from its shape: recorded
// [T, 2 * d], declared [num_tokens, 2, d].
tasks::Case case_reading(const tasks::Task& task, const RecordedCall& call) {
  const tasks::CapturedTensor* input = call.group.tensor(call.name, "input");
  REQUIRE(input != nullptr);
  REQUIRE(input->shape.size() == 2);
  REQUIRE(input->shape[1] % 2 == 0);
  return oracle_test::case_reading(task, call,
                                   {{"num_tokens", input->shape[0]}, {"d", input->shape[1] / 2}});
}

}  // namespace

TEST_CASE("silu_and_mul oracle: hand-computed values, gate half first") {
  // Row 0: gate (0, 2), up (5, 3): silu(0) = 0; silu(2) = 2 / (1 + e^-2).
  // Row 1: gate (-1, ln 3), up (2, 1): silu(-1) = -1 / (1 + e); silu(ln 3) = ln 3 * 3 / 4.
  const double ln3 = std::log(3.0);
  const auto out = run_oracle(2, 2, {0.0, 2.0, 5.0, 3.0, -1.0, ln3, 2.0, 1.0});
  REQUIRE(out.size() == 4);
  CHECK(out[0] == 0.0);
  CHECK(out[1] == doctest::Approx(3.0 * 2.0 / (1.0 + std::exp(-2.0))).epsilon(1e-15));
  CHECK(out[1] == doctest::Approx(5.284782467867294).epsilon(1e-12));
  CHECK(out[2] == doctest::Approx(-2.0 / (1.0 + std::exp(1.0))).epsilon(1e-15));
  CHECK(out[2] == doctest::Approx(-0.5378828427399902).epsilon(1e-12));
  CHECK(out[3] == doctest::Approx(ln3 * 0.75).epsilon(1e-15));
}

TEST_CASE("silu_and_mul oracle: silu saturates to the gate above and to zero far below") {
  const auto out = run_oracle(1, 3, {40.0, -40.0, -1000.0, 1.0, 1.0, 1.0});
  CHECK(out[0] == doctest::Approx(40.0).epsilon(1e-15));
  CHECK(std::abs(out[1]) < 1e-15);
  CHECK(out[1] < 0.0);
  CHECK(out[2] == 0.0);  // exp(1000) overflows to inf; -1000 / inf is -0, not NaN
  CHECK_FALSE(std::isnan(out[2]));
}

TEST_CASE(
    "silu_and_mul oracle: on a generated case every output is silu(g) * u, and silu never "
    "falls below its minimum -0.27846 (at g = -1.27846)") {
  const tasks::Task& task = silu_task();
  const tasks::Case* chosen = &oracle_test::case_named(task, "h_width_1001");
  const Tensors tensors = oracle_test::run_case(task, *chosen);
  const auto& input = tensors.at("input").values;
  const auto& out = tensors.at("out").values;
  const std::int64_t rows = chosen->symbols.at("num_tokens");
  const std::int64_t d = chosen->symbols.at("d");
  REQUIRE(out.size() == static_cast<std::size_t>(rows * d));
  std::size_t wrong = 0;
  std::size_t below_minimum = 0;
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t i = 0; i < d; ++i) {
      const double g = input[t * 2 * d + i];
      const double u = input[t * 2 * d + d + i];
      // silu(g) = g * sigmoid(g), written the other way round from the oracle.
      const double expected = g * (1.0 / (1.0 + std::exp(-g))) * u;
      wrong += std::abs(out[t * d + i] - expected) <= 1e-12 * (1.0 + std::abs(expected)) ? 0 : 1;
      if (u != 0.0) below_minimum += out[t * d + i] / u < -0.278465 ? 1 : 0;
    }
  }
  CHECK(wrong == 0);
  CHECK(below_minimum == 0);
}

TEST_CASE(
    "silu_and_mul: each captured case reads one recorded stories260K call, prefill and decode") {
  // The hidden captured cases name the recording in the manifest (generator "captured"). The
  // recording is [T, 2 * d] and the task declares [num_tokens, 2, d]: the same bytes when the
  // element counts agree, and the runner's values must be the recorded bytes, in both
  // correctness runs.
  oracle_test::check_captured_cases(silu_task(), "silu_and_mul", {}, false);
}

TEST_CASE(
    "silu_and_mul oracle: on every captured case, matches the recorded out within tolerance") {
  const std::size_t compared = oracle_test::compare_captured_cases(silu_task());
  CHECK(compared >= (27 + 4) * 172);
}

TEST_CASE("silu_and_mul oracle: reproduces every recorded stories260K call within tolerance") {
  // One call per layer and step: gate and up of growing scale, d = 172.
  const tasks::Task& task = silu_task();
  std::size_t compared = 0;
  const std::size_t calls =
      oracle_test::for_each_recorded_call("silu_and_mul", [&](const auto& call) {
        compared += oracle_test::compare_with_recording(task, case_reading(task, call), call);
      });
  CHECK(calls == 15);
  CHECK(compared == (27 + 4 + 4) * 5 * 172);
}
