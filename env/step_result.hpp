// StepResult: everything a step produced, the observation an agent and a trainer receive.
#pragma once

#include <optional>
#include <string>

#include "core/step_status.hpp"
#include "core/value.hpp"
#include "rewards/reward.hpp"

namespace crucible::env {

struct StepResult {
  core::StepStatus status = core::StepStatus::kInfraError;
  std::string message;                // one line an agent can act on
  core::Value compile = nullptr;      // compile stage report, when it ran
  core::Value correctness = nullptr;  // per-case correctness, when the GPU stage ran
  core::Value timing = nullptr;       // per-case timing, when the GPU stage ran
  std::optional<double> speedup;      // weighted geometric mean over timing cases
  // Weighted geometric means over timing cases of the candidate's and the reference's median
  // call time and of the roofline floor, in nanoseconds (for rewards that need times).
  std::optional<double> candidate_ns;
  std::optional<double> reference_ns;
  std::optional<double> floor_ns;
  // The 95 % interval of `speedup` (the runner's timing.speedup_ci95).
  std::optional<double> speedup_low;
  std::optional<double> speedup_high;
  core::Value stages = core::Value::object();  // stage name -> wall milliseconds
  // The model check's report (runner/runner_job.hpp, RunReport::model), when one was asked for
  // and the step was ok.
  core::Value model = nullptr;
  rewards::RewardBreakdown reward;

  // {status, message, reward, stages, compile, correctness, timing, speedup?, model?}
  core::Value to_value() const;
};

}  // namespace crucible::env
