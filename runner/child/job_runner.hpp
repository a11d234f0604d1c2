// One job on the runner's device: load, correctness on every case (correctness.cpp), then
// timing of the visible cases (timing.cpp). Private to crucible-gpu-runner.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "action/evaluated_plan.hpp"
#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/value.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"
#include "judge/timing_schedule.hpp"
#include "judge/timing_stats.hpp"
#include "runner/child/device.hpp"
#include "runner/child/host_values.hpp"
#include "runner/child/kernel_timer.hpp"
#include "runner/child/library_reference.hpp"
#include "runner/child/loaded_module.hpp"
#include "runner/runner_job.hpp"
#include "tasks/roofline.hpp"
#include "tasks/task.hpp"

namespace crucible::runner::child {

using action::ConcretePlan;
using core::Value;
using Clock = std::chrono::steady_clock;

inline double milliseconds_since(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// What differs between the reference and the candidate.
struct Side {
  const LaunchPlan* plan;
  LoadedModule* module;
  bool candidate;
  LibraryReference* library = nullptr;  // set: the reference is this library's call
};

// One case's shapes and concrete plans.
struct CaseSetup {
  const tasks::Case* c = nullptr;
  std::size_t index = 0;
  // How replies name the case: "case NAME" for a visible one, "hidden case #K" (K counts the
  // hidden cases from 1 in manifest order) for a hidden one, whose name and symbols never
  // leave the runner.
  std::string label;
  std::uint64_t seed = 0;
  std::vector<std::vector<std::int64_t>> shapes;  // per task tensor
  std::vector<std::size_t> counts;
  std::vector<std::size_t> bytes;
  ConcretePlan reference;
  ConcretePlan candidate;
  tasks::RooflineCost cost;
  Value symbols_value;
};

// A block of device check results (Device::launch_check), three per task tensor: 0 and 1 its
// front and back canary, 2 its payload (a read-only input against its copy, or an output
// against the reference's).
struct TensorChecks {
  static std::size_t offset(std::size_t tensor, std::size_t check) {
    return Device::kCheckBytes * (3 * tensor + check);
  }
  static std::size_t bytes(std::size_t tensors) { return offset(tensors, 0); }
  static CUdeviceptr at(CUdeviceptr block, std::size_t tensor, std::size_t check) {
    return block + offset(tensor, check);
  }
  static CheckResult read(const std::byte* block, std::size_t tensor, std::size_t check) {
    return CheckResult::read(block + offset(tensor, check));
  }
};

class JobRunner {
 public:
  JobRunner(const RunJob& job, const tasks::Task& task, Device& device, KernelTimer& timer);
  RunReport run();

 private:
  using Views = std::vector<const std::byte*>;
  static Views as_views(const std::vector<std::byte*>& pointers) {
    return Views(pointers.begin(), pointers.end());
  }
  static void upload(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream);
  static void download(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream);

  // job.cpp: loading and launching.
  void prepare();
  void prepare_library();
  Side reference_side();
  Side candidate_side();
  void launch(const Side& side, const ConcretePlan& concrete, const CaseSetup& setup,
              const std::vector<CUdeviceptr>& tensors, const std::vector<CUdeviceptr>& workspaces);
  void record_phase(const std::string& name, Clock::time_point since);
  // Adds to a phase that several cases (or parts of one) contribute to.
  void add_to_phase(const std::string& name, double ms);
  std::uint64_t canary_seed(std::size_t tensor, int side) const;
  // Tensor `tensor`'s front and back canary patterns, side by side on the device.
  DeviceBuffer canary_patterns(std::size_t tensor);
  // Enqueues the writing of a buffer's two canaries from its patterns, and their checks into
  // checks 0 and 1 of `tensor` in a TensorChecks block.
  void write_canaries(const DeviceBuffer& buffer, CUdeviceptr patterns);
  void check_canaries(const DeviceBuffer& buffer, CUdeviceptr patterns, CUdeviceptr checks,
                      std::size_t tensor);
  // A junk byte for candidate workspaces, different for every call and unknown to the kernel.
  unsigned char workspace_junk(std::uint64_t salt) const;

  // correctness.cpp
  // The device memory of one case, shared by its two runs: every tensor with canaries, a
  // pristine copy of each input from which the working buffers are restored before each side,
  // and the first run's expected outputs, which the second run's outputs start from.
  struct CaseBuffers {
    std::vector<DeviceBuffer> tensors;
    std::vector<DeviceBuffer> pristine;
    std::vector<CUdeviceptr> pointers;
    std::vector<DeviceBuffer> expected;  // per output: the reference's answer on this draw
    std::vector<DeviceBuffer> stale;     // per out tensor: draw 0's answer, where draw 1 starts
    bool stale_written = false;
    std::vector<DeviceBuffer> canaries;  // per tensor: its front and back canary patterns
    DeviceBuffer results;                // device_verdict's check results, three per tensor
  };
  bool device_verdict(const CaseSetup& setup, int draw, CaseBuffers& buffers,
                      std::vector<judge::CompareReport>& reports);
  std::vector<judge::CompareReport> judge_outputs(const CaseSetup& setup, const Views& inputs,
                                                  const Views& candidate, const Views& reference,
                                                  int variant, bool reveal);
  void poison_device(CUdeviceptr dst, core::DType dtype, std::size_t count, int variant);
  HostValueCache::Bytes fill_input(const tasks::Case& c, const tasks::TensorSpec& tensor,
                                   std::uint64_t seed, std::size_t count, CUdeviceptr out);
  Value check_case(const CaseSetup& setup, int draw, CaseBuffers& buffers);
  Value check_all_cases();
  Value correctness_value() const;
  // Records a failed case: the reply names a visible case and what went wrong in detail; a
  // hidden case only by its label and the kinds of failure (`kinds`).
  void record_failure(const CaseSetup& setup, int draw, const std::vector<std::string>& problems,
                      const std::vector<std::string>& kinds);

  // The candidate's deadline on a case: kDeadlineFactor times the reference's own time on it
  // (its slower correctness run, launch to completion), at least kDeadlineFloorMs, at most the
  // job's kernel_timeout_ms. Before the reference has run on the case: kernel_timeout_ms.
  // The floor must stay above the time a fault takes to surface: faults (traps, stores to a
  // wild address) were reported 100 to 597 ms into the wait on the H200 (24 faults over four
  // tasks, bench/results/h200_fault_latency.json), so the floor is 1.2 s, twice the slowest.
  // A floor of 100 ms scored such faults as timeouts, and a naive correct GEMM ran past 100 x
  // cuBLASLt's time on a prefill case (docs/runner.md, "Faults, hangs").
  static constexpr double kDeadlineFactor = 100.0;
  static constexpr double kDeadlineFloorMs = 1200.0;
  double deadline_ms(const CaseSetup& setup) const;
  // How a timeout message names the deadline: the figure on a visible case; on a hidden one
  // the rule only (the figure follows the reference's time, which tells the case's size).
  std::string deadline_text(const CaseSetup& setup) const;

  // timing.cpp
  Value time_case(const CaseSetup& setup, double budget_ms);
  Value time_visible_cases();
  // The plausibility floor's peak rates on this GPU and the bytes a call must move through
  // HBM (docs/runner.md, "Plausibility").
  tasks::GpuPeak floor_peak() const;
  tasks::RooflineCost floor_cost(const CaseSetup& setup) const;

  const RunJob& job_;
  const tasks::Task& task_;
  Device& device_;
  KernelTimer& timer_;
  PlanContext context_;
  std::unique_ptr<LoadedModule> reference_module_;
  std::unique_ptr<LoadedModule> candidate_module_;
  std::unique_ptr<LibraryReference> library_;
  std::vector<CaseSetup> cases_;
  std::vector<Value> case_reports_;
  std::string failed_case_;
  core::StepStatus failed_status_ = core::StepStatus::kIncorrect;
  std::string hack_;
  std::optional<double> speedup_;
  std::vector<std::pair<judge::SpeedupEstimate, double>> estimates_;  // per timed case, with weight
  std::uint64_t next_tag_ = 1;
  bool in_timing_ = false;
  std::vector<double> reference_ms_;  // per case: the reference's slower correctness run
  Value phases_ = Value::object();
  const judge::TaskChecker* checker_ = nullptr;
};

}  // namespace crucible::runner::child
