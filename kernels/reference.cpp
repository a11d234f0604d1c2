// Reference source lookup: path checks and file reads.
#include "kernels/reference.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/text_file.hpp"

namespace crucible::kernels {

namespace fs = std::filesystem;

core::Result<std::string> read_reference(const fs::path& home, std::string_view relative_path) {
  const fs::path relative = fs::path(relative_path).lexically_normal();
  const std::string shown(relative_path);
  if (relative.is_absolute() || relative.empty() || *relative.begin() != "kernels") {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "reference '" + shown + "' must be a relative path under kernels/"};
  }
  const auto extension = relative.extension();
  if (extension != ".cu" && extension != ".cuh") {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "reference '" + shown + "' is not a .cu or .cuh file"};
  }
  const fs::path path = home / relative;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return core::Error{core::ErrorCode::kIo,
                       "reference '" + shown + "' does not exist under " + home.string()};
  }
  auto text = core::read_text_file(path);
  if (!text) return core::Error{core::ErrorCode::kIo, "cannot read reference '" + shown + "'"};
  return text;
}

core::Result<std::vector<std::string>> list_references(const fs::path& home) {
  const fs::path root = home / "kernels";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return core::Error{core::ErrorCode::kIo, "no kernels folder at " + root.string()};
  }
  std::vector<std::string> paths;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".cu" && it->is_regular_file(ec)) {
      paths.push_back(it->path().lexically_relative(home).generic_string());
    }
  }
  if (ec)
    return core::Error{core::ErrorCode::kIo, "cannot list " + root.string() + ": " + ec.message()};
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace crucible::kernels
