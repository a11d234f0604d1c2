// The step pipeline: validate -> compile -> run on GPU, then reward; each stage may end the step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "action/evaluated_plan.hpp"
#include "core/value.hpp"
#include "env/model_option.hpp"
#include "env/step_result.hpp"
#include "rewards/reward.hpp"
#include "sandbox/compile_job.hpp"
#include "tasks/task.hpp"

namespace crucible::env {

// One validated action to score. The task pointer stays valid for the server's lifetime.
struct StepJob {
  const tasks::Task* task = nullptr;
  std::string source;
  core::Value plan;  // structured plan or null
  std::uint64_t seed = 0;
  rewards::RewardSpec reward_spec;
  core::Value tag;  // request tag (null if none): kept in the record and echoed in the reply
  std::optional<ModelRequest> model;  // the model check, when asked for
};

// What one stage hands to the next: the launch plan evaluated on every case of the task, and
// the compiled candidate.
struct StepArtifacts {
  std::optional<action::EvaluatedPlan> plan;
  // The plan as parsed, its expressions kept, when the model check will evaluate it at the
  // model's call sites.
  std::optional<action::LaunchPlan> parsed_plan;
  std::optional<sandbox::CompileOutput> compiled;
};

// A stage inspects the job and fills its part of the result. It returns false to end the step
// (after setting result.status and result.message); the remaining stages are skipped. Stages are
// called concurrently from several worker threads and must be thread-safe.
class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string_view name() const = 0;
  // True when the stage can do real work on this server; shown by `hello` and `stats`.
  virtual bool available() const = 0;
  virtual bool run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) = 0;
  // The stage's own counters for `stats` (queue depth, utilisation...); null when it has none.
  virtual core::Value stats() const { return core::Value(); }
};

class Pipeline {
 public:
  void add(std::unique_ptr<Stage> stage);
  // Runs the stages in order, times each, then computes the reward. A stage that throws ends
  // the step as infra_error with the exception's text: the server's fault, not the agent's.
  StepResult run(const StepJob& job) const;
  // {stage name: available}
  core::Value describe() const;
  // {stage name: the stage's counters}, for the stages that keep any.
  core::Value stats() const;

 private:
  std::vector<std::unique_ptr<Stage>> stages_;
};

// Checks the action before anything expensive runs: the source is text without NUL bytes and
// declares a kernel, and its launch plan parses and evaluates for every case of the task within
// the device limits. Failure: invalid_action, with the plan's own message for visible cases and
// a message that names no shape for hidden ones.
class ValidateStage final : public Stage {
 public:
  std::string_view name() const override { return "validate"; }
  bool available() const override { return true; }
  bool run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) override;
};

// Stands for a stage this server cannot run (no GPU, or a stage not built): every step that
// reaches it ends as infra_error with `reason`, so trainers drop the sample instead of learning
// from a made-up result.
class UnavailableStage final : public Stage {
 public:
  UnavailableStage(std::string name, std::string reason)
      : name_(std::move(name)), reason_(std::move(reason)) {}
  std::string_view name() const override { return name_; }
  bool available() const override { return false; }
  bool run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) override;

 private:
  std::string name_;
  std::string reason_;
};

}  // namespace crucible::env
