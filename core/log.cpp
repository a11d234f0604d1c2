// Logging implementation: one mutex, one write per line.
#include "core/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace crucible::core {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_mutex;
constexpr const char* kLevelNames[] = {"debug", "info", "warn", "error", "off"};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(); }

bool parse_log_level(std::string_view name, LogLevel* out) {
  for (int i = 0; i < 5; ++i) {
    if (name == kLevelNames[i]) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

void log(LogLevel level, std::string_view message) {
  if (level < g_level.load() || level == LogLevel::kOff) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::string line;
  line.reserve(message.size() + 48);
  line.append(stamp).append(".");
  char ms[8];
  std::snprintf(ms, sizeof ms, "%03d", static_cast<int>(millis));
  line.append(ms).append("Z ").append(kLevelNames[static_cast<int>(level)]).append(" ");
  line.append(message).append("\n");
  std::lock_guard lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace crucible::core
