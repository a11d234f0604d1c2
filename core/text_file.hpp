// Whole-file reads and UTC timestamps: small needs shared by the CLI, the server, tasks and tests.
#pragma once

#include <filesystem>
#include <string>

#include "core/result.hpp"

namespace crucible::core {

// The bytes of `path`. Errors: kIo ("cannot read PATH") when it cannot be opened or read.
Result<std::string> read_text_file(const std::filesystem::path& path);

// The current UTC time formatted by strftime `format`; the default is ISO 8601
// ("2026-11-29T22:12:02Z"). Thread-safe.
std::string utc_time_text(const char* format = "%Y-%m-%dT%H:%M:%SZ");

}  // namespace crucible::core
