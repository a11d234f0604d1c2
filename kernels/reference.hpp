// Locating and reading the production reference kernels under kernels/ (NVRTC sources).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace crucible::kernels {

// The folder of the GPU runner's own kernels, relative to the repository root. They are .cu files
// embedded in the runner at build time (kernels/runner/module_source.hpp), not task references:
// list_references skips the folder and read_reference refuses it.
inline constexpr std::string_view kRunnerKernelsFolder = "kernels/runner";

// Whether the repository-relative `relative_path` is kRunnerKernelsFolder or lies under it.
bool is_runner_kernel(const std::filesystem::path& relative_path);

// Reads the reference source at `relative_path` (as written in a task manifest, e.g.
// "kernels/llm/rms_norm.cu") under the repository root `home`.
// Errors: kInvalidArgument (absolute path, a path that leaves kernels/, a path under
// kRunnerKernelsFolder, not a .cu or .cuh file), kIo (missing or unreadable). Thread-safe.
core::Result<std::string> read_reference(const std::filesystem::path& home,
                                         std::string_view relative_path);

// Every reference source under home/"kernels" (*.cu) outside kRunnerKernelsFolder, as sorted
// paths relative to `home` ("kernels/llm/rms_norm.cu"). Errors: kIo (no kernels folder,
// unreadable tree).
core::Result<std::vector<std::string>> list_references(const std::filesystem::path& home);

}  // namespace crucible::kernels
