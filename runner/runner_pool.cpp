// RunnerPool: lanes (one per GPU), a spawner thread that owns every child (so the children's
// parent-death signal stays tied to a thread that lives as long as the pool), and the job path.
#include "runner/runner_pool.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/log.hpp"
#include "sandbox/frame_pipe.hpp"
#include "sandbox/process.hpp"

namespace crucible::runner {

// The supervisor runs crucible-gpu-runner with the sandbox's process and pipe plumbing.
using sandbox::ChildProcess;
using sandbox::kMaxFrameBytes;
using sandbox::read_frame;
using sandbox::SpawnOptions;
using sandbox::write_frame;

using core::StepStatus;
using core::Value;
using Clock = std::chrono::steady_clock;

std::filesystem::path default_runner_path() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "crucible-gpu-runner";
  return self.parent_path() / "crucible-gpu-runner";
}

namespace {

core::DecodeLimits report_limits() { return core::trusted_decode_limits(kMaxFrameBytes); }

struct StartedRunner {
  std::shared_ptr<ChildProcess> process;
  Value device;
};

}  // namespace

struct RunnerPool::State {
  RunnerPoolOptions options;

  // --- spawner thread: every fork happens here ---
  std::thread spawner;
  std::mutex spawn_mutex;
  std::condition_variable spawn_ready;
  std::deque<std::function<void()>> spawn_queue;
  bool stopping = false;

  // --- lanes ---
  struct Lane {
    int device = 0;
    bool busy = false;
    std::shared_ptr<ChildProcess> active;
    std::shared_future<core::Result<StartedRunner>> spare;
    bool has_spare = false;
    int jobs = 0;  // on the active runner
    int total_jobs = 0;
    int restarts = 0;
    // Wall seconds jobs held this lane (sent to the runner until its report or kill): the GPU's
    // utilisation as the server sees it.
    double busy_seconds = 0.0;
    Value device_info;
  };
  mutable std::mutex mutex;
  std::condition_variable lane_free;
  std::vector<Lane> lanes;
  std::uint64_t timeouts = 0, crashes = 0, lost_contexts = 0;
  std::size_t waiting = 0;  // jobs queued for a free lane
  Clock::time_point created = Clock::now();

  void spawner_main() {
    while (true) {
      std::function<void()> work;
      {
        std::unique_lock lock(spawn_mutex);
        spawn_ready.wait(lock, [&] { return stopping || !spawn_queue.empty(); });
        if (spawn_queue.empty()) return;
        work = std::move(spawn_queue.front());
        spawn_queue.pop_front();
      }
      work();
    }
  }

  // Copy bandwidth per device, measured by the first runner and handed to the ones after it.
  std::mutex bandwidth_mutex;
  std::map<int, double> bandwidth_gbps;
  double known_bandwidth(int device) {
    std::lock_guard lock(bandwidth_mutex);
    const auto it = bandwidth_gbps.find(device);
    return it == bandwidth_gbps.end() ? 0.0 : it->second;
  }
  void remember_bandwidth(int device, double gbps) {
    if (gbps <= 0.0) return;
    std::lock_guard lock(bandwidth_mutex);
    bandwidth_gbps.emplace(device, gbps);
  }

  // Starts a runner on the spawner thread; the future resolves once it said ready.
  std::shared_future<core::Result<StartedRunner>> start_runner(int device) {
    auto task = std::make_shared<std::packaged_task<core::Result<StartedRunner>()>>(
        [this, device]() -> core::Result<StartedRunner> {
          SpawnOptions spawn;
          spawn.executable = options.runner_exe;
          spawn.args = {"--device", std::to_string(device), "--home", options.home.string()};
          const double bandwidth = known_bandwidth(device);
          if (bandwidth > 0.0) {
            spawn.args.push_back("--copy-bandwidth-gbps");
            spawn.args.push_back(std::to_string(bandwidth));
          }
          for (char** env = environ; env != nullptr && *env != nullptr; ++env)
            spawn.env.emplace_back(*env);
          spawn.pipe_stderr = false;
          spawn.limits.core_bytes = 0;
          auto child = ChildProcess::spawn(spawn);
          if (!child) return child.error();
          auto process = std::make_shared<ChildProcess>(std::move(child).value());
          auto ready = read_frame(process->stdout_fd(), report_limits(),
                                  Clock::now() + options.start_timeout);
          if (!ready) {
            process->kill_and_wait();
            return core::Error{core::ErrorCode::kIo,
                               "GPU runner on device " + std::to_string(device) +
                                   " did not start: " + ready.error().message};
          }
          if (!ready->is_object() || !ready->value("ready", false)) {
            const std::string why =
                ready->is_object() ? ready->value("error", std::string("?")) : "?";
            process->kill_and_wait();
            return core::Error{
                core::ErrorCode::kIo,
                "GPU runner on device " + std::to_string(device) + " failed to start: " + why};
          }
          Value info = ready->value("device", Value::object());
          info["warm_up_ms"] = ready->value("warm_up_ms", 0.0);
          remember_bandwidth(device, info.value("copy_bandwidth_gbps", 0.0));
          return StartedRunner{process, info};
        });
    std::shared_future<core::Result<StartedRunner>> future = task->get_future().share();
    {
      std::lock_guard lock(spawn_mutex);
      spawn_queue.emplace_back([task] { (*task)(); });
    }
    spawn_ready.notify_one();
    return future;
  }

  // Kills a runner on the spawner thread too (waitpid must not block a worker).
  void retire(std::shared_ptr<ChildProcess> process) {
    if (!process) return;
    process->kill_group();
    std::lock_guard lock(spawn_mutex);
    spawn_queue.emplace_back([process] { process->kill_and_wait(); });
    spawn_ready.notify_one();
  }

  // Makes lane.active a ready runner: the spare if there is one, else a fresh start. Called
  // with `mutex` NOT held (it may wait for a start).
  core::Status ensure_active(Lane& lane) {
    if (lane.active && lane.active->running()) return {};
    std::shared_future<core::Result<StartedRunner>> next;
    {
      std::lock_guard lock(mutex);
      if (lane.has_spare) {
        next = lane.spare;
        lane.has_spare = false;
      }
    }
    if (!next.valid()) next = start_runner(lane.device);
    const auto& started = next.get();
    if (!started) return started.error();
    std::lock_guard lock(mutex);
    lane.active = started->process;
    lane.device_info = started->device;
    lane.jobs = 0;
    if (options.spares && !lane.has_spare) {
      lane.spare = start_runner(lane.device);
      lane.has_spare = true;
    }
    return {};
  }
};

core::Result<std::unique_ptr<RunnerPool>> RunnerPool::start(RunnerPoolOptions options) {
  if (options.devices.empty()) {
    return core::Error{core::ErrorCode::kInvalidArgument, "no CUDA device to run on"};
  }
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  state->spawner = std::thread([s = state.get()] { s->spawner_main(); });
  for (const int device : state->options.devices) {
    State::Lane lane;
    lane.device = device;
    state->lanes.push_back(std::move(lane));
  }
  std::unique_ptr<RunnerPool> pool(new RunnerPool(std::move(state)));
  for (auto& lane : pool->state_->lanes) {
    if (auto ok = pool->state_->ensure_active(lane); !ok) return ok.error();
  }
  return pool;
}

RunnerPool::RunnerPool(std::unique_ptr<State> state) : state_(std::move(state)) {}

RunnerPool::~RunnerPool() {
  for (auto& lane : state_->lanes) {
    if (lane.active) lane.active->kill_group();
    if (lane.has_spare && lane.spare.valid()) {
      const auto& spare = lane.spare.get();
      if (spare) spare->process->kill_group();
    }
  }
  {
    std::lock_guard lock(state_->spawn_mutex);
    state_->stopping = true;
  }
  state_->spawn_ready.notify_all();
  state_->spawner.join();
  for (auto& lane : state_->lanes) {
    if (lane.active) lane.active->kill_and_wait();
    if (lane.has_spare && lane.spare.valid()) {
      const auto& spare = lane.spare.get();
      if (spare) spare->process->kill_and_wait();
    }
  }
}

RunReport RunnerPool::run(const RunJob& job, std::chrono::milliseconds deadline) {
  State& s = *state_;
  State::Lane* lane = nullptr;
  {
    std::unique_lock lock(s.mutex);
    ++s.waiting;
    s.lane_free.wait(lock, [&] {
      for (auto& candidate : s.lanes) {
        if (!candidate.busy) {
          lane = &candidate;
          return true;
        }
      }
      return false;
    });
    --s.waiting;
    lane->busy = true;
  }
  const auto held_since = Clock::now();
  auto release = [&] {
    {
      std::lock_guard lock(s.mutex);
      lane->busy = false;
      lane->busy_seconds += std::chrono::duration<double>(Clock::now() - held_since).count();
    }
    s.lane_free.notify_one();
  };

  RunReport report;
  report.id = job.id;
  if (auto ok = s.ensure_active(*lane); !ok) {
    release();
    report.status = StepStatus::kInfraError;
    report.message = ok.error().message;
    return report;
  }
  const auto started = Clock::now();
  auto process = lane->active;
  auto replace = [&](const std::string& why) {
    core::log_warn("GPU runner on device " + std::to_string(lane->device) + " replaced: " + why);
    std::lock_guard lock(s.mutex);
    s.retire(lane->active);
    lane->active.reset();
    ++lane->restarts;
  };

  if (auto sent = write_frame(process->stdin_fd(), job.to_value()); !sent) {
    ++s.crashes;
    replace("could not send the job: " + sent.error().message);
    release();
    report.status = StepStatus::kInfraError;
    report.message = "the GPU runner was not reachable; it was replaced, retry the step";
    return report;
  }
  auto reply = read_frame(process->stdout_fd(), report_limits(), started + deadline);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (!reply) {
    if (reply.error().code == core::ErrorCode::kTimeout) {
      ++s.timeouts;
      replace("missed its deadline");
      report.status = StepStatus::kTimeout;
      report.message = "your kernel did not finish within " +
                       std::to_string(deadline.count() / 1000.0).substr(0, 5) +
                       " s; the runner was killed and replaced";
    } else {
      ++s.crashes;
      process->kill_group();
      const auto status = process->wait_for(std::chrono::milliseconds(2000));
      replace("died: " + (status ? status->describe() : reply.error().message));
      report.status = StepStatus::kRuntimeError;
      report.message = "the GPU runner died while running your kernel (" +
                       (status ? status->describe() : reply.error().message) + ")";
    }
    release();
    return report;
  }
  auto parsed = RunReport::from_value(*reply);
  if (!parsed) {
    ++s.crashes;
    replace("sent a malformed report");
    report.status = StepStatus::kInfraError;
    report.message = "the GPU runner sent a malformed report: " + parsed.error().message;
    release();
    return report;
  }
  report = std::move(parsed).value();
  report.device["runner_seconds"] = seconds;
  {
    std::lock_guard lock(s.mutex);
    ++lane->jobs;
    ++lane->total_jobs;
  }
  if (report.context_lost) {
    ++s.lost_contexts;
    replace("its CUDA context was lost (" + std::string(core::step_status_name(report.status)) +
            ")");
  } else if (lane->jobs >= s.options.recycle_after_jobs) {
    replace("recycled after " + std::to_string(lane->jobs) + " jobs");
  }
  release();
  return report;
}

Value RunnerPool::stats() const {
  std::lock_guard lock(state_->mutex);
  const double uptime = std::chrono::duration<double>(Clock::now() - state_->created).count();
  Value runners = Value::array();
  for (const auto& lane : state_->lanes) {
    runners.push_back(Value{{"device", lane.device},
                            {"busy", lane.busy},
                            {"jobs", lane.total_jobs},
                            {"restarts", lane.restarts},
                            {"spare", lane.has_spare},
                            {"busy_s", lane.busy_seconds},
                            {"utilisation", uptime > 0.0 ? lane.busy_seconds / uptime : 0.0}});
  }
  return Value{{"runners", runners},
               {"queue_depth", state_->waiting},
               {"timeouts", state_->timeouts},
               {"crashes", state_->crashes},
               {"lost_contexts", state_->lost_contexts}};
}

Value RunnerPool::devices() const {
  std::lock_guard lock(state_->mutex);
  Value out = Value::array();
  for (const auto& lane : state_->lanes) out.push_back(lane.device_info);
  return out;
}

}  // namespace crucible::runner
