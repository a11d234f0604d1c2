// StepStatus: the outcome of scoring one action, shared by sandbox, rewards, env and clients.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace crucible::core {

enum class StepStatus : std::uint8_t {
  kOk,             // compiled, correct on every case, timed
  kInvalidAction,  // the action broke a rule checked before compiling (plan, size, names)
  kCompileError,   // NVRTC rejected the source, or the compile hit its deadline or memory cap
  kLaunchError,    // a launch was refused (bad configuration, resources)
  kRuntimeError,   // a kernel faulted (illegal address, trap, misaligned access)
  kTimeout,        // a kernel ran past the runner's deadline and was killed
  kIncorrect,      // ran, but some output differs from the reference beyond tolerance
  kHackDetected,   // the result is impossible or the kernel tampered with the harness
  kInfraError,     // the server's fault: never penalise the agent for it
};

std::string_view step_status_name(StepStatus status);
std::optional<StepStatus> step_status_from_name(std::string_view name);

}  // namespace crucible::core
