// Wire names of step statuses.
#include "core/step_status.hpp"

#include <array>

namespace crucible::core {
namespace {
constexpr std::array<std::string_view, 9> kNames{"ok",           "invalid_action", "compile_error",
                                                 "launch_error", "runtime_error",  "timeout",
                                                 "incorrect",    "hack_detected",  "infra_error"};
}  // namespace

std::string_view step_status_name(StepStatus status) {
  return kNames.at(static_cast<std::size_t>(status));
}

std::optional<StepStatus> step_status_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<StepStatus>(i);
  }
  return std::nullopt;
}

}  // namespace crucible::core
