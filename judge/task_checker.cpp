// The table of task checkers (tasks::known_checkers() names them; a test holds the two equal).
#include "judge/task_checker.hpp"

namespace crucible::judge {

const TaskChecker* find_task_checker(std::string_view name) {
  if (name == "topk") return &topk_checker();
  if (name == "moe_align") return &moe_align_checker();
  if (name == "sampling") return &sampling_checker();
  if (name == "llada_remask") return &llada_remask_checker();
  if (name == "knn") return &knn_checker();
  if (name == "nms") return &nms_checker();
  if (name == "gaussian_projection") return &gaussian_projection_checker();
  return nullptr;
}

}  // namespace crucible::judge
