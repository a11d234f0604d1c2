// Reference source lookup: path checks and file reads.
#include "kernels/reference.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/text_file.hpp"

namespace crucible::kernels {

namespace fs = std::filesystem;

bool is_runner_kernel(const fs::path& relative_path) {
  const fs::path normal = relative_path.lexically_normal();
  const fs::path folder(kRunnerKernelsFolder);
  // Component-wise prefix: "kernels/runner" and what lies under it, not "kernels/runner_x.cu".
  auto part = normal.begin();
  for (const auto& expected : folder) {
    if (part == normal.end() || *part != expected) return false;
    ++part;
  }
  return true;
}

core::Result<std::string> read_reference(const fs::path& home, std::string_view relative_path) {
  const fs::path relative = fs::path(relative_path).lexically_normal();
  const std::string shown(relative_path);
  if (relative.is_absolute() || relative.empty() || *relative.begin() != "kernels") {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "reference '" + shown + "' must be a relative path under kernels/"};
  }
  if (is_runner_kernel(relative)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "reference '" + shown + "' is one of the runner's own kernels (" +
                           std::string(kRunnerKernelsFolder) + "/), not a task reference"};
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
    const fs::path relative = it->path().lexically_relative(home);
    if (is_runner_kernel(relative)) {
      // The runner's own kernels, embedded in the runner at build time: not task references.
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (relative.extension() == ".cu" && it->is_regular_file(ec)) {
      paths.push_back(relative.generic_string());
    }
  }
  if (ec)
    return core::Error{core::ErrorCode::kIo, "cannot list " + root.string() + ": " + ec.message()};
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace crucible::kernels
