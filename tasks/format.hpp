// Human-readable text for `crucible tasks list` and `crucible tasks show ID`.
#pragma once

#include <string>

#include "tasks/registry.hpp"

namespace crucible::tasks {

// One line per task under a header: id, category, visible/hidden case counts, title.
// Ends with a newline. Pure.
std::string format_task_table(const Registry& registry);

// Everything an operator wants to know about one task, hidden cases included (this is an
// operator's view, not an agent's): module, description, symbols, tensors, scalars, tolerances,
// roofline per case, reference path. Ends with a newline. Pure.
std::string format_task_details(const Task& task);

}  // namespace crucible::tasks
