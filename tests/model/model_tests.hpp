// What the model suite's tests share: the repository they read models and tasks from, and its
// task registry (loaded once).
#pragma once

#include <doctest/doctest.h>

#include <filesystem>

#include "tasks/registry.hpp"

namespace crucible::testing {

inline const std::filesystem::path kHome = CRUCIBLE_SOURCE_DIR;

inline const tasks::Registry& registry() {
  static const auto loaded = tasks::Registry::load(kHome);
  REQUIRE(loaded.ok());
  return *loaded;
}

}  // namespace crucible::testing
