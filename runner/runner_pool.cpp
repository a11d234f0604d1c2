// RunnerPool: lanes (runners_per_device per GPU), a gate per GPU, a spawner thread that owns
// every child (so the children's parent-death signal stays tied to a thread that lives as long
// as the pool), and the job path.
#include "runner/runner_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "core/log.hpp"
#include "runner/gpu_gate.hpp"
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
using Hold = GpuGate::Hold;

std::filesystem::path default_runner_path() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "crucible-gpu-runner";
  return self.parent_path() / "crucible-gpu-runner";
}

int default_runners_per_device() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(static_cast<int>(cores / 4), 1, 4);
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

  // --- gates: one per device, made at start and never removed ---
  std::map<int, std::unique_ptr<GpuGate>> gates;
  GpuGate& gate(int device) { return *gates.at(device); }

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
    std::uint64_t timeouts = 0, crashes = 0, lost_contexts = 0;
    // Wall seconds finished jobs held this lane (taken until their report or kill): the GPU's
    // utilisation as the server sees it.
    double busy_seconds = 0.0;
    Clock::time_point held_since;  // while busy
    // The holds that ended within the load window, oldest first.
    std::deque<std::pair<Clock::time_point, Clock::time_point>> recent_holds;
    Value device_info;

    void forget_before(Clock::time_point horizon) {
      while (!recent_holds.empty() && recent_holds.front().second < horizon) {
        recent_holds.pop_front();
      }
    }
    // Busy seconds within [horizon, now], the hold in progress included.
    double busy_since(Clock::time_point horizon, Clock::time_point now) const {
      double seconds = 0.0;
      for (const auto& [from, to] : recent_holds) {
        if (to > horizon)
          seconds += std::chrono::duration<double>(to - std::max(from, horizon)).count();
      }
      if (busy)
        seconds += std::chrono::duration<double>(now - std::max(held_since, horizon)).count();
      return seconds;
    }
    int jobs_since(Clock::time_point horizon) const {
      int count = 0;
      for (const auto& hold : recent_holds) count += hold.second >= horizon ? 1 : 0;
      return count;
    }
  };
  mutable std::mutex mutex;
  std::condition_variable lane_free;
  std::vector<Lane> lanes;
  std::size_t waiting = 0;  // jobs queued for a free lane
  Clock::time_point created = Clock::now();

  // The free lane on the device with the fewest busy lanes, then the one busy least within the
  // load window, then the one with the fewest jobs in it, then the first; null when every lane
  // is busy. Called with `mutex` held.
  Lane* least_loaded_free_lane() {
    const auto now = Clock::now();
    const auto horizon = now - options.load_window;
    std::map<int, int> busy_lanes;
    for (const auto& lane : lanes) busy_lanes[lane.device] += lane.busy ? 1 : 0;
    Lane* best = nullptr;
    int best_device_busy = 0;
    double best_busy = 0.0;
    int best_jobs = 0;
    for (auto& lane : lanes) {
      if (lane.busy) continue;
      lane.forget_before(horizon);
      const int device_busy = busy_lanes[lane.device];
      const double busy = lane.busy_since(horizon, now);
      const int jobs = lane.jobs_since(horizon);
      const auto key = std::make_tuple(device_busy, busy, jobs);
      if (best == nullptr || key < std::make_tuple(best_device_busy, best_busy, best_jobs)) {
        best = &lane;
        best_device_busy = device_busy;
        best_busy = busy;
        best_jobs = jobs;
      }
    }
    return best;
  }

  // Counts a failure against its lane; the pool's totals are the lanes' sums.
  void count(Lane& lane, std::uint64_t Lane::*counter) {
    std::lock_guard lock(mutex);
    ++(lane.*counter);
  }

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

  // Starts a runner on the spawner thread; the future resolves once it said ready. A start
  // (context creation, CUPTI, the warm-up's kernels) holds the device's gate shared, so it never
  // falls inside another runner's timing window.
  std::shared_future<core::Result<StartedRunner>> start_runner(int device) {
    auto task = std::make_shared<std::packaged_task<core::Result<StartedRunner>()>>(
        [this, device]() -> core::Result<StartedRunner> {
          const GpuGate::SharedHold hold(gate(device));
          SpawnOptions spawn;
          spawn.executable = options.runner_exe;
          spawn.args = {"--device",   std::to_string(device),
                        "--home",     options.home.string(),
                        "--gpu-gate", "1"};
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

  // Kills a runner on the spawner thread too (waitpid must not block a worker). An idle
  // runner's end (its context torn down) holds the device's gate shared; one that was running a
  // job is already dead (run() waits for that before it gives the gate back).
  void retire(std::shared_ptr<ChildProcess> process, int device) {
    if (!process) return;
    std::lock_guard lock(spawn_mutex);
    spawn_queue.emplace_back([this, process, device] {
      if (!process->running()) return;
      const GpuGate::SharedHold hold(gate(device));
      process->kill_and_wait();
    });
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
  if (options.runners_per_device < 1) {
    return core::Error{core::ErrorCode::kInvalidArgument, "runners per device must be at least 1"};
  }
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  state->spawner = std::thread([s = state.get()] { s->spawner_main(); });
  for (const int device : state->options.devices) {
    state->gates.emplace(device, std::make_unique<GpuGate>());
    for (int r = 0; r < state->options.runners_per_device; ++r) {
      State::Lane lane;
      lane.device = device;
      state->lanes.push_back(std::move(lane));
    }
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
      lane = s.least_loaded_free_lane();
      return lane != nullptr;
    });
    --s.waiting;
    lane->busy = true;
    lane->held_since = Clock::now();
  }
  auto release = [&] {
    {
      std::lock_guard lock(s.mutex);
      const auto now = Clock::now();
      lane->busy = false;
      lane->busy_seconds += std::chrono::duration<double>(now - lane->held_since).count();
      lane->recent_holds.emplace_back(lane->held_since, now);
      lane->forget_before(now - s.options.load_window);
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
  auto process = lane->active;
  // The gate: shared from here, exclusive while the runner times (it asks), none once the job
  // ended and the runner is idle or dead.
  GpuGate& gate = s.gate(lane->device);
  Hold hold = Hold::kNone;
  Clock::duration gate_wait = Clock::duration::zero();
  auto hold_gate = [&](Hold to) {
    const auto waited = gate.change(hold, to);
    hold = to;
    gate_wait += waited;
    return waited;
  };
  hold_gate(Hold::kShared);
  const auto started = Clock::now();
  auto deadline_at = started + deadline;
  // The lane's runner goes (ended on the spawner thread) and its spare takes over next time.
  auto retire_active = [&] {
    std::lock_guard lock(s.mutex);
    s.retire(lane->active, lane->device);
    lane->active.reset();
    ++lane->restarts;
  };
  // A runner that failed is killed and reaped before its gate hold is given back: a kernel of
  // its context may still be running until the process is gone. Returns how it ended.
  auto replace = [&](const std::string& why) {
    process->kill_group();
    const auto status = process->wait_for(std::chrono::milliseconds(3000));
    core::log_warn("GPU runner on device " + std::to_string(lane->device) + " replaced: " + why +
                   (status ? "" : " (it did not exit within 3 s of SIGKILL)"));
    retire_active();
    return status;
  };
  auto finish = [&](RunReport out) {
    hold_gate(Hold::kNone);
    release();
    out.device["gate_wait_s"] = std::chrono::duration<double>(gate_wait).count();
    return out;
  };

  if (auto sent = write_frame(process->stdin_fd(), job.to_value()); !sent) {
    s.count(*lane, &State::Lane::crashes);
    replace("could not send the job: " + sent.error().message);
    report.status = StepStatus::kInfraError;
    report.message = "the GPU runner was not reachable; it was replaced, retry the step";
    return finish(std::move(report));
  }
  core::Result<Value> reply{core::ErrorCode::kInternal, "no reply"};
  while (true) {
    reply = read_frame(process->stdout_fd(), report_limits(), deadline_at);
    // A request for the gate: {gpu: "exclusive" | "shared"}, answered once it is held.
    if (!reply || !reply->is_object() || !reply->contains("gpu") || reply->contains("id")) break;
    const std::string want = reply->value("gpu", std::string());
    if (want != "exclusive" && want != "shared") break;
    const auto waited = hold_gate(want == "exclusive" ? Hold::kExclusive : Hold::kShared);
    deadline_at += waited;
    const Value granted{{"gpu", "granted"},
                        {"waited_ms", std::chrono::duration<double, std::milli>(waited).count()}};
    if (auto sent = write_frame(process->stdin_fd(), granted); !sent) {
      reply = core::Error{core::ErrorCode::kIo, "could not grant the GPU: " + sent.error().message};
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (!reply) {
    if (reply.error().code == core::ErrorCode::kTimeout) {
      s.count(*lane, &State::Lane::timeouts);
      replace("missed its deadline");
      report.status = StepStatus::kTimeout;
      report.message = "your kernel did not finish within " +
                       std::to_string(deadline.count() / 1000.0).substr(0, 5) +
                       " s; the runner was killed and replaced";
    } else {
      s.count(*lane, &State::Lane::crashes);
      const auto status = replace("died");
      const std::string what = status ? status->describe() : reply.error().message;
      report.status = StepStatus::kRuntimeError;
      report.message = "the GPU runner died while running your kernel (" + what + ")";
    }
    return finish(std::move(report));
  }
  auto parsed = RunReport::from_value(*reply);
  if (!parsed) {
    s.count(*lane, &State::Lane::crashes);
    replace("sent a malformed report");
    report.status = StepStatus::kInfraError;
    report.message = "the GPU runner sent a malformed report: " + parsed.error().message;
    return finish(std::move(report));
  }
  report = std::move(parsed).value();
  report.device["runner_seconds"] = seconds;
  {
    std::lock_guard lock(s.mutex);
    ++lane->jobs;
    ++lane->total_jobs;
  }
  if (report.context_lost) {
    s.count(*lane, &State::Lane::lost_contexts);
    replace("its CUDA context was lost (" + std::string(core::step_status_name(report.status)) +
            ")");
  } else if (lane->jobs >= s.options.recycle_after_jobs) {
    // Idle: retired on the spawner thread under the gate.
    core::log_info("GPU runner on device " + std::to_string(lane->device) + " recycled after " +
                   std::to_string(lane->jobs) + " jobs");
    retire_active();
  }
  return finish(std::move(report));
}

Value RunnerPool::stats() const {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  const auto now = Clock::now();
  const double uptime = std::chrono::duration<double>(now - s.created).count();
  const auto horizon = std::max(now - s.options.load_window, s.created);
  const double window = std::chrono::duration<double>(now - horizon).count();
  const auto share = [](double busy, double wall) {
    return wall > 0.0 ? std::clamp(busy / wall, 0.0, 1.0) : 0.0;
  };
  Value runners = Value::array();
  std::int64_t jobs = 0, restarts = 0;
  std::uint64_t timeouts = 0, crashes = 0, lost_contexts = 0;
  double busy_total = 0.0;
  for (const auto& lane : s.lanes) {
    const double busy =
        lane.busy_seconds +
        (lane.busy ? std::chrono::duration<double>(now - lane.held_since).count() : 0.0);
    const double recent_busy = lane.busy_since(horizon, now);
    runners.push_back(Value{{"device", lane.device},
                            {"busy", lane.busy},
                            {"spare", lane.has_spare},
                            {"jobs", lane.total_jobs},
                            {"busy_s", busy},
                            {"utilisation", share(busy, uptime)},
                            {"recent_jobs", lane.jobs_since(horizon)},
                            {"recent_busy_s", recent_busy},
                            {"recent_utilisation", share(recent_busy, window)},
                            {"timeouts", lane.timeouts},
                            {"crashes", lane.crashes},
                            {"lost_contexts", lane.lost_contexts},
                            {"restarts", lane.restarts}});
    jobs += lane.total_jobs;
    restarts += lane.restarts;
    timeouts += lane.timeouts;
    crashes += lane.crashes;
    lost_contexts += lane.lost_contexts;
    busy_total += busy;
  }
  Value gpus = Value::array();
  for (const int device : s.options.devices) {
    Value gpu = s.gate(device).stats();
    gpu["device"] = device;
    gpu["runners"] = s.options.runners_per_device;
    gpu["timing_utilisation"] = share(gpu["exclusive_s"].get<double>(), uptime);
    gpus.push_back(std::move(gpu));
  }
  return Value{{"runners", runners},       {"gpus", gpus},
               {"queue_depth", s.waiting}, {"uptime_s", uptime},
               {"window_s", window},       {"jobs", jobs},
               {"busy_s", busy_total},     {"timeouts", timeouts},
               {"crashes", crashes},       {"lost_contexts", lost_contexts},
               {"restarts", restarts}};
}

Value RunnerPool::devices() const {
  std::lock_guard lock(state_->mutex);
  Value out = Value::array();
  for (const auto& lane : state_->lanes) out.push_back(lane.device_info);
  return out;
}

}  // namespace crucible::runner
