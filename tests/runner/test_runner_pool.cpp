// The GPU-runner supervisor against a scripted runner that hangs, crashes, loses its context or
// talks nonsense on request: every failure becomes the right status, the runner is replaced by
// its spare, and the next job is served.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "runner/gpu_probe.hpp"
#include "runner/runner_pool.hpp"

using namespace crucible;
using core::StepStatus;

namespace {

std::unique_ptr<runner::RunnerPool> start_pool(std::vector<int> devices = {0},
                                               int runners_per_device = 1) {
  runner::RunnerPoolOptions options;
  options.runner_exe = CRUCIBLE_BINARY_DIR "/bin/test_scripted_runner";
  options.home = CRUCIBLE_SOURCE_DIR;
  options.devices = std::move(devices);
  options.runners_per_device = runners_per_device;
  options.start_timeout = std::chrono::milliseconds(10000);
  auto pool = runner::RunnerPool::start(options);
  REQUIRE(pool.ok());
  return std::move(pool).value();
}

runner::RunJob job(const std::string& behaviour, std::uint64_t id) {
  runner::RunJob out;
  out.id = id;
  out.task = behaviour;
  return out;
}

int runner_pid(const runner::RunReport& report) { return report.device.value("pid", -1); }
// The --device the scripted runner that answered was started with.
int runner_device(const runner::RunReport& report) { return report.device.value("index", -1); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

runner::GpuProbe three_gpus() {
  runner::GpuProbe probe;
  for (int i = 0; i < 3; ++i) probe.gpus.push_back({i, "GPU " + std::to_string(i), 9, 0});
  return probe;
}

}  // namespace

TEST_CASE("runner pool: a job is answered by the runner") {
  auto pool = start_pool();
  const auto report = pool->run(job("ok", 1), std::chrono::milliseconds(5000));
  CHECK(report.status == StepStatus::kOk);
  CHECK(report.id == 1);
  CHECK(report.device.contains("runner_seconds"));
}

TEST_CASE("runner pool: a hang is killed at the deadline and the spare serves the next job") {
  auto pool = start_pool();
  const auto before = pool->run(job("ok", 1), std::chrono::milliseconds(5000));
  const auto started = std::chrono::steady_clock::now();
  const auto hung = pool->run(job("hang", 2), std::chrono::milliseconds(500));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(hung.status == StepStatus::kTimeout);
  CHECK(hung.message.find("did not finish within") != std::string::npos);
  CHECK(waited < 2.0);
  const auto recovery_started = std::chrono::steady_clock::now();
  const auto after = pool->run(job("ok", 3), std::chrono::milliseconds(5000));
  const double recovery =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - recovery_started).count();
  CHECK(after.status == StepStatus::kOk);
  CHECK(runner_pid(after) != runner_pid(before));
  CHECK(recovery < 0.5);
  const auto stats = pool->stats();
  CHECK(stats["timeouts"] == 1);
  CHECK(stats["queue_depth"] == 0);
  // The hang held the runner for its whole deadline: that counts as busy time.
  CHECK(stats["runners"][0]["busy_s"].get<double>() >= 0.5);
  const double utilisation = stats["runners"][0]["utilisation"].get<double>();
  CHECK(utilisation > 0.0);
  CHECK(utilisation <= 1.0);
}

TEST_CASE("runner pool: stats count the jobs waiting for a busy GPU") {
  auto pool = start_pool();
  auto hung = std::async(std::launch::async, [&] {
    return pool->run(job("hang", 1), std::chrono::milliseconds(1500));
  });
  // Wait until the hang holds the only runner, then queue a second job behind it.
  for (int i = 0; i < 200 && !pool->stats()["runners"][0]["busy"].get<bool>(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto queued = std::async(
      std::launch::async, [&] { return pool->run(job("ok", 2), std::chrono::milliseconds(5000)); });
  int seen = 0;
  for (int i = 0; i < 200 && seen == 0; ++i) {
    seen = pool->stats()["queue_depth"].get<int>();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(seen == 1);
  CHECK(hung.get().status == StepStatus::kTimeout);
  CHECK(queued.get().status == StepStatus::kOk);
  CHECK(pool->stats()["queue_depth"] == 0);
}

TEST_CASE("runner pool: a crash, a lost context and a malformed report each replace the runner") {
  auto pool = start_pool();
  std::set<int> pids;
  pids.insert(runner_pid(pool->run(job("ok", 1), std::chrono::milliseconds(5000))));

  const auto crashed = pool->run(job("crash", 2), std::chrono::milliseconds(5000));
  CHECK(crashed.status == StepStatus::kRuntimeError);
  CHECK(crashed.message.find("signal 6") != std::string::npos);
  const auto after_crash = pool->run(job("ok", 3), std::chrono::milliseconds(5000));
  CHECK(after_crash.status == StepStatus::kOk);
  pids.insert(runner_pid(after_crash));

  const auto lost = pool->run(job("lost", 4), std::chrono::milliseconds(5000));
  CHECK(lost.status == StepStatus::kRuntimeError);
  CHECK(lost.context_lost);
  const auto after_lost = pool->run(job("ok", 5), std::chrono::milliseconds(5000));
  CHECK(after_lost.status == StepStatus::kOk);
  pids.insert(runner_pid(after_lost));

  const auto garbage = pool->run(job("garbage", 6), std::chrono::milliseconds(5000));
  CHECK(garbage.status == StepStatus::kInfraError);
  const auto after_garbage = pool->run(job("ok", 7), std::chrono::milliseconds(5000));
  CHECK(after_garbage.status == StepStatus::kOk);
  pids.insert(runner_pid(after_garbage));

  CHECK(pids.size() == 4);  // four different processes served the four ok jobs
  const auto stats = pool->stats();
  CHECK(stats["crashes"] == 2);
  CHECK(stats["lost_contexts"] == 1);
  CHECK(stats["runners"][0]["restarts"] == 3);
}

TEST_CASE("runner pool: a runner that cannot start is an error, not a hang") {
  runner::RunnerPoolOptions options;
  options.runner_exe = "/nonexistent/crucible-gpu-runner";
  options.devices = {0};
  auto pool = runner::RunnerPool::start(options);
  REQUIRE_FALSE(pool.ok());
  CHECK(pool.error().code == core::ErrorCode::kIo);
}

TEST_CASE("run job: the task hash and both evaluated plans cross the pipe unchanged") {
  runner::RunJob sent = job("ok", 7);
  sent.task_hash = std::string(64, 'a');
  action::Launch launch;
  launch.kernel = "k";
  launch.name_expression = "k";
  launch.where = "line 1";
  launch.args.push_back({"out", action::ArgKind::kTensor, 0});
  sent.candidate_plan.plan.launches.push_back(launch);
  action::ConcretePlan concrete;
  concrete.launches.push_back({0, {3, 1, 1}, {256, 1, 1}, {1, 1, 1}, false, 1024});
  sent.candidate_plan.cases.push_back(concrete);
  const auto got = runner::RunJob::from_value(sent.to_value());
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  CHECK(got->task_hash == sent.task_hash);
  REQUIRE(got->candidate_plan.cases.size() == 1);
  CHECK(got->candidate_plan.cases[0].launches[0].grid[0] == 3);
  CHECK(got->candidate_plan.cases[0].launches[0].smem_bytes == 1024);
  CHECK(got->candidate_plan.plan.launches[0].args[0].name == "out");
  CHECK(got->reference_plan.cases.empty());
  // A job whose plan is damaged is refused as a whole.
  auto value = sent.to_value();
  value["candidate_plan"]["cases"][0]["launches"][0]["launch"] = 4;
  CHECK_FALSE(runner::RunJob::from_value(value).ok());
  value.erase("task_hash");
  CHECK_FALSE(runner::RunJob::from_value(value).ok());
}

TEST_CASE("run job: the model check crosses the pipe with its steps and per-site plans") {
  runner::RunJob sent = job("ok", 8);
  CHECK_FALSE(runner::RunJob::from_value(sent.to_value())->model.has_value());
  runner::ModelCheck check;
  check.model = "stories260K.toml";
  check.steps = {{{"num_seqs", 8}, {"context", 256}}, {{"num_seqs", 8}, {"context", 1}}};
  runner::ModelReference reference;
  reference.task = "llm/silu_and_mul";
  reference.task_hash = std::string(64, 'b');
  reference.compiled.cubin = std::string(
      "\x7f"
      "ELF\0\1",
      6);
  reference.compiled.lowered_names["k"] = "_Z1kv";
  action::ConcretePlan concrete;
  concrete.launches.push_back({0, {8, 1, 1}, {128, 1, 1}, {1, 1, 1}, false, 0});
  action::Launch launch;
  launch.kernel = "k";
  launch.name_expression = "k";
  launch.where = "line 1";
  reference.plan.plan.launches.push_back(launch);
  reference.plan.cases = {concrete, concrete};
  check.references.push_back(reference);
  check.candidate.plan.launches.push_back(launch);
  check.candidate.cases = {concrete};
  check.time_cap_ms = 1500;
  check.hidden_states = true;
  sent.model = check;
  const auto got = runner::RunJob::from_value(sent.to_value());
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  REQUIRE(got->model.has_value());
  CHECK(got->model->model == "stories260K.toml");
  REQUIRE(got->model->steps.size() == 2);
  CHECK(got->model->steps[1].at("context") == 1);
  REQUIRE(got->model->references.size() == 1);
  CHECK(got->model->references[0].compiled.cubin == reference.compiled.cubin);
  CHECK(got->model->references[0].plan.cases.size() == 2);
  CHECK(got->model->candidate.cases[0].launches[0].grid[0] == 8);
  CHECK(got->model->time_cap_ms == 1500);
  CHECK(got->model->hidden_states);
  // A check without steps is refused, and so the job.
  auto value = sent.to_value();
  value["model"]["steps"] = core::Value::array();
  CHECK_FALSE(runner::RunJob::from_value(value).ok());
  // The report carries the check's answer back.
  runner::RunReport report;
  report.status = core::StepStatus::kOk;
  report.model = core::Value{{"step_speedup", 1.01}};
  const auto back = runner::RunReport::from_value(report.to_value());
  REQUIRE(back.ok());
  CHECK(back->model["step_speedup"] == 1.01);
}

TEST_CASE("runner pool: one job after another goes to the GPU that was idle longest") {
  auto pool = start_pool({0, 1, 2});
  std::map<int, int> per_device;
  for (std::uint64_t id = 1; id <= 6; ++id) {
    const auto report = pool->run(job("ok", id), std::chrono::milliseconds(5000));
    REQUIRE(report.status == StepStatus::kOk);
    ++per_device[runner_device(report)];
  }
  // First-free would have sent all six to device 0; the first three visit each device once.
  CHECK(per_device.size() == 3);
  for (const auto& [device, jobs] : per_device) {
    CHECK(device >= 0);
    CHECK(device <= 2);
    CHECK(jobs >= 1);
  }
}

TEST_CASE("runner pool: concurrent jobs spread across every GPU") {
  auto pool = start_pool({0, 1, 2});
  std::vector<std::future<runner::RunReport>> running;
  const auto started = std::chrono::steady_clock::now();
  for (std::uint64_t id = 1; id <= 9; ++id) {
    running.push_back(std::async(std::launch::async, [&pool, id] {
      return pool->run(job("slow", id), std::chrono::milliseconds(5000));
    }));
  }
  std::map<int, int> per_device;
  for (auto& report : running) {
    const auto got = report.get();
    CHECK(got.status == StepStatus::kOk);
    ++per_device[runner_device(got)];
  }
  // Nine 200 ms jobs on three GPUs take three rounds, not nine.
  CHECK(seconds_since(started) < 1.5);
  REQUIRE(per_device.size() == 3);
  for (const auto& [device, jobs] : per_device) CHECK(jobs >= 2);
  const auto stats = pool->stats();
  CHECK(stats["jobs"] == 9);
  for (int i = 0; i < 3; ++i) {
    CHECK(stats["runners"][i]["jobs"] == per_device[stats["runners"][i]["device"].get<int>()]);
  }
}

TEST_CASE("runner pool: a hang on one GPU does not delay jobs on the others") {
  auto pool = start_pool({0, 1, 2});
  auto hung = std::async(std::launch::async, [&] {
    return pool->run(job("hang", 1), std::chrono::milliseconds(2000));
  });
  int hung_device = -1;
  for (int i = 0; i < 400 && hung_device < 0; ++i) {
    const auto stats = pool->stats();
    for (int d = 0; d < 3; ++d) {
      if (stats["runners"][d]["busy"].get<bool>()) hung_device = stats["runners"][d]["device"];
    }
    if (hung_device < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(hung_device >= 0);
  const auto started = std::chrono::steady_clock::now();
  std::set<int> served;
  for (std::uint64_t id = 2; id <= 7; ++id) {
    const auto report = pool->run(job("ok", id), std::chrono::milliseconds(5000));
    CHECK(report.status == StepStatus::kOk);
    CHECK(runner_device(report) != hung_device);
    served.insert(runner_device(report));
  }
  CHECK(seconds_since(started) < 1.0);  // well inside the hang's 2 s deadline
  CHECK(served.size() == 2);
  CHECK(hung.get().status == StepStatus::kTimeout);

  const auto stats = pool->stats();
  CHECK(stats["timeouts"] == 1);
  CHECK(stats["jobs"] == 6);
  CHECK(stats["queue_depth"] == 0);
  std::int64_t jobs = 0, timeouts = 0, restarts = 0;
  double busy = 0.0;
  for (int d = 0; d < 3; ++d) {
    const auto& lane = stats["runners"][d];
    CHECK(lane["device"] == d);
    jobs += lane["jobs"].get<std::int64_t>();
    timeouts += lane["timeouts"].get<std::int64_t>();
    restarts += lane["restarts"].get<std::int64_t>();
    busy += lane["busy_s"].get<double>();
    for (const char* key : {"utilisation", "recent_utilisation"}) {
      CHECK(lane[key].get<double>() >= 0.0);
      CHECK(lane[key].get<double>() <= 1.0);
    }
    if (d == hung_device) {
      CHECK(lane["timeouts"] == 1);
      CHECK(lane["restarts"] == 1);
      CHECK(lane["jobs"] == 0);
      CHECK(lane["recent_jobs"] == 1);  // the hang held it, though it never answered
      CHECK(lane["busy_s"].get<double>() >= 2.0);
      CHECK(lane["recent_busy_s"].get<double>() >= 2.0);
      CHECK(lane["recent_utilisation"].get<double>() > 0.5);
    } else {
      CHECK(lane["timeouts"] == 0);
      CHECK(lane["restarts"] == 0);
      CHECK(lane["jobs"].get<int>() >= 1);
      CHECK(lane["recent_jobs"] == lane["jobs"]);
      CHECK(lane["recent_utilisation"].get<double>() < 0.5);
    }
  }
  CHECK(jobs == stats["jobs"].get<std::int64_t>());
  CHECK(timeouts == stats["timeouts"].get<std::int64_t>());
  CHECK(restarts == stats["restarts"].get<std::int64_t>());
  CHECK(busy == doctest::Approx(stats["busy_s"].get<double>()));
  CHECK(stats["window_s"].get<double>() <= stats["uptime_s"].get<double>());
}

// The windows a scripted "timed:S:E" job reports: its work sharing the GPU and its timing
// (between them it waits for the gate, holding nothing).
struct Windows {
  std::int64_t shared_from = 0, shared_to = 0, exclusive_from = 0, exclusive_to = 0;
};
Windows windows_of(const runner::RunReport& report) {
  const auto& w = report.timing["windows"];
  return Windows{w["shared_from_ns"].get<std::int64_t>(), w["shared_to_ns"].get<std::int64_t>(),
                 w["exclusive_from_ns"].get<std::int64_t>(),
                 w["exclusive_to_ns"].get<std::int64_t>()};
}
bool overlap(std::int64_t a_from, std::int64_t a_to, std::int64_t b_from, std::int64_t b_to) {
  return a_from < b_to && b_from < a_to;
}

std::vector<runner::RunReport> run_concurrently(runner::RunnerPool& pool,
                                                const std::vector<std::string>& behaviours,
                                                std::chrono::milliseconds deadline) {
  std::vector<std::future<runner::RunReport>> running;
  for (std::size_t i = 0; i < behaviours.size(); ++i) {
    running.push_back(std::async(std::launch::async, [&pool, &behaviours, i, deadline] {
      return pool.run(job(behaviours[i], i + 1), deadline);
    }));
  }
  std::vector<runner::RunReport> reports;
  for (auto& report : running) reports.push_back(report.get());
  return reports;
}

TEST_CASE("runner pool: runners of one GPU check side by side and each times alone") {
  auto pool = start_pool({0}, 3);
  const auto started = std::chrono::steady_clock::now();
  const auto reports =
      run_concurrently(*pool, std::vector<std::string>(6, "timed:200:50"), std::chrono::seconds(5));
  const double wall = seconds_since(started);
  std::vector<Windows> windows;
  std::set<int> pids;
  for (const auto& report : reports) {
    REQUIRE(report.status == StepStatus::kOk);
    windows.push_back(windows_of(report));
    pids.insert(runner_pid(report));
  }
  CHECK(pids.size() == 3);
  int shared_overlaps = 0;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    for (std::size_t j = 0; j < windows.size(); ++j) {
      if (i == j) continue;
      // No other job did anything on the GPU while job i timed.
      CHECK_FALSE(overlap(windows[i].exclusive_from, windows[i].exclusive_to,
                          windows[j].shared_from, windows[j].shared_to));
      CHECK_FALSE(overlap(windows[i].exclusive_from, windows[i].exclusive_to,
                          windows[j].exclusive_from, windows[j].exclusive_to));
      shared_overlaps += overlap(windows[i].shared_from, windows[i].shared_to,
                                 windows[j].shared_from, windows[j].shared_to)
                             ? 1
                             : 0;
    }
  }
  // The correctness parts ran side by side: one runner would have taken 6 x 250 ms.
  CHECK(shared_overlaps > 0);
  CHECK(wall < 1.2);
  const auto stats = pool->stats();
  REQUIRE(stats["gpus"].size() == 1);
  CHECK(stats["gpus"][0]["runners"] == 3);
  CHECK(stats["gpus"][0]["exclusive_holds"] == 6);
  CHECK(stats["gpus"][0]["exclusive_s"].get<double>() >= 0.3);
  CHECK(stats["gpus"][0]["shared"] == 0);
  CHECK(stats["gpus"][0]["exclusive"] == false);
  CHECK(stats["runners"].size() == 3);
}

TEST_CASE("runner pool: a job's deadline does not count its waits for the GPU") {
  auto pool = start_pool({0}, 2);
  // Each job needs 400 ms of its own; the second also waits up to 300 ms for the first's
  // timing. Counted against a 550 ms deadline that wait would time it out.
  const auto reports =
      run_concurrently(*pool, {"timed:100:300", "timed:100:300"}, std::chrono::milliseconds(550));
  for (const auto& report : reports) {
    CHECK(report.status == StepStatus::kOk);
    CHECK(report.device.contains("gate_wait_s"));
  }
  const double waited = reports[0].device["gate_wait_s"].get<double>() +
                        reports[1].device["gate_wait_s"].get<double>();
  CHECK(waited > 0.1);
}

TEST_CASE("runner pool: a hang gives its GPU back only once its runner is dead") {
  for (const std::string hang : {"hang", "hang_timing"}) {
    CAPTURE(hang);
    auto pool = start_pool({0}, 2);
    const auto started = std::chrono::steady_clock::now();
    auto hung = std::async(std::launch::async,
                           [&] { return pool->run(job(hang, 1), std::chrono::milliseconds(400)); });
    auto any_busy = [&] {
      const auto stats = pool->stats();
      return stats["runners"][0]["busy"].get<bool>() || stats["runners"][1]["busy"].get<bool>();
    };
    for (int i = 0; i < 200 && !any_busy(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // until it holds the gate
    const auto timed = pool->run(job("timed:0:50", 2), std::chrono::seconds(5));
    CHECK(hung.get().status == StepStatus::kTimeout);
    REQUIRE(timed.status == StepStatus::kOk);
    // Its timing began after the hang's 400 ms deadline, when the hung runner was gone.
    const auto began = std::chrono::nanoseconds(windows_of(timed).exclusive_from);
    CHECK(began - started.time_since_epoch() >= std::chrono::milliseconds(400));
    const auto after = pool->run(job("timed:10:10", 3), std::chrono::seconds(5));
    CHECK(after.status == StepStatus::kOk);
    CHECK(pool->stats()["timeouts"] == 1);
  }
}

TEST_CASE("runner pool: at least one runner per device") {
  runner::RunnerPoolOptions options;
  options.runner_exe = CRUCIBLE_BINARY_DIR "/bin/test_scripted_runner";
  options.devices = {0};
  options.runners_per_device = 0;
  const auto pool = runner::RunnerPool::start(options);
  REQUIRE_FALSE(pool.ok());
  CHECK(pool.error().message.find("at least 1") != std::string::npos);
}

TEST_CASE("select gpus: a comma list of probed ordinals, in its order") {
  const auto probe = three_gpus();
  const auto picked = runner::select_gpus(probe, "2,0");
  REQUIRE_MESSAGE(picked.ok(), picked.error().message);
  REQUIRE(picked->gpus.size() == 2);
  CHECK(picked->gpus[0].index == 2);
  CHECK(picked->gpus[0].name == "GPU 2");
  CHECK(picked->gpus[1].index == 0);
  const auto spaced = runner::select_gpus(probe, " 1 , 2");
  REQUIRE(spaced.ok());
  CHECK(spaced->gpus.size() == 2);
  CHECK(runner::select_gpus(probe, "1")->gpus.at(0).index == 1);
}

TEST_CASE("select gpus: refuses malformed lists, duplicates and GPUs that do not exist") {
  const auto probe = three_gpus();
  struct Row {
    const char* list;
    const char* says;
  };
  for (const Row& row :
       {Row{"", "found \"\""}, Row{"0,", "found \"\""}, Row{",1", "found \"\""},
        Row{"-1", "found \"-1\""}, Row{"a", "found \"a\""}, Row{"1.5", "found \"1.5\""},
        Row{"0x1", "found \"0x1\""}, Row{"99999999999", "found"},
        Row{"0,0", "GPU 0 is named twice"}, Row{"1,2,1", "GPU 1 is named twice"},
        Row{"3", "there is no GPU 3"}, Row{"0,7", "there is no GPU 7"}}) {
    CAPTURE(row.list);
    const auto picked = runner::select_gpus(probe, row.list);
    REQUIRE_FALSE(picked.ok());
    CHECK(picked.error().code == core::ErrorCode::kInvalidArgument);
    CHECK(picked.error().message.find(row.says) != std::string::npos);
    CHECK(picked.error().message.find("the GPUs here are 0 (GPU 0), 1 (GPU 1), 2 (GPU 2)") !=
          std::string::npos);
  }
  runner::GpuProbe none;
  none.reason = "no CUDA driver on this server";
  const auto picked = runner::select_gpus(none, "0");
  REQUIRE_FALSE(picked.ok());
  CHECK(picked.error().message == "\"0\": there is no GPU 0; no CUDA driver on this server");
  CHECK(
      runner::select_gpus(runner::GpuProbe{}, "1").error().message.find("this server has no GPU") !=
      std::string::npos);
}
