// The job the server sends a GPU runner and the report it gets back (msgpack over a pipe).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "action/evaluated_plan.hpp"
#include "core/result.hpp"
#include "core/step_status.hpp"
#include "core/value.hpp"

namespace crucible::runner {

// A compiled module: the cubin and the lowered (mangled) name of every name expression.
struct CompiledModule {
  std::string cubin;
  std::map<std::string, std::string> lowered_names;
};

struct TimingOptions {
  double target_rel_ci = 0.01;     // stop when the median's 95% CI half-width is within this
  std::uint32_t min_samples = 30;  // per kernel (candidate and reference each)
  std::uint32_t max_samples = 1000;
  std::uint32_t warmup_calls = 5;
  double time_cap_ms = 1000;  // per timing case, wall clock
  // Timed calls whose outputs are checked against a reference run on the same inputs: the first
  // timed call and a random share of the others, chosen from a seed the kernel cannot see (so a
  // kernel that misbehaves on some calls is caught).
  double check_fraction = 0.1;
};

// Everything a runner needs. The runner loads the task from its own registry (same home as the
// server) and refuses the job when its copy's content hash differs from `task_hash`; a job
// carries only what is specific to this step. Launch plans arrive evaluated on every case: the
// runner never parses plan text.
struct RunJob {
  std::uint64_t id = 0;
  std::string task;
  std::string task_hash;     // tasks::Task::content_hash of the server's copy
  std::uint64_t seed = 0;    // episode seed: case values derive from it
  std::uint64_t secret = 0;  // seeds choices the kernel must not predict (checked calls)
  CompiledModule reference;
  CompiledModule candidate;
  action::EvaluatedPlan reference_plan;
  action::EvaluatedPlan candidate_plan;
  bool time = true;                 // time the visible cases when every case is correct
  double kernel_timeout_ms = 2000;  // one call may run this long before it counts as a hang
  TimingOptions timing;

  core::Value to_value() const;
  static core::Result<RunJob> from_value(const core::Value& value);
};

// The runner's answer. `status` is the step status; kInfraError means the runner or the
// reference failed, never the candidate. `correctness` and `timing` are observation maps.
struct RunReport {
  std::uint64_t id = 0;
  core::StepStatus status = core::StepStatus::kInfraError;
  std::string message;
  core::Value correctness = nullptr;
  core::Value timing = nullptr;
  std::optional<double> speedup;
  core::Value device = nullptr;  // name, clocks at start and end, measured bandwidth
  // True when the runner's CUDA context may be unusable (sticky error): the supervisor must
  // replace the process after this job.
  bool context_lost = false;

  core::Value to_value() const;
  static core::Result<RunReport> from_value(const core::Value& value);
};

}  // namespace crucible::runner
