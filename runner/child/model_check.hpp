// The model check of a job (RunJob::model, docs/models.md): a model's decode step built from task
// references, run as one CUDA graph with and without the candidate at every call site of its
// task, timed interleaved with CUPTI; the hidden states the two steps leave; with trained
// weights, greedy tokens of the model's prompts through both. Private to crucible-gpu-runner.
#pragma once

#include "core/value.hpp"
#include "runner/child/device.hpp"
#include "runner/child/kernel_timer.hpp"
#include "runner/runner_job.hpp"
#include "tasks/registry.hpp"

namespace crucible::runner::child {

// Runs job.model (which must be set) after the job's step was ok. Returns the report:
//   model, variables, calls (kernel calls a step makes),
//   reference_step_ns, candidate_step_ns (medians of CUPTI spans of the graph launches, first
//     kernel start to last kernel end, launch gaps included), step_speedup and its 95 %
//     interval, samples per side,
//   op_share (the candidate task's kernels' share of the reference step), op_speedup (those
//     kernels' time in the reference step over the candidate's in its step),
//   sites: per call site its task, calls, reference_ns and candidate_ns (medians, all layers),
//   hidden_state: the two steps' final hidden states compared (max_abs_diff, rel_l2) and the
//     top-1 agreement of their logits per sequence,
//   tokens (models with prompts): the greedy tokens of both, agreement and first divergence;
// or {error: "..."} when the check could not run (its plan does not hold at a call site, the
// model is unknown, ...). Throws CudaFailure when the device fails (the caller reports it and,
// for a sticky error, replaces the runner).
core::Value run_model_check(const RunJob& job, const tasks::Registry& registry, Device& device,
                            KernelTimer& timer);

}  // namespace crucible::runner::child
