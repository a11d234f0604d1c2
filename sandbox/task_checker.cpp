// The table of task checkers (tasks::known_checkers() names them; a test holds the two equal).
#include "sandbox/task_checker.hpp"

namespace crucible::sandbox {

const TaskChecker* find_task_checker(std::string_view name) {
  if (name == "topk") return &topk_checker();
  return nullptr;
}

}  // namespace crucible::sandbox
