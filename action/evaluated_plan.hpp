// A launch plan as the GPU runner receives it: parsed, validated and evaluated on every case of
// the task by the server, so the runner never parses plan text. The runner needs each launch's
// kernel, name expression and argument list (to resolve and pack parameters), each workspace's
// element size, and per case the concrete grid, block, cluster and shared-memory figures.
#pragma once

#include <vector>

#include "action/launch_plan.hpp"
#include "core/result.hpp"
#include "core/value.hpp"
#include "tasks/task.hpp"

namespace crucible::action {

struct EvaluatedPlan {
  // Launches, workspaces and clusters with their names and arguments; the expressions are left
  // empty (already evaluated into `cases`).
  LaunchPlan plan;
  std::vector<ConcretePlan> cases;  // one per task case, in the task's case order
};

// Evaluates `plan` on every case of `task`. On an error (kInvalidArgument, naming the case's
// symbol values) `failed_case` is set to the failing case's index: a caller answering an agent
// must not pass on a hidden case's message.
core::Result<EvaluatedPlan> evaluate_on_cases(LaunchPlan plan, const tasks::Task& task,
                                              const PlanContext& context,
                                              std::size_t* failed_case = nullptr);

// The wire form (msgpack map) and back. from_value checks the structure (types, dimensions of
// at least 1, every run naming a launch, one workspace size per workspace); fits() then checks
// the plan against the task it is for.
core::Value to_value(const EvaluatedPlan& plan);
core::Result<EvaluatedPlan> evaluated_plan_from_value(const core::Value& value);

// Whether `plan` fits a task with `context` and `cases` cases: one concrete plan per case, every
// argument index within its list, one symbol value per symbol. kBadRequest naming what does not.
core::Status fits(const EvaluatedPlan& plan, const PlanContext& context, std::size_t cases);

}  // namespace crucible::action
