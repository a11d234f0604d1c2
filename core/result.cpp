// Wire names of error codes.
#include "core/result.hpp"

#include <array>

namespace crucible::core {
namespace {
struct CodeName {
  ErrorCode code;
  std::string_view name;
};
constexpr std::array kCodeNames{
    CodeName{ErrorCode::kBadRequest, "bad_request"},
    CodeName{ErrorCode::kUnsupportedVersion, "unsupported_version"},
    CodeName{ErrorCode::kUnknownOp, "unknown_op"},
    CodeName{ErrorCode::kUnknownTask, "unknown_task"},
    CodeName{ErrorCode::kUnknownEpisode, "unknown_episode"},
    CodeName{ErrorCode::kEpisodeDone, "episode_done"},
    CodeName{ErrorCode::kTooLarge, "too_large"},
    CodeName{ErrorCode::kInvalidArgument, "invalid_argument"},
    CodeName{ErrorCode::kBusy, "busy"},
    CodeName{ErrorCode::kShuttingDown, "shutting_down"},
    CodeName{ErrorCode::kInternal, "internal"},
    CodeName{ErrorCode::kIo, "io"},
    CodeName{ErrorCode::kTimeout, "timeout"},
};
}  // namespace

std::string_view error_code_name(ErrorCode code) {
  for (const auto& entry : kCodeNames) {
    if (entry.code == code) return entry.name;
  }
  return "internal";
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (const auto& entry : kCodeNames) {
    if (entry.name == name) return entry.code;
  }
  return std::nullopt;
}

}  // namespace crucible::core
