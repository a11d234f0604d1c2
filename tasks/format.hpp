// Human-readable text for `crucible tasks list` and `crucible tasks show ID`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "tasks/registry.hpp"

namespace crucible::tasks {

// One line per task under a header: id, category, visible/hidden case counts, title.
// Ends with a newline. Pure.
std::string format_task_table(const Registry& registry);

// One task: module, description, symbols, tensors, scalars, tolerances, reference path, and
// its cases with their roofline floors: the visible ones (what an agent is shown), and with
// `include_hidden` the hidden ones too (a maintainer's view, `crucible tasks show --all`).
// Ends with a newline. Pure.
std::string format_task_details(const Task& task, bool include_hidden = false);

// A case's symbols as "name=value" in name order, joined by `separator`.
std::string symbols_text(const std::map<std::string, std::int64_t>& symbols,
                         std::string_view separator = " ");

}  // namespace crucible::tasks
