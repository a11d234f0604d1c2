// The server-side pool of crucible-compile-worker processes: queueing, deadlines, crash and
// timeout recovery, worker recycling, result caching and de-duplication of identical jobs.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"
#include "sandbox/compile_job.hpp"

namespace crucible::sandbox {

// Where crucible-compile-worker lives by default: next to the running executable.
std::filesystem::path default_worker_path();
// The CUDA include directories found at build time (CUDAToolkit_INCLUDE_DIRS plus its cccl/
// subfolder when present) that exist on this machine.
std::vector<std::filesystem::path> default_include_dirs();
// CRUCIBLE_DEFAULT_ARCH from the CMake cache ("sm_90a" unless configured otherwise).
std::string default_compile_arch();

struct CompilePoolOptions {
  std::filesystem::path worker_exe = default_worker_path();
  int workers = 0;                              // 0: one per hardware thread
  std::chrono::milliseconds deadline{20000};    // wall clock per compile
  std::size_t memory_limit_bytes = 4ull << 30;  // RLIMIT_AS of each worker
  std::filesystem::path cache_dir;              // empty: no disk cache
  std::size_t memory_cache_entries = 1024;      // 0: no memory cache
  bool isolate = true;                          // namespaces + pivot_root + seccomp
  bool use_pch = true;                          // precompiled prelude, kept per worker
  std::string default_arch = default_compile_arch();
  std::vector<std::filesystem::path> include_dirs = default_include_dirs();
  int recycle_after_jobs = 500;                     // a worker is replaced after this many jobs
  std::size_t max_source_bytes = 1u << 20;          // larger sources: kInvalidAction
  std::size_t max_log_bytes = 16 * 1024;            // per compile log, after sanitizing
  std::chrono::milliseconds start_timeout{120000};  // per worker start (warm-up + PCH)
  bool allow_test_faults = false;                   // honour CompileJob::test_fault (tests only)
  // A deadline miss is charged to the source only if the worker got at least this share of one
  // core's time during the deadline (read from /proc/<pid>/stat). Below it the host stopped or
  // starved the worker, and the job is retried on a fresh worker. In [0, 1]; 0: always charged.
  double timeout_min_cpu_share = 0.25;
};

// Thread-safe. Status of a CompileOutput:
//   kOk            compiled; cubin, lowered names and resources filled in;
//   kCompileError  the source's fault: NVRTC rejected it, or its compile used the CPU until the
//                  deadline, hit the CPU limit or the memory cap, or crashed a fresh worker
//                  (the log says which);
//   kInvalidAction the job broke a rule checked before compiling (source size, arch);
//   kInfraError    the host's or the pool's fault, never the agent's: a worker could not
//                  start, shutdown, or the job's worker was lost to the host on the retry too
//                  (killed by a signal the pool did not send, stopped or starved of CPU past
//                  the deadline; the log says what happened).
// A job whose worker crashes, is killed from outside, or is stopped or starved of CPU until the
// deadline is retried once on a fresh worker, which gives the real result when the host leaves
// it alone. A worker found dead before a job is replaced without spending that retry.
// ok and compile_error results are cached (memory LRU + optional disk folder), except those
// that ran out of a resource (deadline, memory cap, CPU limit, crash), which depend on load.
class CompilePool {
 public:
  // Starts every worker and waits until each has loaded NVRTC, entered its jail and built its
  // precompiled header. Errors: kInvalidArgument (bad options), kInternal (a worker failed to
  // start; the message carries its diagnostics).
  static core::Result<std::unique_ptr<CompilePool>> start(CompilePoolOptions options);

  // Queues a job. Never throws for bad source; identical jobs (same cache key) in flight at the
  // same time are compiled once and every caller gets the result.
  std::future<CompileOutput> submit(CompileJob job);

  // Counters: jobs, compiled, cache_hits_memory, cache_hits_disk, dedup_joins, timeouts (every
  // deadline miss), crashes (workers lost in a way the source may cause), host_faults (workers
  // lost to the host: outside signals, stopped or starved at the deadline, dead while idle),
  // retries, worker_starts, worker_restarts, worker_recycles, queue_depth, workers, toolchain,
  // isolation, pch, deadline_ms, worker_pids.
  core::Value stats() const;

  // The options the pool runs with (workers resolved).
  const CompilePoolOptions& options() const;

  // Test hook: the pids of the workers that hold a job right now (sent, not yet answered), so
  // a test can signal a worker mid-compile to play a host fault. Racy by nature: a pid may
  // leave the list as soon as it is returned.
  std::vector<int> busy_worker_pids() const;

  // Stops accepting work, SIGKILLs every worker's process group, answers queued jobs with
  // kInfraError.
  ~CompilePool();

  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  struct State;  // implementation

 private:
  explicit CompilePool(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace crucible::sandbox
