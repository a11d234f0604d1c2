// Leveled, thread-safe logging to stderr with UTC timestamps.
#pragma once

#include <string_view>

namespace crucible::core {

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug", "info", "warn", "error", "off"; false if unknown.
bool parse_log_level(std::string_view name, LogLevel* out);
// Writes one line; never throws.
void log(LogLevel level, std::string_view message);

inline void log_debug(std::string_view m) { log(LogLevel::kDebug, m); }
inline void log_info(std::string_view m) { log(LogLevel::kInfo, m); }
inline void log_warn(std::string_view m) { log(LogLevel::kWarn, m); }
inline void log_error(std::string_view m) { log(LogLevel::kError, m); }

}  // namespace crucible::core
