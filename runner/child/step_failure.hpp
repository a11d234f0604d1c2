// How the measuring code ends a job with a status, and the waits that turn a kernel's fault or
// hang into one.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "core/step_status.hpp"

namespace crucible::runner::child {

// Ends the job with a status. Thrown by the measuring code, caught once in JobRunner::run.
struct StepFailure {
  core::StepStatus status;
  std::string message;
  bool context_lost = false;
};

[[noreturn]] void fail(core::StepStatus status, std::string message, bool context_lost = false);

// Waits for the stream, at most `timeout_ms`. A failure here is a kernel fault (the context is
// then lost); a kernel still running at the deadline is a timeout, and since only SIGKILL stops
// a spinning kernel the report says the context is lost so the server kills this process.
// `candidate`: whose kernels are on the stream (the reference's faults are infra errors).
// `deadline_text` names the deadline in the timeout message ("within 100 ms" when empty).
void sync_or_fail(CUstream stream, bool candidate, const std::string& what, double timeout_ms,
                  const std::string& deadline_text = "");

// A 64-bit mix of two words (splitmix64's finaliser): seeds, canaries and secret choices.
std::uint64_t mix(std::uint64_t a, std::uint64_t b);

}  // namespace crucible::runner::child
