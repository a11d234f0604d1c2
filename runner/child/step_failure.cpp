#include "runner/child/step_failure.hpp"

#include <chrono>
#include <thread>

#include "judge/timing_schedule.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"

namespace crucible::runner::child {

using core::StepStatus;
using Clock = std::chrono::steady_clock;

void fail(StepStatus status, std::string message, bool context_lost) {
  throw StepFailure{status, std::move(message), context_lost};
}

void sync_or_fail(CUstream stream, bool candidate, const std::string& what, double timeout_ms,
                  const std::string& deadline_text) {
  const std::string within =
      deadline_text.empty() ? std::to_string(static_cast<long>(timeout_ms)) + " ms" : deadline_text;
  const auto waited_from = Clock::now();
  const auto deadline = waited_from + std::chrono::duration<double, std::milli>(timeout_ms);
  const auto relaxed = waited_from + std::chrono::milliseconds(2);
  CUresult rc;
  while ((rc = cuStreamQuery(stream)) == CUDA_ERROR_NOT_READY) {
    const auto now = Clock::now();
    if (now > deadline) {
      abandon_context();
      if (!candidate) {
        fail(StepStatus::kInfraError, "the reference did not finish " + what + " within " + within,
             true);
      }
      fail(StepStatus::kTimeout,
           "your kernel did not finish " + what + " within " + within + "; it was killed", true);
    }
    if (now > relaxed) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (rc == CUDA_SUCCESS) return;
  // An error reported at a synchronize comes from a kernel that faulted: treat it as sticky.
  if (!candidate) {
    fail(StepStatus::kInfraError, "the reference failed " + what + ": " + cuda_error_text(rc),
         true);
  }
  // How long the fault took to surface is what bounds the deadline floor (docs/runner.md): say it.
  const double surfaced_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - waited_from).count();
  fail(StepStatus::kRuntimeError,
       "your kernel faulted " + what + ": " + cuda_error_text(rc) + " (reported " +
           std::to_string(static_cast<long>(surfaced_ms)) + " ms into the wait)",
       true);
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return judge::mix_words(a, b); }

}  // namespace crucible::runner::child
