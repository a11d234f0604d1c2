// crucible-gpu-runner: owns one GPU's context; reads RunJob frames on stdin, writes RunReports.
// Usage: crucible-gpu-runner --device N --home DIR [--copy-bandwidth-gbps G] [--gpu-gate 1]
// With --gpu-gate 1 the runner shares its GPU with others under the server's gate: mid-job it
// asks for the GPU to itself before timing (runner/child/gate_client.hpp).
// First frame out: {ready: true, device: {...}} or {ready: false, error: "..."}. A report with
// context_lost set is followed by exit(3): the context is unusable and the server replaces us.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "core/log.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "runner/child/job.hpp"
#include "runner/child/kernel_timer.hpp"
#include "sandbox/frame_pipe.hpp"
#include "tasks/registry.hpp"

namespace {

using namespace crucible;

int fail_start(const std::string& message) {
  (void)sandbox::write_frame(STDOUT_FILENO, core::Value{{"ready", false}, {"error", message}});
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int ordinal = 0;
  std::string home = ".";
  double copy_bandwidth_gbps = 0.0;
  bool gated = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--device") == 0) ordinal = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--home") == 0) home = argv[i + 1];
    if (std::strcmp(argv[i], "--copy-bandwidth-gbps") == 0)
      copy_bandwidth_gbps = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--gpu-gate") == 0) gated = std::strcmp(argv[i + 1], "1") == 0;
  }
  core::set_log_level(core::LogLevel::kWarn);
  auto registry = tasks::Registry::load(home);
  if (!registry) return fail_start("cannot load tasks: " + registry.error().message);

  runner::child::Device device;
  try {
    device.open(ordinal);
  } catch (const runner::child::CudaFailure& failure) {
    return fail_start(std::string("no usable CUDA device: ") + failure.what());
  }
  if (gated) device.gate = runner::child::GateClient(STDOUT_FILENO, STDIN_FILENO);
  runner::child::KernelTimer* timer = nullptr;
  if (const auto error = runner::child::KernelTimer::start(&timer); !error.empty()) {
    return fail_start("CUPTI: " + error);
  }
  // Everything done once per process happens before "ready", so a spare that takes over after
  // a crash serves its first job as fast as any other: NVML, the bandwidth figure (measured only
  // by the first runner of a device; spares are told it, so they never load the GPU while
  // another runner is timing), CUPTI's first buffers.
  const auto warm_started = std::chrono::steady_clock::now();
  (void)runner::child::read_clocks(ordinal);
  try {
    if (copy_bandwidth_gbps > 0.0) {
      device.copy_bandwidth_bps = copy_bandwidth_gbps * 1e9;
    } else {
      device.measure_bandwidth();
    }
    device.flush_l2(0);
    runner::child::check(cuStreamSynchronize(device.stream), "warm-up");
  } catch (const runner::child::CudaFailure& failure) {
    return fail_start(std::string("warm-up failed: ") + failure.what());
  }
  (void)timer->collect();
  core::Value ready{{"ready", true}, {"device", device.describe()}};
  ready["warm_up_ms"] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_started)
          .count();
  if (!sandbox::write_frame(STDOUT_FILENO, ready)) return 2;

  const core::DecodeLimits limits = core::trusted_decode_limits(sandbox::kMaxFrameBytes);
  while (true) {
    auto frame = sandbox::read_frame(STDIN_FILENO, limits);
    if (!frame) return frame.error().message == "eof" ? 0 : 2;
    auto job = runner::RunJob::from_value(*frame);
    runner::RunReport report;
    if (!job) {
      report.status = core::StepStatus::kInfraError;
      report.message = "runner: " + job.error().message;
    } else {
      device.gate.job_started();
      report = runner::child::run_job(*job, *registry, device, *timer);
    }
    if (!sandbox::write_frame(STDOUT_FILENO, report.to_value())) return 2;
    // A lost or abandoned context: leave without running destructors (they would call into a
    // driver that may be waiting on a kernel that never ends).
    if (report.context_lost) std::_Exit(3);
  }
}
