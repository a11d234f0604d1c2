// make_plan_context.
#include "sandbox/plan_context.hpp"

namespace crucible::sandbox {

PlanContext make_plan_context(const tasks::Task& task, std::int64_t max_smem_bytes) {
  PlanContext context;
  for (const auto& tensor : task.tensors) context.tensors.emplace_back(tensor.name, tensor.dtype);
  for (const auto& scalar : task.scalars) context.scalars.emplace_back(scalar.name, scalar.dtype);
  context.symbols = task.symbols;
  if (max_smem_bytes > 0) context.limits.max_smem_bytes = max_smem_bytes;
  return context;
}

}  // namespace crucible::sandbox
