// A stand-in for crucible-gpu-runner that speaks its protocol and misbehaves on request, so the
// server-side supervisor (sandbox/runner_pool) is tested without a GPU. The job's task name says
// what to do: "hang" never answers, "crash" aborts, "lost" reports a lost context and exits,
// "garbage" writes a malformed frame, "slow" answers ok after 200 ms; "timed:S:E" works S ms
// sharing the GPU, asks the gate for it alone, works E ms and reports both windows (steady-clock
// nanoseconds, comparable across processes); "hang_timing" asks for the GPU alone and then never
// answers; anything else is answered ok at once. Every report names the runner's pid and the
// --device it was started with; a job with a model check is answered with what the check
// carried (steps, references, plans per site).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "runner/runner_job.hpp"
#include "sandbox/frame_pipe.hpp"

namespace {

using namespace crucible;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The gate protocol as crucible-gpu-runner speaks it: ask, then wait for the grant.
bool ask_gate(const char* hold) {
  if (!sandbox::write_frame(STDOUT_FILENO, core::Value{{"gpu", hold}})) return false;
  auto grant = sandbox::read_frame(STDIN_FILENO, core::trusted_decode_limits(1 << 16));
  return grant && grant->is_object() && grant->value("gpu", std::string()) == "granted";
}

}  // namespace

int main(int argc, char** argv) {
  int device = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string_view(argv[i]) == "--device") device = std::atoi(argv[i + 1]);
  }
  if (!sandbox::write_frame(
          STDOUT_FILENO,
          core::Value{{"ready", true},
                      {"device", {{"name", "scripted"}, {"pid", ::getpid()}, {"index", device}}},
                      {"warm_up_ms", 0.0}})) {
    return 2;
  }
  while (true) {
    auto frame = sandbox::read_frame(STDIN_FILENO, core::trusted_decode_limits(64u << 20));
    if (!frame) return 0;
    auto job = runner::RunJob::from_value(*frame);
    if (!job) return 4;
    if (job->task == "hang") {
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (job->task == "crash") std::abort();
    if (job->task == "hang_timing") {
      if (!ask_gate("exclusive")) return 5;
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    core::Value windows;
    if (job->task.rfind("timed:", 0) == 0) {
      const auto colon = job->task.find(':', 6);
      const int shared_ms = std::atoi(job->task.substr(6, colon - 6).c_str());
      const int exclusive_ms = std::atoi(job->task.substr(colon + 1).c_str());
      windows["shared_from_ns"] = now_ns();
      std::this_thread::sleep_for(std::chrono::milliseconds(shared_ms));
      windows["shared_to_ns"] = now_ns();
      if (!ask_gate("exclusive")) return 5;
      windows["exclusive_from_ns"] = now_ns();
      std::this_thread::sleep_for(std::chrono::milliseconds(exclusive_ms));
      windows["exclusive_to_ns"] = now_ns();
    }
    runner::RunReport report;
    report.id = job->id;
    report.device = core::Value{{"pid", ::getpid()}, {"index", device}};
    if (job->task == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (job->task == "garbage") {
      (void)sandbox::write_frame(STDOUT_FILENO, core::Value{{"nonsense", 1}});
      continue;
    }
    if (job->task == "lost") {
      report.status = core::StepStatus::kRuntimeError;
      report.message = "scripted fault";
      report.context_lost = true;
      (void)sandbox::write_frame(STDOUT_FILENO, report.to_value());
      return 3;
    }
    report.status = core::StepStatus::kOk;
    report.message = "scripted ok";
    report.speedup = 1.0;
    report.timing = core::Value{{"cases", core::Value::array()},
                                {"speedup_ci95", {{"low", 0.99}, {"high", 1.01}}}};
    if (!windows.is_null()) report.timing["windows"] = windows;
    if (job->model) {
      core::Value cases = core::Value::object();
      for (const auto& reference : job->model->references) {
        cases[reference.task] = reference.plan.cases.size();
      }
      report.model = core::Value{{"model", job->model->model},
                                 {"steps", job->model->steps},
                                 {"reference_cases", cases},
                                 {"candidate_cases", job->model->candidate.cases.size()}};
    }
    if (!sandbox::write_frame(STDOUT_FILENO, report.to_value())) return 2;
  }
}
