// The llm/rms_norm oracle against the stories260K calls recorded by tasks/capture: the task's
// captured hidden cases and every recorded call.
#include <doctest/doctest.h>

#include <cstddef>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const tasks::Task& rms_norm_task() { return oracle_test::repository_task("llm/rms_norm"); }

using oracle_test::compare_with_recording;
using oracle_test::norm_case_reading;

}  // namespace

TEST_CASE("rms_norm: each captured case reads one recorded stories260K call, prefill and decode") {
  // The hidden captured cases name the recording in the manifest (generator "captured"): their
  // symbols must give the recorded shapes, their epsilon the recorded one, and the values the
  // runner builds must be the recorded bytes themselves, in both correctness runs.
  oracle_test::check_captured_cases(rms_norm_task(), "rms_norm", {"epsilon"}, true);
}

TEST_CASE("rms_norm oracle: on every captured case, matches the recorded out within tolerance") {
  const std::size_t compared = oracle_test::compare_captured_cases(rms_norm_task());
  CHECK(compared >= (27 + 4) * 64);
}

TEST_CASE("rms_norm oracle: reproduces every recorded stories260K call within tolerance") {
  // Layer 0's attention norm sees the embeddings; every other norm point the residual stream,
  // which grows with depth: 11 calls per step, scales from 0.25 to 2.
  const tasks::Task& task = rms_norm_task();
  std::size_t compared = 0;
  const std::size_t calls = oracle_test::for_each_recorded_call("rms_norm", [&](const auto& call) {
    compared += compare_with_recording(task, norm_case_reading(task, call), call);
  });
  CHECK(calls == 33);
  CHECK(compared == (27 + 4 + 4) * 11 * 64);
}
