// Shared by the oracle test files: the repository's tasks and cases by name, and the folder of
// the committed stories260K captures.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>

#include "kernels/oracles/oracle.hpp"
#include "tasks/registry.hpp"

namespace crucible::oracle_test {

using Tensors = std::map<std::string, kernels::OracleTensor>;

inline const std::filesystem::path& captures_dir() {
  static const std::filesystem::path path =
      std::filesystem::path(CRUCIBLE_SOURCE_DIR) / "tasks" / "capture" / "cases" / "stories260K";
  return path;
}

// The task `id` of the repository (the registry is loaded once per test binary).
inline const tasks::Task& repository_task(const std::string& id) {
  static const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const tasks::Task* task = registry->find(id);
  REQUIRE_MESSAGE(task != nullptr, "no task " << id);
  return *task;
}

inline const tasks::Case& case_named(const tasks::Task& task, const std::string& name) {
  const tasks::Case* c = task.find_case(name);
  REQUIRE_MESSAGE(c != nullptr, "no case " << name << " in " << task.id);
  return *c;
}

}  // namespace crucible::oracle_test
