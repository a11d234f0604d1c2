// crucible-gpu-runner: owns one GPU's context; reads RunJob frames on stdin, writes RunReports.
// Usage: crucible-gpu-runner --device N --home DIR
// First frame out: {ready: true, device: {...}} or {ready: false, error: "..."}. A report with
// context_lost set is followed by exit(3): the context is unusable and the server replaces us.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "core/log.hpp"
#include "sandbox/frame_pipe.hpp"
#include "sandbox/runner/cuda_check.hpp"
#include "sandbox/runner/device.hpp"
#include "sandbox/runner/job.hpp"
#include "sandbox/runner/kernel_timer.hpp"
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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--device") == 0) ordinal = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--home") == 0) home = argv[i + 1];
  }
  core::set_log_level(core::LogLevel::kWarn);
  auto registry = tasks::Registry::load(home);
  if (!registry) return fail_start("cannot load tasks: " + registry.error().message);

  sandbox::runner::Device device;
  try {
    device.open(ordinal);
  } catch (const sandbox::runner::CudaFailure& failure) {
    return fail_start(std::string("no usable CUDA device: ") + failure.what());
  }
  sandbox::runner::KernelTimer* timer = nullptr;
  if (const auto error = sandbox::runner::KernelTimer::start(&timer); !error.empty()) {
    return fail_start("CUPTI: " + error);
  }
  if (!sandbox::write_frame(STDOUT_FILENO, core::Value{{"ready", true}, {"device", device.describe()}})) {
    return 2;
  }

  core::DecodeLimits limits;
  limits.max_bytes = sandbox::kMaxFrameBytes;
  limits.max_depth = 32;
  limits.max_str_bytes = sandbox::kMaxFrameBytes;
  limits.max_bin_bytes = sandbox::kMaxFrameBytes;
  limits.max_array_items = 1u << 20;
  limits.max_map_entries = 1u << 16;
  while (true) {
    auto frame = sandbox::read_frame(STDIN_FILENO, limits);
    if (!frame) return frame.error().message == "eof" ? 0 : 2;
    auto job = sandbox::RunJob::from_value(*frame);
    sandbox::RunReport report;
    if (!job) {
      report.status = core::StepStatus::kInfraError;
      report.message = "runner: " + job.error().message;
    } else {
      report = sandbox::runner::run_job(*job, *registry, device, *timer);
    }
    if (!sandbox::write_frame(STDOUT_FILENO, report.to_value())) return 2;
    if (report.context_lost) return 3;
  }
}
