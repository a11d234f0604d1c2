// Supervision of the GPU runners: long-lived children (several per GPU, each with a pre-started
// spare), a deadline per job, SIGKILL and replacement on a hang, a crash or a lost CUDA context,
// and the GPU gate (runner/gpu_gate.hpp) that lets the runners of a GPU check correctness side
// by side while each timing window has the GPU to itself.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"
#include "runner/runner_job.hpp"

namespace crucible::runner {

// Where crucible-gpu-runner lives by default: next to the running executable.
std::filesystem::path default_runner_path();

// Runners per GPU when the operator does not say: a quarter of the host's cores, 1 to 4 (a
// runner's correctness work is mostly host work, and compile workers need cores too; four on
// the H200 machine's 16 cores measured 2.6 steps/s on the training mix against 2.1 with one, at
// the same speedup spread: docs/runner.md).
int default_runners_per_device();

struct RunnerPoolOptions {
  std::filesystem::path runner_exe = default_runner_path();
  std::filesystem::path home;    // passed to the runner (--home) to load the same tasks
  std::vector<int> devices;      // CUDA ordinals
  int runners_per_device = 1;    // runner processes per device, each with its own context
  bool spares = true;            // keep a started spare per runner for fast replacement
  int recycle_after_jobs = 500;  // a runner is replaced after this many jobs
  std::chrono::milliseconds start_timeout{120000};
  // The recent past that spreads jobs and that stats() reports as `recent_*`: a free GPU that
  // was busy for less of it is preferred.
  std::chrono::seconds load_window{60};
};

class RunnerPool {
 public:
  // Starts one runner per device and waits until each reports ready. Errors: kIo when a runner
  // cannot be started or reports no usable device (the message carries its reason).
  static core::Result<std::unique_ptr<RunnerPool>> start(RunnerPoolOptions options);
  ~RunnerPool();
  RunnerPool(const RunnerPool&) = delete;
  RunnerPool& operator=(const RunnerPool&) = delete;

  // Runs `job` on a free runner, waiting only when every runner is busy; thread-safe. Of the
  // free runners it takes one on the GPU with the fewest busy runners, then the one busy for the
  // least time within `load_window` (then the fewest jobs in it, then the first), so load stays
  // even. The job holds its GPU's gate shared while it runs and exclusive while the runner
  // times (the runner asks for it); `deadline` counts the runner's own time, not its waits for
  // the gate. Never throws for anything the candidate does: a runner that misses `deadline`,
  // crashes or loses its context is killed (its whole process group) and replaced by its spare,
  // and the report says timeout or runtime_error with what is known; the gate is given back
  // only once the process is gone. Other jobs on other runners are unaffected.
  RunReport run(const RunJob& job, std::chrono::milliseconds deadline);

  // {queue_depth, uptime_s, window_s, jobs, busy_s, timeouts, crashes, lost_contexts, restarts,
  //  runners: [{device, busy, spare, jobs, busy_s, utilisation, recent_jobs, recent_busy_s,
  //             recent_utilisation, timeouts, crashes, lost_contexts, restarts}],
  //  gpus: [{device, runners, timing_utilisation, and GpuGate::stats()'s fields}]}
  // One runner entry per runner, by device in options order, and one gpu entry per device; the
  // top-level counters are the runners' sums; timing_utilisation is the share of the pool's
  // uptime the GPU was held exclusive. Busy
  // time counts a job from taking the GPU until its report or kill, a job still running
  // included; utilisation is busy time over the pool's uptime, recent_utilisation over the last
  // window_s seconds (less right after start), both within [0, 1]. docs/protocol.md, `stats`.
  core::Value stats() const;
  // Device descriptions reported by the runners at start.
  core::Value devices() const;

  struct State;

 private:
  explicit RunnerPool(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace crucible::runner
