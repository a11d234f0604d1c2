// Supervision of the GPU runners: one long-lived child per GPU plus a pre-started spare, a
// deadline per job, SIGKILL and replacement on a hang, a crash or a lost CUDA context.
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

struct RunnerPoolOptions {
  std::filesystem::path runner_exe = default_runner_path();
  std::filesystem::path home;    // passed to the runner (--home) to load the same tasks
  std::vector<int> devices;      // CUDA ordinals; one runner (and one spare) each
  bool spares = true;            // keep a started spare per device for fast replacement
  int recycle_after_jobs = 500;  // a runner is replaced after this many jobs
  std::chrono::milliseconds start_timeout{120000};
};

class RunnerPool {
 public:
  // Starts one runner per device and waits until each reports ready. Errors: kIo when a runner
  // cannot be started or reports no usable device (the message carries its reason).
  static core::Result<std::unique_ptr<RunnerPool>> start(RunnerPoolOptions options);
  ~RunnerPool();
  RunnerPool(const RunnerPool&) = delete;
  RunnerPool& operator=(const RunnerPool&) = delete;

  // Runs `job` on the first free GPU, waiting for one; thread-safe. Never throws for anything
  // the candidate does: a runner that misses `deadline`, crashes or loses its context is killed
  // (its whole process group) and replaced by the spare, and the report says timeout or
  // runtime_error with what is known. Other jobs on other runners are unaffected.
  RunReport run(const RunJob& job, std::chrono::milliseconds deadline);

  // {runners: [{device, jobs, restarts, ...}], jobs, timeouts, crashes, restarts}
  core::Value stats() const;
  // Device descriptions reported by the runners at start.
  core::Value devices() const;

  struct State;

 private:
  explicit RunnerPool(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace crucible::runner
