// The task registry: every manifest under tasks/, validated once at startup, plus its views.
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"
#include "tasks/task.hpp"

namespace crucible::tasks {

class Registry {
 public:
  // Loads every tasks/**/task.toml under home/"tasks", resolves reference sources relative to
  // `home` (the repository root), validates everything and reports EVERY problem, one per line
  // ("tasks/llm/rms_norm/task.toml: tensors[1].dtype: unknown dtype 'bf17' (known: ...)").
  // Errors: kIo (no tasks folder, unreadable tree), kInvalidArgument (any manifest problem,
  // duplicate ids, or no task at all). Reads files; the result is immutable.
  static core::Result<Registry> load(const std::filesystem::path& home);

  // nullptr if absent. The pointer lives as long as the Registry.
  const Task* find(std::string_view id) const;
  // Sorted by id.
  const std::vector<Task>& all() const { return tasks_; }
  // Absolute repository root the registry was loaded from.
  const std::filesystem::path& home() const { return home_; }

 private:
  Registry() = default;
  std::filesystem::path home_;
  std::vector<Task> tasks_;
};

// {id, category, module, title}: one entry of the `tasks` reply.
core::Value task_summary(const Task& task);

// What an agent is shown (the `task` reply and the `reset` observation): id, category, module,
// title, description, symbols, tensors (name, dtype, shape, role, tolerance for outputs),
// scalars, visible cases (name, note, symbol values, scalar values, weight, value provenance,
// roofline bytes/flops), tolerance defaults, roofline formulas, the reference source text and a
// note on the launch-plan directives. Never hidden cases, never seeds, never file paths on
// the server.
core::Value agent_view(const Task& task);

// Everything, hidden cases and fixed seeds included: for trajectory logs and operators, never
// for agents.
core::Value full_view(const Task& task);

}  // namespace crucible::tasks
