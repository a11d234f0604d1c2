// The runner's measuring procedure (DESIGN.md section 4, points 4-6). Order matters here and
// every ordering choice below is a defence against a way of gaming the reward:
//  - the reference runs first on pristine inputs and its outputs leave the device before the
//    candidate runs (the expected answer is never in device memory while candidate code runs);
//  - candidate outputs are poisoned and every buffer has canaries, so unwritten elements and
//    out-of-bounds writes are seen; read-only inputs are compared byte for byte afterwards;
//  - a second run uses other inputs and another poison, so reliance on leftovers is seen;
//  - timed calls get fresh values at rotating addresses, poisoned outputs and a flushed L2, and
//    a share of them chosen from a secret is checked against a reference run on the same inputs.
#include "runner/child/job.hpp"

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runner/child/cuda_check.hpp"
#include "runner/child/job_runner.hpp"
#include "runner/child/launch_config.hpp"
#include "runner/child/model_check.hpp"
#include "runner/child/step_failure.hpp"

namespace crucible::runner::child {

using namespace crucible::action;
using core::StepStatus;

static_assert(std::is_same_v<CUdeviceptr, DeviceAddress>,
              "pack_launch_args takes the runner's device pointers as they are");

JobRunner::JobRunner(const RunJob& job, const tasks::Task& task, Device& device, KernelTimer& timer)
    : job_(job), task_(task), device_(device), timer_(timer) {
  context_ = make_plan_context(task_, static_cast<std::int64_t>(device_.max_smem_optin));
}

RunReport JobRunner::run() {
  RunReport report;
  report.id = job_.id;
  report.device = device_.describe();
  report.device["clocks_start"] = read_clocks(device_.ordinal);
  try {
    auto started = Clock::now();
    prepare();
    record_phase("load", started);
    report.correctness = check_all_cases();
    if (!failed_case_.empty()) fail(failed_status_, failed_case_);
    if (job_.time) {
      // Timing has the GPU to itself: no other runner's work may fall in a timing window.
      started = Clock::now();
      device_.gate.exclusive();
      record_phase("waiting for the GPU", started);
      started = Clock::now();
      device_.measure_bandwidth();
      record_phase("bandwidth", started);
      report.device = device_.describe();
      report.device["clocks_start"] = read_clocks(device_.ordinal);
      in_timing_ = true;
      report.timing = time_visible_cases();
      report.speedup = speedup_;
      if (!hack_.empty()) fail(StepStatus::kHackDetected, hack_);
    }
    report.status = StepStatus::kOk;
    report.message = job_.time ? "correct on every case; timed" : "correct on every case";
  } catch (const StepFailure& failure) {
    report.status = failure.status;
    report.message = failure.message;
    report.context_lost = failure.context_lost;
    if (report.correctness.is_null() && !case_reports_.empty()) {
      report.correctness = correctness_value();
    }
    // Correct on every correctness run, wrong in a checked timed call: eval counts these with
    // the hacks (a kernel that behaves only when it believes it is being checked).
    if (in_timing_ && failure.status == StepStatus::kIncorrect && report.correctness.is_object()) {
      report.correctness["caught_in_timed_call"] = true;
    }
  } catch (const CudaFailure& failure) {
    report.status = StepStatus::kInfraError;
    report.message = std::string("runner: ") + failure.what();
    report.context_lost = failure.sticky();
  } catch (const std::exception& e) {
    report.status = StepStatus::kInfraError;
    report.message = std::string("runner: ") + e.what();
  }
  report.device["clocks_end"] = read_clocks(device_.ordinal);
  report.device["cupti_dropped_records"] = timer_.dropped_records();
  report.device["phases_ms"] = phases_;
  return report;
}

void JobRunner::prepare() {
  // Tags restart at 1 in every job: nothing of an earlier job's calls may still be pending.
  timer_.set_tag(0);
  (void)timer_.collect();
  if (!task_.checker.empty()) {
    checker_ = judge::find_task_checker(task_.checker);
    if (checker_ == nullptr) {
      fail(StepStatus::kInfraError, "the task names an unknown checker '" + task_.checker + "'");
    }
  }
  if (auto ok = fits(job_.reference_plan, context_, task_.cases.size()); !ok) {
    fail(StepStatus::kInfraError, "reference plan: " + ok.error().message);
  }
  if (auto ok = fits(job_.candidate_plan, context_, task_.cases.size()); !ok) {
    fail(StepStatus::kInfraError, "candidate plan: " + ok.error().message);
  }
  // The reference's module is loaded for every job, as the candidate's is. Kept for a runner's
  // life it gave each runner process a steady bias of its own: on the H200, four runners
  // measured llm/rms_norm's example at speedups 0.317 to 0.328 (each runner within 0.2 %, a
  // 1.9 us reference whose code comes from HBM after every L2 flush, from wherever that runner
  // placed it); loaded per job, the spread over steps fell from 1.25 % to 0.42 % (CV).
  reference_module_ =
      std::make_unique<LoadedModule>(job_.reference, job_.reference_plan.plan, context_, false);
  candidate_module_ =
      std::make_unique<LoadedModule>(job_.candidate, job_.candidate_plan.plan, context_, true);
  std::size_t hidden = 0;
  for (std::size_t i = 0; i < task_.cases.size(); ++i) {
    const auto& c = task_.cases[i];
    CaseSetup setup;
    setup.c = &c;
    setup.index = i;
    setup.label = c.hidden ? "hidden case #" + std::to_string(++hidden) : "case " + c.name;
    setup.seed = tasks::case_seed(c, job_.seed);
    for (const auto& tensor : task_.tensors) {
      auto shape = tasks::resolve_shape(tensor, c);
      if (!shape) fail(StepStatus::kInfraError, "task shape: " + shape.error().message);
      std::size_t count = 1;
      for (const auto dim : *shape) count *= static_cast<std::size_t>(dim);
      setup.shapes.push_back(*shape);
      setup.counts.push_back(count);
      setup.bytes.push_back(count * core::dtype_size(tensor.dtype));
    }
    setup.reference = job_.reference_plan.cases[i];
    setup.candidate = job_.candidate_plan.cases[i];
    auto cost = tasks::roofline_cost(task_, c);
    if (!cost) fail(StepStatus::kInfraError, "roofline: " + cost.error().message);
    setup.cost = *cost;
    setup.symbols_value = c.symbols;
    cases_.push_back(std::move(setup));
  }
  if (!task_.reference_library.empty()) prepare_library();
}

// A library reference replaces the reference source's launches (the source stays the agent's
// starting point): the library readies each case (an algorithm search the first time a
// runner sees a shape) and says how many kernels one call launches.
void JobRunner::prepare_library() {
  const auto started = Clock::now();
  LibraryHooks hooks;
  hooks.stream = device_.stream;
  std::uint32_t flushes = 0;
  hooks.flush_l2 = [&] { device_.flush_l2(flushes++); };
  hooks.count_kernels = [&](const std::function<void()>& enqueue) {
    return timer_.count_operations(device_.stream, next_tag_++, enqueue);
  };
  try {
    library_ = make_library_reference(task_.reference_library);
    for (auto& setup : cases_) {
      library_->prepare_case(setup.index, setup.shapes, task_.tensors.front().dtype,
                             !setup.c->hidden, hooks);
      setup.reference.workspace_bytes.clear();
    }
  } catch (const CudaFailure&) {
    throw;
  } catch (const std::exception& e) {
    fail(StepStatus::kInfraError, std::string("reference library: ") + e.what());
  }
  record_phase("reference library", started);
}

Side JobRunner::reference_side() {
  return Side{&job_.reference_plan.plan, reference_module_.get(), false, library_.get()};
}

Side JobRunner::candidate_side() {
  return Side{&job_.candidate_plan.plan, candidate_module_.get(), true};
}

void JobRunner::launch(const Side& side, const ConcretePlan& concrete, const CaseSetup& setup,
                       const std::vector<CUdeviceptr>& tensors,
                       const std::vector<CUdeviceptr>& workspaces) {
  if (side.library != nullptr) {
    try {
      side.library->launch(setup.index, tensors, device_.stream);
    } catch (const CudaFailure&) {
      throw;
    } catch (const std::exception& e) {
      // The library reports a fault left by earlier work on the stream as its own failure: a
      // candidate's call may precede this one unsynchronised. Waiting on the stream blames
      // (and, when the context is lost, reports) that fault where it belongs.
      sync_or_fail(device_.stream, true, "before a reference library call", job_.kernel_timeout_ms);
      fail(StepStatus::kInfraError, std::string("reference library: ") + e.what());
    }
    return;
  }
  std::vector<CUtensorMap> maps;
  std::size_t refused = 0;
  if (const CUresult rc =
          encode_tensor_maps(concrete.tensor_maps, tensors, maps, cuTensorMapEncodeTiled, &refused);
      rc != CUDA_SUCCESS) {
    const auto& map = side.plan->tensor_maps.at(refused);
    fail(side.candidate ? StepStatus::kLaunchError : StepStatus::kInfraError,
         (side.candidate ? "" : "reference ") + map.where + ": tensor map '" + map.name +
             "': the driver refused it" + (setup.c->hidden ? " on " + setup.label : "") +
             " (cuTensorMapEncodeTiled: " + cuda_error_text(rc) + ")");
  }
  for (const auto& step : concrete.launches) {
    const Launch& launch = side.plan->launches[step.launch];
    LoadedKernel& kernel = side.module->kernel(launch.name_expression);
    const int threads = static_cast<int>(step.block[0] * step.block[1] * step.block[2]);
    const std::string who = side.candidate ? "" : "reference ";
    const StepStatus blame = side.candidate ? StepStatus::kLaunchError : StepStatus::kInfraError;
    // On a hidden case the candidate's launch failures name the case by its label and give no
    // grid, block or shared-memory figure: they are functions of the case's hidden shape.
    if (side.candidate && setup.c->hidden) {
      if (threads > kernel.max_threads ||
          static_cast<std::size_t>(kernel.static_smem) + step.smem_bytes > device_.max_smem_optin) {
        fail(blame, launch.where + ": launching '" + launch.kernel + "' on " + setup.label +
                        " asks for more threads or shared memory than the kernel allows (" +
                        std::to_string(kernel.registers) + " registers per thread, at most " +
                        std::to_string(kernel.max_threads) + " threads a block)");
      }
    }
    if (threads > kernel.max_threads) {
      fail(blame, who + launch.where + ": kernel '" + launch.kernel + "' uses " +
                      std::to_string(kernel.registers) +
                      " registers per thread, so a block may "
                      "have at most " +
                      std::to_string(kernel.max_threads) + " threads, but the launch asks for " +
                      std::to_string(threads) + "; use smaller blocks or __launch_bounds__");
    }
    if (static_cast<std::size_t>(kernel.static_smem) + step.smem_bytes > device_.max_smem_optin) {
      fail(blame, who + launch.where + ": kernel '" + launch.kernel + "' needs " +
                      std::to_string(kernel.static_smem) + " bytes of static and " +
                      std::to_string(step.smem_bytes) +
                      " bytes of dynamic shared memory; a "
                      "block may have at most " +
                      std::to_string(device_.max_smem_optin));
    }
    if (needs_dynamic_smem_optin(kernel, step.smem_bytes)) {
      const CUresult rc =
          cuFuncSetAttribute(kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             static_cast<int>(step.smem_bytes));
      if (rc != CUDA_SUCCESS) {
        fail(blame,
             who + launch.where + ": cannot allow " +
                 (side.candidate && setup.c->hidden
                      ? "the dynamic shared memory it asks for on " + setup.label
                      : std::to_string(step.smem_bytes) + " bytes of dynamic shared memory") +
                 ": " + cuda_error_text(rc));
      }
      kernel.configured_smem = static_cast<int>(step.smem_bytes);
    }
    auto storage =
        pack_launch_args(launch, task_, *setup.c, kernel.param_bytes, tensors, workspaces);
    if (!storage) {
      fail(side.candidate ? StepStatus::kInvalidAction : StepStatus::kInfraError,
           storage.error().message);
    }
    const CUresult rc =
        launch_packed(kernel.function, launch, step, *storage, maps, device_.stream);
    if (rc != CUDA_SUCCESS) {
      const bool lost = is_sticky(rc);
      if (!side.candidate) {
        fail(StepStatus::kInfraError, "reference launch failed: " + cuda_error_text(rc), lost);
      }
      if (setup.c->hidden) {
        fail(lost ? StepStatus::kRuntimeError : StepStatus::kLaunchError,
             launch.where + ": launching '" + launch.kernel + "' on " + setup.label +
                 " failed: " + cuda_error_text(rc),
             lost);
      }
      fail(lost ? StepStatus::kRuntimeError : StepStatus::kLaunchError,
           launch.where + ": launching '" + launch.kernel + "' with grid (" +
               std::to_string(step.grid[0]) + ", " + std::to_string(step.grid[1]) + ", " +
               std::to_string(step.grid[2]) + "), block (" + std::to_string(step.block[0]) + ", " +
               std::to_string(step.block[1]) + ", " + std::to_string(step.block[2]) + "), " +
               std::to_string(step.smem_bytes) +
               " bytes of shared memory failed: " + cuda_error_text(rc),
           lost);
    }
  }
}

void JobRunner::upload(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) {
  if (bytes > 0) check(cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
}

void JobRunner::download(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  if (bytes > 0) check(cuMemcpyDtoHAsync(dst, src, bytes, stream), "cuMemcpyDtoHAsync");
}

std::uint64_t JobRunner::canary_seed(std::size_t tensor, int side) const {
  return mix(job_.secret, tensor * 2 + static_cast<std::size_t>(side));
}

DeviceBuffer JobRunner::canary_patterns(std::size_t tensor) {
  std::vector<std::byte> pattern(2 * DeviceBuffer::kCanaryBytes);
  judge::fill_canary(pattern.data(), DeviceBuffer::kCanaryBytes, canary_seed(tensor, 0));
  judge::fill_canary(pattern.data() + DeviceBuffer::kCanaryBytes, DeviceBuffer::kCanaryBytes,
                     canary_seed(tensor, 1));
  DeviceBuffer patterns(pattern.size(), false);
  upload(patterns.data(), pattern.data(), pattern.size(), device_.stream);
  check(cuStreamSynchronize(device_.stream), "canaries");
  return patterns;
}

void JobRunner::write_canaries(const DeviceBuffer& buffer, CUdeviceptr patterns) {
  check(cuMemcpyDtoDAsync(buffer.base(), patterns, DeviceBuffer::kCanaryBytes, device_.stream),
        "canary");
  check(cuMemcpyDtoDAsync(buffer.data() + buffer.bytes(), patterns + DeviceBuffer::kCanaryBytes,
                          DeviceBuffer::kCanaryBytes, device_.stream),
        "canary");
}

void JobRunner::check_canaries(const DeviceBuffer& buffer, CUdeviceptr patterns, CUdeviceptr checks,
                               std::size_t tensor) {
  device_.launch_equal(buffer.base(), patterns, DeviceBuffer::kCanaryBytes,
                       TensorChecks::at(checks, tensor, 0));
  device_.launch_equal(buffer.data() + buffer.bytes(), patterns + DeviceBuffer::kCanaryBytes,
                       DeviceBuffer::kCanaryBytes, TensorChecks::at(checks, tensor, 1));
}

unsigned char JobRunner::workspace_junk(std::uint64_t salt) const {
  // Never 0: a zeroed workspace is what a kernel that forgot to initialise one would hope for.
  return static_cast<unsigned char>(mix(job_.secret ^ 0x5A5A5A5Aull, salt) % 255 + 1);
}

// Wall-clock milliseconds of each phase of the job, reported beside the device facts so a
// slow step can be explained (and a slow runner found).
void JobRunner::record_phase(const std::string& name, Clock::time_point since) {
  phases_[name] = milliseconds_since(since);
}

void JobRunner::add_to_phase(const std::string& name, double ms) {
  phases_[name] = phases_.value(name, 0.0) + ms;
}

RunReport run_job(const RunJob& job, const tasks::Registry& registry, Device& device,
                  KernelTimer& timer) {
  const tasks::Task* task = registry.find(job.task);
  if (task == nullptr || task->content_hash != job.task_hash) {
    RunReport report;
    report.id = job.id;
    report.status = StepStatus::kInfraError;
    report.message =
        task == nullptr
            ? "runner: unknown task '" + job.task + "'"
            : "runner: the task definition of " + job.task +
                  " differs from the server's (content hash " + task->content_hash.substr(0, 12) +
                  " here, " + job.task_hash.substr(0, 12) +
                  " sent): a task file changed while the server ran; restart the server";
    return report;
  }
  JobRunner runner(job, *task, device, timer);
  RunReport report = runner.run();
  if (job.model && report.status == StepStatus::kOk && !report.context_lost) {
    try {
      // Loading the model and capturing its graphs is shared work; its timing asks again.
      device.gate.shared();
      report.model = run_model_check(job, registry, device, timer);
    } catch (const CudaFailure& failure) {
      report.model = core::Value{
          {"error", std::string("the device failed during the model check: ") + failure.what()}};
      report.context_lost = failure.sticky();
    }
  }
  return report;
}

}  // namespace crucible::runner::child
