// The GPU-runner supervisor against a scripted runner that hangs, crashes, loses its context or
// talks nonsense on request: every failure becomes the right status, the runner is replaced by
// its spare, and the next job is served.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "runner/runner_pool.hpp"

using namespace crucible;
using core::StepStatus;

namespace {

std::unique_ptr<runner::RunnerPool> start_pool() {
  runner::RunnerPoolOptions options;
  options.runner_exe = CRUCIBLE_BINARY_DIR "/bin/test_scripted_runner";
  options.home = CRUCIBLE_SOURCE_DIR;
  options.devices = {0};
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
