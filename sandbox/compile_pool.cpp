// Compile pool: one supervisor thread per worker process, a shared job queue, deadlines via
// poll(), SIGKILL of the worker's process group on a miss, lost jobs charged to the source or
// the host (how the worker died, how much CPU it had), a cache in front.
#include "sandbox/compile_pool.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/log.hpp"
#include "sandbox/compile_cache.hpp"
#include "sandbox/frame_pipe.hpp"
#include "sandbox/process.hpp"

#ifndef CRUCIBLE_DEFAULT_ARCH
#define CRUCIBLE_DEFAULT_ARCH "sm_90a"
#endif
#ifndef CRUCIBLE_CUDA_INCLUDE_DIRS
#define CRUCIBLE_CUDA_INCLUDE_DIRS "/usr/local/cuda/include"
#endif

namespace crucible::sandbox {
namespace {

using core::ErrorCode;
using core::StepStatus;
using core::Value;
using Clock = std::chrono::steady_clock;

CompileOutput make_output(StepStatus status, std::string log) {
  CompileOutput out;
  out.status = status;
  out.log = std::move(log);
  return out;
}

std::future<CompileOutput> ready_future(CompileOutput output) {
  std::promise<CompileOutput> promise;
  promise.set_value(std::move(output));
  return promise.get_future();
}

core::DecodeLimits worker_reply_limits() {
  core::DecodeLimits limits;
  limits.max_bytes = 256u << 20;
  limits.max_bin_bytes = 256u << 20;
  limits.max_str_bytes = 16u << 20;
  limits.max_map_entries = 65536;
  return limits;
}

struct QueuedJob {
  std::string key;
  CompileJob job;
};

// The outcome of sending one job to one worker.
enum class RunEnd { kAnswered, kDeadline, kCancelled, kWorkerLost };

// Why a job got no answer from its worker. The first two are the source's fault at once; a
// crash is the source's fault when a fresh worker crashes too; kHost never is.
enum class LossCause {
  kTimedOut,  // deadline passed while the worker had the CPU
  kCpuLimit,  // SIGXCPU: the worker's per-job RLIMIT_CPU
  kCrashed,   // a crash signal, an exit, or an unreadable reply
  kHost,      // a signal from outside, or the worker stopped or starved of CPU at the deadline
};

}  // namespace

class Slot;

struct CompilePool::State {
  explicit State(CompilePoolOptions opts)
      : options(std::move(opts)), cache(options.memory_cache_entries, options.cache_dir) {}

  CompilePoolOptions options;
  CompileCache cache;

  mutable std::mutex mutex;
  std::condition_variable work_cv;
  std::condition_variable start_cv;
  std::deque<QueuedJob> queue;
  std::unordered_map<std::string, std::vector<std::promise<CompileOutput>>> in_flight;
  bool stopping = false;
  int slots_started = 0;
  int slots_failed = 0;
  std::string start_error;
  std::string toolchain;
  Value isolation = Value::object();
  bool pch = false;
  std::vector<std::unique_ptr<Slot>> slots;

  std::atomic<std::uint64_t> jobs{0}, compiled{0}, hits_memory{0}, hits_disk{0}, dedup{0},
      timeouts{0}, crashes{0}, host_faults{0}, retries{0}, worker_starts{0}, worker_restarts{0},
      recycles{0};

  void finish(const std::string& key, CompileOutput output, bool cacheable);
};

// One worker process and the thread that owns it. The thread spawns the worker (so the
// worker's parent-death signal is tied to a thread that outlives it), feeds it jobs, and
// replaces it after a crash, a deadline miss or recycle_after_jobs jobs.
class Slot {
 public:
  explicit Slot(CompilePool::State& state) : state_(state) {
    if (::pipe2(cancel_pipe_, O_CLOEXEC) != 0) cancel_pipe_[0] = cancel_pipe_[1] = -1;
  }
  ~Slot() {
    if (thread_.joinable()) thread_.join();
    for (int fd : cancel_pipe_) {
      if (fd >= 0) ::close(fd);
    }
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  void launch() {
    thread_ = std::thread([this] { run(); });
  }
  void cancel() {
    if (cancel_pipe_[1] >= 0) {
      const char byte = 'x';
      ssize_t ignored = ::write(cancel_pipe_[1], &byte, 1);
      (void)ignored;
    }
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  pid_t worker_pid() const { return worker_pid_.load(); }
  pid_t busy_pid() const { return busy_pid_.load(); }

 private:
  void run();
  core::Status spawn_worker();
  void drop_worker();
  // How an attempt at a job was lost, and whose fault that was.
  struct Loss {
    LossCause cause = LossCause::kCrashed;
    std::string what;     // follows "the compile worker": "was killed by signal 9 (Killed) ..."
    std::string measure;  // CPU time over the deadline, when measured
  };

  CompileOutput process(const QueuedJob& item, bool* cacheable);
  RunEnd run_on_worker(const CompileJob& job, CompileOutput* out, std::string* detail);
  Loss classify_death(const ExitStatus& status, bool killed_by_pool,
                      const std::string& detail) const;
  Loss classify_deadline(const std::optional<ProcessUsage>& before,
                         const std::optional<ProcessUsage>& after) const;
  std::string agent_fault_message(const Loss& loss, const std::optional<Loss>& first) const;
  std::string host_fault_message(const Loss& first, const Loss& second) const;

  CompilePool::State& state_;
  int cancel_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::optional<ChildProcess> worker_;
  std::atomic<pid_t> worker_pid_{0};  // for stats(), read from other threads
  std::atomic<pid_t> busy_pid_{0};    // the worker while it holds a job (test hook)
  int jobs_on_worker_ = 0;
};

void CompilePool::State::finish(const std::string& key, CompileOutput output, bool cacheable) {
  if (cacheable) cache.store(key, output);
  std::vector<std::promise<CompileOutput>> waiters;
  {
    std::lock_guard lock(mutex);
    auto it = in_flight.find(key);
    if (it != in_flight.end()) {
      waiters = std::move(it->second);
      in_flight.erase(it);
    }
  }
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    CompileOutput copy = output;
    copy.cache_hit = output.cache_hit || i > 0;  // later callers joined an in-flight compile
    waiters[i].set_value(std::move(copy));
  }
}

void Slot::run() {
  // SIGPIPE from a dead worker must never reach the server: block it on this thread for good.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);

  core::Status started = spawn_worker();
  {
    std::lock_guard lock(state_.mutex);
    if (started) {
      ++state_.slots_started;
    } else {
      ++state_.slots_failed;
      if (state_.start_error.empty()) state_.start_error = started.error().message;
    }
  }
  state_.start_cv.notify_all();
  if (!started) return;

  while (true) {
    if (!worker_) {
      {
        std::lock_guard lock(state_.mutex);
        if (state_.stopping) break;
      }
      // Replace a lost or retired worker while idle, so the next job does not wait for it.
      if (auto respawned = spawn_worker(); !respawned) {
        core::log_error("compile pool: " + respawned.error().message);
      }
    }
    QueuedJob item;
    {
      std::unique_lock lock(state_.mutex);
      state_.work_cv.wait(lock, [&] { return state_.stopping || !state_.queue.empty(); });
      if (state_.stopping) break;
      item = std::move(state_.queue.front());
      state_.queue.pop_front();
    }
    bool cacheable = false;
    CompileOutput out = process(item, &cacheable);
    state_.finish(item.key, std::move(out), cacheable);
  }
  drop_worker();
}

core::Status Slot::spawn_worker() {
  const auto& options = state_.options;
  SpawnOptions spawn;
  spawn.executable = options.worker_exe;
  spawn.args = {"--arch",
                options.default_arch,
                "--max-log-bytes",
                std::to_string(options.max_log_bytes),
                "--job-cpu-seconds",
                std::to_string(2 * options.deadline.count() / 1000 + 5)};
  for (const auto& dir : options.include_dirs) {
    spawn.args.push_back("--include");
    spawn.args.push_back(dir.string());
  }
  if (!options.isolate) spawn.args.push_back("--no-isolate");
  if (!options.use_pch) spawn.args.push_back("--no-pch");
  if (options.allow_test_faults) spawn.args.push_back("--allow-test-faults");
  // The worker sees no environment but the loader path it may need.
  if (const char* loader_path = std::getenv("LD_LIBRARY_PATH")) {
    spawn.env.push_back(std::string("LD_LIBRARY_PATH=") + loader_path);
  }
  spawn.limits.address_space_bytes = options.memory_limit_bytes;
  spawn.limits.cpu_seconds = 2 * options.start_timeout.count() / 1000 + 60;
  spawn.limits.open_files = 64;
  spawn.limits.file_size_bytes = 1ull << 30;  // the precompiled header is ~60 MiB
  spawn.limits.core_bytes = 0;

  ++state_.worker_starts;
  auto child = ChildProcess::spawn(spawn);
  if (!child) return child.error();
  auto ready = read_frame(child->stdout_fd(), worker_reply_limits(),
                          Clock::now() + options.start_timeout, cancel_pipe_[0]);
  auto describe_failure = [&](const std::string& why) {
    child->kill_and_wait();
    std::string diagnostics = child->drain_stderr(4096);
    return core::Status(ErrorCode::kInternal,
                        "compile worker failed to start: " + why +
                            (diagnostics.empty() ? "" : " (stderr: " + diagnostics + ")"));
  };
  if (!ready) return describe_failure(ready.error().message);
  const Value& hello = *ready;
  const std::string op = hello.value("op", std::string());
  if (op == "fatal") return describe_failure(hello.value("message", std::string("fatal")));
  if (op != "ready") return describe_failure("unexpected first frame");
  {
    std::lock_guard lock(state_.mutex);
    state_.toolchain = hello.value("toolchain", std::string("nvrtc"));
    if (auto isolation = hello.find("isolation"); isolation != hello.end()) {
      state_.isolation = *isolation;
    }
    state_.pch = hello.value("pch", false);
  }
  worker_ = std::move(*child);
  worker_pid_ = worker_->pid();
  jobs_on_worker_ = 0;
  return {};
}

void Slot::drop_worker() {
  if (!worker_) return;
  worker_pid_ = 0;
  worker_->close_stdin();  // a healthy worker exits on end of input
  if (!worker_->wait_for(std::chrono::milliseconds(200))) worker_->kill_and_wait();
  worker_.reset();
}

RunEnd Slot::run_on_worker(const CompileJob& job, CompileOutput* out, std::string* detail) {
  const auto deadline = Clock::now() + state_.options.deadline;
  if (!write_frame(worker_->stdin_fd(), job_to_wire(job))) {
    *detail = "could not send the job";
    return RunEnd::kWorkerLost;
  }
  busy_pid_ = worker_->pid();
  auto reply = read_frame(worker_->stdout_fd(), worker_reply_limits(), deadline, cancel_pipe_[0]);
  busy_pid_ = 0;
  if (!reply) {
    if (reply.error().code == ErrorCode::kTimeout) {
      return reply.error().message == "cancelled" ? RunEnd::kCancelled : RunEnd::kDeadline;
    }
    *detail = reply.error().message;
    return RunEnd::kWorkerLost;
  }
  auto parsed = output_from_wire(*reply);
  if (!parsed) {
    *detail = "malformed reply: " + parsed.error().message;
    return RunEnd::kWorkerLost;
  }
  *out = std::move(*parsed);
  out->cache_hit = false;
  return RunEnd::kAnswered;
}

namespace {

// Whether a compiler log reports memory exhaustion (NVRTC under the worker's address-space cap).
// "Loop in catastrophic error processing": the front end failed again while reporting a failure,
// which is how a template explosion that exhausts the cap can end (seen in CI on
// tests/corpus template_bomb.cu, with no other diagnostic).
bool ran_out_of_memory(const std::string& log) {
  for (const char* sign : {"unable to obtain mapped memory", "out of memory", "std::bad_alloc",
                           "memory exhausted", "Loop in catastrophic error processing"}) {
    if (log.find(sign) != std::string::npos) return true;
  }
  return false;
}

// Signals a worker raises on itself when NVRTC crashes or hits one of its own limits: the job
// may have caused them. SIGXCPU is handled apart. Any other signal (SIGKILL, SIGTERM, SIGINT,
// SIGHUP, SIGQUIT, SIGUSR1...) came from outside: the worker never raises it, and the pool's own
// SIGKILL (deadline, shutdown, an unreadable reply) is accounted for where it is sent.
bool is_crash_signal(int signal) {
  switch (signal) {
    case SIGSEGV:
    case SIGBUS:  // also NVRTC's scratch file filling the jail's size-capped /tmp
    case SIGABRT:
    case SIGILL:
    case SIGFPE:
    case SIGTRAP:
    case SIGSYS:
    case SIGXFSZ:
      return true;
    default:
      return false;
  }
}

std::string seconds_text(std::chrono::nanoseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", std::chrono::duration<double>(duration).count());
  return text;
}

}  // namespace

// Whose fault a job's lost attempt was, from how the worker died or how it spent the deadline.
Slot::Loss Slot::classify_death(const ExitStatus& status, bool killed_by_pool,
                                const std::string& detail) const {
  Loss loss;
  if (killed_by_pool) {
    // Alive but not answering properly (e.g. a reply over the size limit): the job's doing as
    // far as the pool can tell, so treated like a crash.
    loss.what = "sent no readable reply (" + detail + ")";
  } else if (status.signal && *status.signal == SIGXCPU) {
    loss.cause = LossCause::kCpuLimit;
    loss.what = "exceeded its CPU time limit";
  } else if (status.signal && !is_crash_signal(*status.signal)) {
    loss.cause = LossCause::kHost;
    loss.what = "was killed by " + status.describe() + " from outside the server";
  } else if (status.signal) {
    loss.what = "crashed (" + status.describe() + ")";
  } else {
    loss.what = "exited in the middle of the job (" + status.describe() + ")";
  }
  return loss;
}

Slot::Loss Slot::classify_deadline(const std::optional<ProcessUsage>& before,
                                   const std::optional<ProcessUsage>& after) const {
  const auto& options = state_.options;
  Loss loss;
  loss.cause = LossCause::kTimedOut;
  loss.what =
      "did not finish within the " + std::to_string(options.deadline.count()) + " ms deadline";
  if (!before || !after) {
    // /proc cannot tell how much CPU the worker had: charge the source, as before CPU time
    // was measured (the deadline is generous next to a normal compile).
    return loss;
  }
  const auto cpu = after->cpu_time - before->cpu_time;
  loss.measure = seconds_text(cpu) + " of CPU time";
  const auto needed = std::chrono::duration_cast<std::chrono::nanoseconds>(
      options.deadline * options.timeout_min_cpu_share);
  if (cpu >= needed) return loss;  // it had the CPU and still did not finish: the source
  loss.cause = LossCause::kHost;
  const std::string deadline = std::to_string(options.deadline.count()) + " ms deadline";
  loss.what = after->stopped ? "was stopped from outside the server past its " + deadline
                             : "was starved of CPU by the host until its " + deadline + " passed";
  return loss;
}

CompileOutput Slot::process(const QueuedJob& item, bool* cacheable) {
  *cacheable = false;
  const auto& options = state_.options;
  std::optional<Loss> first;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (worker_) {
      if (auto gone = worker_->try_wait()) {
        // It died while idle, so not of this job: replace it without spending an attempt.
        ++state_.host_faults;
        ++state_.worker_restarts;
        core::log_warn("compile pool: worker " + std::to_string(worker_->pid()) +
                       " died while idle (" + gone->describe() + ")");
        worker_pid_ = 0;
        worker_.reset();
      }
    }
    if (!worker_) {
      if (auto spawned = spawn_worker(); !spawned) {
        return make_output(StepStatus::kInfraError, spawned.error().message);
      }
    }
    CompileOutput out;
    std::string detail;
    const auto usage_before = worker_->usage();
    const RunEnd end = run_on_worker(item.job, &out, &detail);
    if (end == RunEnd::kAnswered) {
      ++state_.compiled;
      if (++jobs_on_worker_ >= options.recycle_after_jobs) {
        ++state_.recycles;
        drop_worker();
      }
      // A compile that ran out of the worker's memory cap failed for a resource, as a deadline
      // miss does: not cached (it depends on the worker's state and the machine), and the worker,
      // whose heap the compiler exhausted, is replaced.
      const bool exhausted = out.status == StepStatus::kCompileError && ran_out_of_memory(out.log);
      if (exhausted) {
        // Counted as a restart, as a worker lost at the deadline is: which of the two a
        // runaway compile meets first depends on the machine's speed and load.
        ++state_.worker_restarts;
        drop_worker();
        if (out.log.find(kCompileOutOfMemory) == std::string::npos) out.log += kCompileOutOfMemory;
      }
      *cacheable =
          out.status == StepStatus::kOk || (out.status == StepStatus::kCompileError && !exhausted);
      return out;
    }
    // Every other ending leaves the worker in an unknown state: it goes, with its whole group.
    // Its CPU time is read before the kill; a worker that hung up is first given a moment to
    // finish dying, so its own cause of death is read rather than the pool's SIGKILL.
    const auto usage_after = end == RunEnd::kDeadline ? worker_->usage() : std::nullopt;
    std::optional<ExitStatus> died;
    if (end == RunEnd::kWorkerLost) died = worker_->wait_for(std::chrono::milliseconds(1000));
    const bool killed_by_pool = !died;
    const pid_t pid = worker_->pid();
    const ExitStatus status = died ? *died : worker_->kill_and_wait();
    worker_pid_ = 0;
    worker_.reset();
    if (end == RunEnd::kCancelled) {
      return make_output(StepStatus::kInfraError, "the compile pool is shutting down");
    }
    ++state_.worker_restarts;
    Loss loss;
    if (end == RunEnd::kDeadline) {
      ++state_.timeouts;
      loss = classify_deadline(usage_before, usage_after);
    } else {
      loss = classify_death(status, killed_by_pool, detail);
    }
    if (loss.cause == LossCause::kHost) {
      ++state_.host_faults;
    } else if (end == RunEnd::kWorkerLost) {
      ++state_.crashes;
    }
    core::log_warn("compile pool: worker " + std::to_string(pid) + " " + loss.what +
                   (loss.measure.empty() ? "" : " (" + loss.measure + ")") +
                   (detail.empty() ? "" : " [" + detail + "]"));
    const bool conclusive =
        loss.cause == LossCause::kTimedOut || loss.cause == LossCause::kCpuLimit;
    if (loss.cause != LossCause::kHost && (conclusive || attempt == 1)) {
      return make_output(StepStatus::kCompileError, agent_fault_message(loss, first));
    }
    if (attempt == 0) {
      ++state_.retries;  // a fresh worker tells whether the source or the host was at fault
      first = loss;
      continue;
    }
    return make_output(StepStatus::kInfraError, host_fault_message(*first, loss));
  }
  return make_output(StepStatus::kInfraError, "unreachable");
}

// The source's fault: a deadline miss at full CPU or the CPU limit at once, or a crash of the
// fresh worker that retried the job.
std::string Slot::agent_fault_message(const Loss& loss, const std::optional<Loss>& first) const {
  if (loss.cause == LossCause::kTimedOut) {
    return "compilation did not finish within the " +
           std::to_string(state_.options.deadline.count()) + " ms deadline and was stopped\n";
  }
  if (loss.cause == LossCause::kCpuLimit) {
    return "compilation exceeded its CPU time limit and was stopped\n";
  }
  if (first && first->cause != LossCause::kHost) {
    return "the compiler " + loss.what + " on this source twice, e.g. by exceeding the compile " +
           "memory cap\n";
  }
  return "the compiler " + loss.what + " on this source in a fresh worker" +
         (first ? " (the first worker " + first->what + ")" : std::string()) +
         ", e.g. by exceeding the compile memory cap\n";
}

// Not the source's fault, or not for certain: the retry was lost to the host.
std::string Slot::host_fault_message(const Loss& first, const Loss& second) const {
  std::string message = "the compile worker ";
  if (first.what == second.what) {
    message += second.what + " twice";
    if (!first.measure.empty()) message += " (" + first.measure + ", then " + second.measure + ")";
  } else {
    message += first.what + (first.measure.empty() ? "" : " (" + first.measure + ")") +
               ", then the fresh worker that retried the job " + second.what +
               (second.measure.empty() ? "" : " (" + second.measure + ")");
  }
  return message + "; the job was not charged to the source\n";
}

CompilePool::CompilePool(std::unique_ptr<State> state) : state_(std::move(state)) {}

CompilePool::~CompilePool() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->work_cv.notify_all();
  for (auto& slot : state_->slots) slot->cancel();
  for (auto& slot : state_->slots) slot->join();
  std::deque<QueuedJob> left;
  {
    std::lock_guard lock(state_->mutex);
    left.swap(state_->queue);
  }
  for (const auto& item : left) {
    state_->finish(
        item.key, make_output(StepStatus::kInfraError, "the compile pool is shutting down"), false);
  }
}

core::Result<std::unique_ptr<CompilePool>> CompilePool::start(CompilePoolOptions options) {
  if (options.workers <= 0) {
    options.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (options.deadline.count() <= 0 || options.recycle_after_jobs <= 0) {
    return core::Error{ErrorCode::kInvalidArgument, "deadline and recycle_after_jobs must be > 0"};
  }
  if (!(options.timeout_min_cpu_share >= 0.0 && options.timeout_min_cpu_share <= 1.0)) {
    return core::Error{ErrorCode::kInvalidArgument, "timeout_min_cpu_share must be in [0, 1]"};
  }
  if (::access(options.worker_exe.c_str(), X_OK) != 0) {
    return core::Error{ErrorCode::kInvalidArgument,
                       "compile worker not executable: " + options.worker_exe.string()};
  }
  if (options.include_dirs.empty()) {
    return core::Error{ErrorCode::kInvalidArgument, "no CUDA include directory"};
  }
  if (!options.cache_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(options.cache_dir, error);
    if (error) {
      return core::Error{ErrorCode::kInvalidArgument,
                         "cannot create cache dir " + options.cache_dir.string()};
    }
  }
  const int count = options.workers;
  const auto start_timeout = options.start_timeout;
  auto state = std::make_unique<State>(std::move(options));
  State& shared = *state;
  std::unique_ptr<CompilePool> pool(new CompilePool(std::move(state)));
  for (int i = 0; i < count; ++i) shared.slots.push_back(std::make_unique<Slot>(shared));
  for (auto& slot : shared.slots) slot->launch();
  std::unique_lock lock(shared.mutex);
  const bool settled = shared.start_cv.wait_for(
      lock, start_timeout * 2, [&] { return shared.slots_started + shared.slots_failed == count; });
  if (!settled || shared.slots_failed > 0) {
    std::string why = settled ? shared.start_error : "compile workers did not start in time";
    lock.unlock();
    return core::Error{ErrorCode::kInternal, why};
  }
  return pool;
}

std::future<CompileOutput> CompilePool::submit(CompileJob job) {
  State& state = *state_;
  ++state.jobs;
  if (job.arch.empty()) job.arch = state.options.default_arch;
  if (job.source.size() > state.options.max_source_bytes) {
    return ready_future(make_output(StepStatus::kInvalidAction,
                                    "source is " + std::to_string(job.source.size()) +
                                        " bytes; the limit is " +
                                        std::to_string(state.options.max_source_bytes) + " bytes"));
  }
  if (auto offender = disallowed_extra_option(job.extra_options)) {
    return ready_future(
        make_output(StepStatus::kInfraError, "compile option not allowed: " + *offender));
  }
  std::string toolchain;
  {
    std::lock_guard lock(state.mutex);
    toolchain = state.toolchain;
  }
  std::string key = compile_cache_key(job, toolchain);
  // Test faults must reach a worker every time.
  const bool cacheable_job = job.test_fault.empty();
  if (cacheable_job) {
    if (auto hit = state.cache.find_in_memory(key)) {
      ++state.hits_memory;
      hit->cache_hit = true;
      return ready_future(std::move(*hit));
    }
    if (auto hit = state.cache.find_on_disk(key)) {
      ++state.hits_disk;
      hit->cache_hit = true;
      return ready_future(std::move(*hit));
    }
  } else {
    key += "/fault/" + std::to_string(state.jobs.load());
  }
  std::promise<CompileOutput> promise;
  auto future = promise.get_future();
  {
    std::lock_guard lock(state.mutex);
    if (state.stopping) {
      promise.set_value(make_output(StepStatus::kInfraError, "the compile pool is shutting down"));
      return future;
    }
    auto [it, inserted] = state.in_flight.try_emplace(key);
    it->second.push_back(std::move(promise));
    if (!inserted) {
      ++state.dedup;
      return future;
    }
    state.queue.push_back(QueuedJob{std::move(key), std::move(job)});
  }
  state.work_cv.notify_one();
  return future;
}

Value CompilePool::stats() const {
  const State& state = *state_;
  std::lock_guard lock(state.mutex);
  Value pids = Value::array();
  for (const auto& slot : state.slots) {
    if (pid_t pid = slot->worker_pid(); pid > 0) pids.push_back(static_cast<int>(pid));
  }
  return Value{{"jobs", state.jobs.load()},
               {"compiled", state.compiled.load()},
               {"cache_hits_memory", state.hits_memory.load()},
               {"cache_hits_disk", state.hits_disk.load()},
               {"dedup_joins", state.dedup.load()},
               {"timeouts", state.timeouts.load()},
               {"crashes", state.crashes.load()},
               {"host_faults", state.host_faults.load()},
               {"retries", state.retries.load()},
               {"worker_starts", state.worker_starts.load()},
               {"worker_restarts", state.worker_restarts.load()},
               {"worker_recycles", state.recycles.load()},
               {"queue_depth", state.queue.size()},
               {"in_flight", state.in_flight.size()},
               {"memory_cache_entries", state.cache.memory_entries()},
               {"workers", state.options.workers},
               {"deadline_ms", state.options.deadline.count()},
               {"toolchain", state.toolchain},
               {"isolation", state.isolation},
               {"pch", state.pch},
               {"worker_pids", pids}};
}

const CompilePoolOptions& CompilePool::options() const { return state_->options; }

std::vector<int> CompilePool::busy_worker_pids() const {
  std::lock_guard lock(state_->mutex);
  std::vector<int> pids;
  for (const auto& slot : state_->slots) {
    if (pid_t pid = slot->busy_pid(); pid > 0) pids.push_back(static_cast<int>(pid));
  }
  return pids;
}

std::filesystem::path default_worker_path() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "crucible-compile-worker";
  return self.parent_path() / "crucible-compile-worker";
}

std::vector<std::filesystem::path> default_include_dirs() {
  std::vector<std::filesystem::path> dirs;
  const std::string configured = CRUCIBLE_CUDA_INCLUDE_DIRS;
  std::size_t start = 0;
  while (start <= configured.size()) {
    std::size_t end = configured.find(';', start);
    if (end == std::string::npos) end = configured.size();
    std::filesystem::path dir = configured.substr(start, end - start);
    start = end + 1;
    std::error_code error;
    if (dir.empty() || !std::filesystem::is_directory(dir, error)) continue;
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
    // cccl holds cuda/std; crt holds headers that the public ones include by a path relative
    // to their own folder (mma.h includes "mma.hpp"), which --no-source-include cannot find.
    for (const char* sub : {"cccl", "crt"}) {
      const auto nested = dir / sub;
      if (std::filesystem::is_directory(nested, error) &&
          std::find(dirs.begin(), dirs.end(), nested) == dirs.end()) {
        dirs.push_back(nested);
      }
    }
  }
  return dirs;
}

std::string default_compile_arch() { return CRUCIBLE_DEFAULT_ARCH; }

}  // namespace crucible::sandbox
