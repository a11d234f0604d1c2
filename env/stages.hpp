// The stages that need the sandbox (compile, GPU) and the assembly of the step pipeline.
#pragma once

#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "env/pipeline.hpp"
#include "runner/gpu_probe.hpp"
#include "runner/runner_pool.hpp"
#include "sandbox/compile_pool.hpp"

namespace crucible::env {

// Compiles the candidate in the compile pool with the plan's name expressions. Failure:
// compile_error (with the log), invalid_action (source refused by the worker), infra_error.
class CompileStage final : public Stage {
 public:
  explicit CompileStage(std::shared_ptr<sandbox::CompilePool> pool) : pool_(std::move(pool)) {}
  std::string_view name() const override { return "compile"; }
  bool available() const override { return true; }
  bool run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) override;
  core::Value stats() const override { return pool_->stats(); }

 private:
  std::shared_ptr<sandbox::CompilePool> pool_;
};

struct GpuStageOptions {
  runner::TimingOptions timing;
  double kernel_timeout_ms = 2000;
  std::chrono::milliseconds deadline_floor{20000};
};

// Checks and times the candidate against the task's reference on a GPU runner. The reference
// is compiled once per task through the same pool (and cache) as agents' code.
class GpuStage final : public Stage {
 public:
  GpuStage(std::shared_ptr<sandbox::CompilePool> compiler,
           std::shared_ptr<runner::RunnerPool> runners, GpuStageOptions options)
      : compiler_(std::move(compiler)), runners_(std::move(runners)), options_(options) {}
  std::string_view name() const override { return "gpu"; }
  bool available() const override { return true; }
  bool run(const StepJob& job, StepArtifacts& artifacts, StepResult& result) override;
  core::Value stats() const override { return runners_->stats(); }

 private:
  // The reference of `task`, compiled and with its launch plan evaluated on every case; made on
  // first use, shared afterwards. A failed compile is not kept (the next step tries again).
  struct Reference {
    sandbox::CompileOutput compiled;
    core::Result<action::EvaluatedPlan> plan{core::ErrorCode::kInternal, "not evaluated"};
    std::optional<action::LaunchPlan> parsed;  // with its expressions, for the model check
  };
  std::shared_ptr<const Reference> reference(const tasks::Task& task);
  // The runner's part of the model check: every reference the model calls and every plan
  // evaluated at each call site of each step. kInvalidArgument when the candidate's plan does
  // not hold at a call site (the message names it), kInternal when a reference is unusable.
  core::Result<runner::ModelCheck> model_check(const StepJob& job, const StepArtifacts& artifacts);
  // What the model check may add to a job's deadline: loading a model of 16 GB of weights,
  // its timing (ModelCheck::time_cap_ms) and, with trained weights, greedy decoding.
  static constexpr std::chrono::milliseconds kModelCheckAllowance{60000};

  std::shared_ptr<sandbox::CompilePool> compiler_;
  std::shared_ptr<runner::RunnerPool> runners_;
  GpuStageOptions options_;
  std::mutex mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const Reference>>> references_;
  std::uint64_t next_job_ = 1;
};

struct PipelineOptions {
  std::filesystem::path home;
  runner::GpuProbe gpus;
  // The operator's --gpus (a comma list of CUDA ordinals; empty: every GPU): the CLI narrows
  // `gpus` with runner::select_gpus before building; build_pipeline reads only `gpus`.
  std::string gpu_list;
  bool compile = true;  // start the compile pool (needs crucible-compile-worker)
  sandbox::CompilePoolOptions compile_options;
  runner::RunnerPoolOptions runner_options;
  GpuStageOptions gpu_options;
};

// validate -> compile -> gpu. A stage this build or machine cannot run becomes an
// UnavailableStage carrying the reason, so steps that reach it are answered infra_error
// truthfully. `notes` receives one line per stage that could not start.
Pipeline build_pipeline(const PipelineOptions& options, std::string* notes = nullptr);

}  // namespace crucible::env
