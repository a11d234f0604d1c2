// Locating and reading the production reference kernels under kernels/ (NVRTC sources).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace crucible::kernels {

// Reads the reference source at `relative_path` (as written in a task manifest, e.g.
// "kernels/llm/rms_norm.cu") under the repository root `home`.
// Errors: kInvalidArgument (absolute path, a path that leaves kernels/, not a .cu or .cuh
// file), kIo (missing or unreadable). Thread-safe.
core::Result<std::string> read_reference(const std::filesystem::path& home,
                                         std::string_view relative_path);

// Every reference source under home/"kernels" (*.cu), as sorted paths relative to `home`
// ("kernels/llm/rms_norm.cu"). Errors: kIo (no kernels folder, unreadable tree).
core::Result<std::vector<std::string>> list_references(const std::filesystem::path& home);

}  // namespace crucible::kernels
