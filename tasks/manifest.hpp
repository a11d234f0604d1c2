// Reading one task.toml into a validated Task; the format is documented in docs/tasks.md.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tasks/task.hpp"

namespace crucible::tasks {

// Parses and validates the manifest at `manifest` (a path to a task.toml under
// home/"tasks"). Reference sources resolve against `home`; captured value files against the
// task's folder. Every problem found is appended to `errors` as one line
// "<manifest path relative to home>: <key>: <what is wrong>", e.g.
//   "tasks/llm/rms_norm/task.toml: tensors[1].dtype: unknown dtype 'bf17' (known: bf16, ...)".
// Returns the Task only when the manifest added no error. `declared_id`, if given, receives the
// id the file declares even when it is invalid (the registry checks duplicates with it).
// Reads files; otherwise pure.
// Thread-safe (no shared state).
std::optional<Task> load_manifest(const std::filesystem::path& manifest,
                                  const std::filesystem::path& home,
                                  std::vector<std::string>& errors,
                                  std::string* declared_id = nullptr);

}  // namespace crucible::tasks
