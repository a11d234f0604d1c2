// read_text_file and utc_time_text.
#include "core/text_file.hpp"

#include <ctime>
#include <fstream>
#include <sstream>

namespace crucible::core {

Result<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::kIo, "cannot read " + path.string()};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{ErrorCode::kIo, "cannot read " + path.string()};
  return text.str();
}

std::string utc_time_text(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64];
  const std::size_t size = std::strftime(text, sizeof text, format, &utc);
  return std::string(text, size);
}

}  // namespace crucible::core
