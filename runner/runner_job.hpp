// The job the server sends a GPU runner and the report it gets back (msgpack over a pipe).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

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
  // The visible cases' timing together, wall clock: a case whose share of what is left of it
  // (what is left over the cases left) is spent stops once each side has min_samples, whether
  // or not its interval is as narrow as target_rel_ci. Bounds a slow candidate's step (every
  // call of a kernel 100x slower than the reference costs 100 of the reference's) at about
  // min_samples of its calls per case.
  double step_budget_ms = 1000;
  // Timed calls whose outputs are checked against a reference run on the same inputs: the first
  // timed call and a random share of the others, chosen from a seed the kernel cannot see (so a
  // kernel that misbehaves on some calls is caught).
  double check_fraction = 0.1;
};

// A task the model step calls: its reference and its launch plan evaluated by the server at each
// of the task's call sites, step by step (ModelCheck::steps, each step's sites in program
// order), since the runner never evaluates plan expressions.
struct ModelReference {
  std::string task;
  std::string task_hash;
  CompiledModule compiled;
  action::EvaluatedPlan plan;  // cases: one per call site of the task, step by step
};

// The model check (docs/models.md): after the candidate is correct and timed on its cases, the
// decode step of a model (models/<model>.toml in the runner's home) runs as one CUDA graph
// with task references at every call site and again with the candidate at every call site of
// the job's task; the two are timed interleaved, and with trained weights both decode the
// model's prompts greedily.
struct ModelCheck {
  std::string model;  // file name under models/, e.g. llama3_8b.toml
  // The steps the check expands, each a value of every model variable: the timed step first,
  // then (models with prompts) the greedy-decoding steps, context 1, 2, ...
  std::vector<std::map<std::string, std::int64_t>> steps;
  std::vector<ModelReference> references;  // every task the model calls, the job's included
  action::EvaluatedPlan candidate;         // cases: the candidate at its task's call sites
  std::uint32_t min_samples = 10;          // step timings per side
  std::uint32_t max_samples = 200;
  double target_rel_ci = 0.005;  // stop when the step speedup's 95 % interval is this narrow
  double time_cap_ms = 3000;     // wall clock for the timing, both sides together
  bool hidden_states = false;    // report the reference step's final hidden states (last tokens)

  core::Value to_value() const;
  static core::Result<ModelCheck> from_value(const core::Value& value);
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
  std::optional<ModelCheck> model;  // set: the model check runs after an ok step

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
  // The model check's report when the job asked for one and the step was ok: step times with
  // and without the candidate, the op's share, tokens; or {error: "..."} when it could not run.
  core::Value model = nullptr;
  // True when the runner's CUDA context may be unusable (sticky error): the supervisor must
  // replace the process after this job.
  bool context_lost = false;

  core::Value to_value() const;
  static core::Result<RunReport> from_value(const core::Value& value);
};

}  // namespace crucible::runner
