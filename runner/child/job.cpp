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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device_values.hpp"
#include "runner/child/launch_config.hpp"
#include "runner/child/library_reference.hpp"
#include "runner/judge/compare.hpp"
#include "runner/judge/task_checker.hpp"
#include "runner/judge/timing_stats.hpp"
#include "tasks/generators.hpp"
#include "tasks/roofline.hpp"

namespace crucible::runner::child {

// The job evaluates the agent's launch plan per case.
using namespace crucible::action;
namespace {

static_assert(std::is_same_v<CUdeviceptr, DeviceAddress>,
              "pack_launch_args takes the runner's device pointers as they are");

using core::StepStatus;
using core::Value;
using Clock = std::chrono::steady_clock;

// Ends the job with a status. Thrown by the measuring code, caught once in run_job.
struct StepFailure {
  StepStatus status;
  std::string message;
  bool context_lost = false;
};

[[noreturn]] void fail(StepStatus status, std::string message, bool context_lost = false) {
  throw StepFailure{status, std::move(message), context_lost};
}

// Waits for the stream, at most `timeout_ms`. A failure here is a kernel fault (the context is
// then lost); a kernel still running at the deadline is a timeout, and since only SIGKILL stops
// a spinning kernel the report says the context is lost so the server kills this process.
void sync_or_fail(CUstream stream, bool candidate, const std::string& what, double timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(timeout_ms);
  const auto relaxed = Clock::now() + std::chrono::milliseconds(2);
  CUresult rc;
  while ((rc = cuStreamQuery(stream)) == CUDA_ERROR_NOT_READY) {
    const auto now = Clock::now();
    if (now > deadline) {
      abandon_context();
      if (!candidate) {
        fail(StepStatus::kInfraError,
             "the reference did not finish " + what + " within " +
                 std::to_string(static_cast<long>(timeout_ms)) + " ms",
             true);
      }
      fail(StepStatus::kTimeout,
           "your kernel did not finish " + what + " within " +
               std::to_string(static_cast<long>(timeout_ms)) + " ms; it was killed",
           true);
    }
    if (now > relaxed) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (rc == CUDA_SUCCESS) return;
  // An error reported at a synchronize comes from a kernel that faulted: treat it as sticky.
  if (!candidate) {
    fail(StepStatus::kInfraError, "the reference failed " + what + ": " + cuda_error_text(rc),
         true);
  }
  fail(StepStatus::kRuntimeError, "your kernel faulted " + what + ": " + cuda_error_text(rc), true);
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Input values are a pure function of (generator, dtype, seed, index), so they are generated in
// parallel slices and kept: the steps of one episode share a seed and reuse them. The cache is
// bounded by bytes and forgets the least recently used entry first.
class HostValueCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<std::byte>>;
  static HostValueCache& instance() {
    static HostValueCache cache;
    return cache;
  }
  Bytes get(const tasks::GeneratorSpec& spec, core::DType dtype, std::size_t count,
            std::uint64_t seed, const std::string& key) {
    {
      std::lock_guard lock(mutex_);
      const auto it = entries_.find(key);
      if (it != entries_.end()) {
        it->second.last_use = ++clock_;
        return it->second.bytes;
      }
    }
    auto bytes = std::make_shared<std::vector<std::byte>>(count * core::dtype_size(dtype));
    const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
    // Slices start at even indices: randn draws elements in pairs.
    const std::size_t slice = ((count / threads + 1) + 1) & ~std::size_t{1};
    std::vector<std::thread> workers;
    std::vector<core::Status> results(threads);
    const std::size_t esize = core::dtype_size(dtype);
    for (std::size_t t = 0; t < threads; ++t) {
      const std::size_t first = t * slice;
      if (first >= count) break;
      const std::size_t n = std::min(slice, count - first);
      workers.emplace_back([&, t, first, n] {
        results[t] = tasks::generate_into(
            spec, dtype, seed, std::span<std::byte>(bytes->data() + first * esize, n * esize),
            first);
      });
    }
    for (auto& worker : workers) worker.join();
    for (const auto& result : results) {
      if (!result) fail(StepStatus::kInfraError, "input values: " + result.error().message);
    }
    std::lock_guard lock(mutex_);
    bytes_ += bytes->size();
    entries_[key] = Entry{bytes, ++clock_};
    while (bytes_ > kCapacityBytes && entries_.size() > 1) {
      auto oldest = entries_.begin();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->second.last_use < oldest->second.last_use) oldest = it;
      }
      bytes_ -= oldest->second.bytes->size();
      entries_.erase(oldest);
    }
    return bytes;
  }

 private:
  static constexpr std::size_t kCapacityBytes = std::size_t{4} << 30;
  struct Entry {
    Bytes bytes;
    std::uint64_t last_use = 0;
  };
  std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::size_t bytes_ = 0;
  std::uint64_t clock_ = 0;
};

// One compiled module and, for every launch of its plan, the function and parameter sizes.
struct LoadedKernel {
  CUfunction function = nullptr;
  std::vector<std::size_t> param_bytes;
  int max_threads = 0;
  int static_smem = 0;
  int registers = 0;
  int configured_smem = 0;  // dynamic shared memory limit set so far
};

class LoadedModule {
 public:
  LoadedModule(const CompiledModule& compiled, const LaunchPlan& plan, const PlanContext& context,
               bool candidate) {
    const StepStatus blame = candidate ? StepStatus::kInvalidAction : StepStatus::kInfraError;
    const std::string who = candidate ? "your kernel" : "the reference";
    CUresult rc = cuModuleLoadData(&module_, compiled.cubin.data());
    if (rc != CUDA_SUCCESS) {
      fail(candidate ? StepStatus::kLaunchError : StepStatus::kInfraError,
           "loading " + who + "'s module failed: " + cuda_error_text(rc), is_sticky(rc));
    }
    for (const auto& launch : plan.launches) {
      if (kernels_.count(launch.name_expression) > 0) continue;
      const auto lowered = compiled.lowered_names.find(launch.name_expression);
      if (lowered == compiled.lowered_names.end()) {
        fail(blame, launch.where + ": kernel '" + launch.name_expression +
                        "' was not found in the compiled source; declare it as a __global__ "
                        "function (extern \"C\" or a template instantiated by the launch)");
      }
      LoadedKernel kernel;
      rc = cuModuleGetFunction(&kernel.function, module_, lowered->second.c_str());
      if (rc != CUDA_SUCCESS) {
        fail(blame, launch.where + ": kernel '" + launch.name_expression +
                        "' is not in the module: " + cuda_error_text(rc));
      }
      for (std::size_t index = 0;; ++index) {
        std::size_t offset = 0;
        std::size_t size = 0;
        if (cuFuncGetParamInfo(kernel.function, index, &offset, &size) != CUDA_SUCCESS) break;
        kernel.param_bytes.push_back(size);
      }
      cuFuncGetAttribute(&kernel.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                         kernel.function);
      cuFuncGetAttribute(&kernel.static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function);
      cuFuncGetAttribute(&kernel.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel.function);
      kernels_.emplace(launch.name_expression, kernel);
    }
    for (const auto& launch : plan.launches) {
      if (auto ok =
              check_kernel_params(launch, kernels_.at(launch.name_expression).param_bytes, context);
          !ok) {
        fail(blame, ok.error().message);
      }
    }
  }
  ~LoadedModule() {
    if (module_ != nullptr && !context_abandoned()) cuModuleUnload(module_);
  }
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  LoadedKernel& kernel(const std::string& name_expression) { return kernels_.at(name_expression); }

 private:
  CUmodule module_ = nullptr;
  std::map<std::string, LoadedKernel> kernels_;
};

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
  std::uint64_t seed = 0;
  std::vector<std::vector<std::int64_t>> shapes;  // per task tensor
  std::vector<std::size_t> counts;
  std::vector<std::size_t> bytes;
  ConcretePlan reference;
  ConcretePlan candidate;
  tasks::RooflineCost cost;
  Value symbols_value;
};

class JobRunner {
 public:
  JobRunner(const RunJob& job, const tasks::Task& task, Device& device, KernelTimer& timer)
      : job_(job), task_(task), device_(device), timer_(timer) {
    context_ = make_plan_context(task_, static_cast<std::int64_t>(device_.max_smem_optin));
  }

  RunReport run() {
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
        started = Clock::now();
        device_.measure_bandwidth();
        record_phase("bandwidth", started);
        report.device = device_.describe();
        report.device["clocks_start"] = read_clocks(device_.ordinal);
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

 private:
  void prepare() {
    // Tags restart at 1 in every job: nothing of an earlier job's calls may still be pending.
    timer_.set_tag(0);
    (void)timer_.collect();
    if (!task_.checker.empty()) {
      checker_ = find_task_checker(task_.checker);
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
    reference_module_ = &reference_module(job_.reference, job_.reference_plan.plan);
    candidate_module_ =
        std::make_unique<LoadedModule>(job_.candidate, job_.candidate_plan.plan, context_, true);
    for (std::size_t i = 0; i < task_.cases.size(); ++i) {
      const auto& c = task_.cases[i];
      CaseSetup setup;
      setup.c = &c;
      setup.index = i;
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
  void prepare_library() {
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

  Side reference_side() {
    return Side{&job_.reference_plan.plan, reference_module_, false, library_.get()};
  }

  // The reference's module, loaded once per runner and task: kept across jobs while the
  // server sends the same cubin (a new one, after a server restart with an edited reference,
  // replaces it).
  LoadedModule& reference_module(const CompiledModule& compiled, const LaunchPlan& plan) {
    struct Loaded {
      std::string cubin;
      std::unique_ptr<LoadedModule> module;
    };
    static std::map<std::string, Loaded> loaded;
    auto& entry = loaded[task_.id];
    if (!entry.module || entry.cubin != compiled.cubin) {
      entry.module.reset();
      entry.module = std::make_unique<LoadedModule>(compiled, plan, context_, false);
      entry.cubin = compiled.cubin;
    }
    return *entry.module;
  }

  // ---- launching -------------------------------------------------------------------------

  void launch(const Side& side, const ConcretePlan& concrete, const CaseSetup& setup,
              const std::vector<CUdeviceptr>& tensors, const std::vector<CUdeviceptr>& workspaces) {
    if (side.library != nullptr) {
      try {
        side.library->launch(setup.index, tensors, device_.stream);
      } catch (const CudaFailure&) {
        throw;
      } catch (const std::exception& e) {
        // The library reports a fault left by earlier work on the stream as its own failure: a
        // candidate's call may precede this one unsynchronised. Waiting on the stream blames
        // (and, when the context is lost, reports) that fault where it belongs.
        sync_or_fail(device_.stream, true, "before a reference library call",
                     job_.kernel_timeout_ms);
        fail(StepStatus::kInfraError, std::string("reference library: ") + e.what());
      }
      return;
    }
    for (const auto& step : concrete.launches) {
      const Launch& launch = side.plan->launches[step.launch];
      LoadedKernel& kernel = side.module->kernel(launch.name_expression);
      const int threads = static_cast<int>(step.block[0] * step.block[1] * step.block[2]);
      const std::string who = side.candidate ? "" : "reference ";
      const StepStatus blame = side.candidate ? StepStatus::kLaunchError : StepStatus::kInfraError;
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
      if (static_cast<int>(step.smem_bytes) > kernel.configured_smem &&
          step.smem_bytes > 48 * 1024) {
        const CUresult rc =
            cuFuncSetAttribute(kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(step.smem_bytes));
        if (rc != CUDA_SUCCESS) {
          fail(blame, who + launch.where + ": cannot allow " + std::to_string(step.smem_bytes) +
                          " bytes of dynamic shared memory: " + cuda_error_text(rc));
        }
        kernel.configured_smem = static_cast<int>(step.smem_bytes);
      }
      auto storage =
          pack_launch_args(launch, task_, *setup.c, kernel.param_bytes, tensors, workspaces);
      if (!storage) {
        fail(side.candidate ? StepStatus::kInvalidAction : StepStatus::kInfraError,
             storage.error().message);
      }
      std::vector<void*> params(storage->size());
      for (std::size_t a = 0; a < params.size(); ++a) params[a] = (*storage)[a].data();
      CUlaunchAttribute attribute{};
      const CUlaunchConfig config = launch_config(step, device_.stream, attribute);
      if (step.has_cluster && step.cluster[0] * step.cluster[1] * step.cluster[2] > 8) {
        cuFuncSetAttribute(kernel.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
      }
      const CUresult rc = cuLaunchKernelEx(&config, kernel.function, params.data(), nullptr);
      if (rc != CUDA_SUCCESS) {
        const bool lost = is_sticky(rc);
        if (!side.candidate) {
          fail(StepStatus::kInfraError, "reference launch failed: " + cuda_error_text(rc), lost);
        }
        fail(lost ? StepStatus::kRuntimeError : StepStatus::kLaunchError,
             launch.where + ": launching '" + launch.kernel + "' with grid (" +
                 std::to_string(step.grid[0]) + ", " + std::to_string(step.grid[1]) + ", " +
                 std::to_string(step.grid[2]) + "), block (" + std::to_string(step.block[0]) +
                 ", " + std::to_string(step.block[1]) + ", " + std::to_string(step.block[2]) +
                 "), " + std::to_string(step.smem_bytes) +
                 " bytes of shared memory failed: " + cuda_error_text(rc),
             lost);
      }
    }
  }

  // ---- correctness -----------------------------------------------------------------------

  static void upload(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) {
    if (bytes > 0) check(cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
  }
  static void download(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
    if (bytes > 0) check(cuMemcpyDtoHAsync(dst, src, bytes, stream), "cuMemcpyDtoHAsync");
  }

  std::uint64_t canary_seed(std::size_t tensor, int side) const {
    return mix(job_.secret, tensor * 2 + static_cast<std::size_t>(side));
  }

  // The verdict on every out/inout tensor of one call: the task's checker when it names one
  // (all outputs together, with the call's inputs), else compare_outputs per output. The
  // vectors are indexed by task tensor; `inputs` may hold nullptr where no checker needs it.
  using Views = std::vector<const std::byte*>;
  static Views as_views(const std::vector<std::byte*>& pointers) {
    return Views(pointers.begin(), pointers.end());
  }

  std::vector<CompareReport> judge_outputs(const CaseSetup& setup, const Views& inputs,
                                           const Views& candidate, const Views& reference,
                                           int variant, bool reveal) {
    std::vector<CompareReport> reports;
    std::vector<HostTensorView> input_views, candidate_views, reference_views;
    std::vector<Tolerance> tolerances;
    for (std::size_t t = 0; t < task_.tensors.size(); ++t) {
      const auto& tensor = task_.tensors[t];
      input_views.push_back(
          HostTensorView{tensor.name, tensor.dtype, inputs[t], setup.counts[t], setup.shapes[t]});
      if (!tasks::is_output(tensor.role)) continue;
      const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
      if (checker_ == nullptr) {
        reports.push_back(compare_outputs(tensor.dtype, candidate[t], reference[t], setup.counts[t],
                                          setup.shapes[t], Tolerance{tol.atol, tol.rtol}, variant,
                                          reveal, tensor.name));
        continue;
      }
      candidate_views.push_back(HostTensorView{tensor.name, tensor.dtype, candidate[t],
                                               setup.counts[t], setup.shapes[t]});
      reference_views.push_back(HostTensorView{tensor.name, tensor.dtype, reference[t],
                                               setup.counts[t], setup.shapes[t]});
      tolerances.push_back(Tolerance{tol.atol, tol.rtol});
    }
    if (checker_ == nullptr) return reports;
    TaskCheckRequest request;
    request.inputs = input_views;
    request.candidate = candidate_views;
    request.reference = reference_views;
    request.tolerances = tolerances;
    request.scalars = &setup.c->scalars;
    request.poison_variant = variant;
    request.reveal_values = reveal;
    reports = checker_->check(request);
    if (reports.size() != candidate_views.size()) {
      fail(StepStatus::kInfraError, "the '" + task_.checker + "' checker returned " +
                                        std::to_string(reports.size()) + " reports for " +
                                        std::to_string(candidate_views.size()) + " outputs");
    }
    return reports;
  }

  // Writes the poison of `variant` into every element of a device buffer: a memset for 1-, 2-
  // and 4-byte elements, a host-filled copy for 8-byte ones.
  void poison_device(CUdeviceptr dst, core::DType dtype, std::size_t count, int variant) {
    if (count == 0) return;
    const std::uint64_t bits = poison_pattern(dtype, variant);
    const CUstream stream = device_.stream;
    switch (core::dtype_size(dtype)) {
      case 1:
        check(cuMemsetD8Async(dst, static_cast<unsigned char>(bits), count, stream), "poison");
        return;
      case 2:
        check(cuMemsetD16Async(dst, static_cast<unsigned short>(bits), count, stream), "poison");
        return;
      case 4:
        check(cuMemsetD32Async(dst, static_cast<unsigned int>(bits), count, stream), "poison");
        return;
      default: {
        std::vector<std::byte> host(count * core::dtype_size(dtype));
        fill_poison(dtype, host.data(), count, variant);
        upload(dst, host.data(), host.size(), stream);
        check(cuStreamSynchronize(stream), "poison upload");
      }
    }
  }

  // The device memory of one case, shared by its two runs: every tensor with canaries, and a
  // pristine copy of each input from which the working buffers are restored before each side.
  struct CaseBuffers {
    std::vector<DeviceBuffer> tensors;
    std::vector<DeviceBuffer> pristine;
    std::vector<CUdeviceptr> pointers;
  };

  // Fills `out` (device memory of `count` elements) with the values of input `tensor` of case
  // `c` drawn with `seed`: on the device where the generator allows (device_values.hpp, the host
  // generators' bytes), else from the host cache, uploaded. Returns the host copy when one was
  // made, else nullptr.
  HostValueCache::Bytes fill_input(const tasks::Case& c, const tasks::TensorSpec& tensor,
                                   std::uint64_t seed, std::size_t count, CUdeviceptr out) {
    const auto& spec = c.values.at(tensor.name);
    if (generates_on_device(spec, tensor.dtype)) {
      generate_on_device(device_, spec, tensor.dtype, seed, 0, count, out);
      return nullptr;
    }
    // Seedless values (captured, rope_cache, long lists) are the same for every draw and
    // episode: one cache entry serves them all.
    const std::string key = task_.id + "|" + c.name + "|" + tensor.name + "|" +
                            (tasks::uses_seed(spec) ? std::to_string(seed) : "-") + "|" +
                            std::to_string(count);
    auto values = HostValueCache::instance().get(spec, tensor.dtype, count, seed, key);
    upload(out, values->data(), values->size(), device_.stream);
    return values;
  }

  // Runs reference then candidate on one draw of a case; records the verdict in case_reports_.
  Value check_case(const CaseSetup& setup, int draw, CaseBuffers& buffers) {
    const auto& c = *setup.c;
    const CUstream stream = device_.stream;
    const std::size_t n = task_.tensors.size();
    // Inputs: made on the device where the generator allows (device_values.hpp, the same bytes
    // as the host's) and brought to the host for the read-only check and the checker; else
    // made on the host and uploaded.
    std::vector<HostValueCache::Bytes> input_values(n);
    std::vector<const std::byte*> input_bytes(n, nullptr);
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      if (!tasks::is_input(tensor.role)) continue;
      const std::uint64_t seed =
          tasks::tensor_seed(setup.seed, tensor.name, static_cast<std::uint64_t>(draw));
      input_values[t] = fill_input(c, tensor, seed, setup.counts[t], buffers.pristine[t].data());
      if (input_values[t] != nullptr) {
        input_bytes[t] = input_values[t]->data();
        continue;
      }
      std::byte* host = device_.staging("input:" + std::to_string(t), setup.bytes[t]);
      download(host, buffers.pristine[t].data(), setup.bytes[t], stream);
      input_bytes[t] = host;
    }
    check(cuStreamSynchronize(stream), "inputs");
    auto inputs = [&](std::size_t t) { return input_bytes[t]; };
    const std::vector<CUdeviceptr>& pointers = buffers.pointers;
    std::vector<std::byte> canary(DeviceBuffer::kCanaryBytes);
    auto write_canaries = [&] {
      for (std::size_t t = 0; t < n; ++t) {
        fill_canary(canary.data(), canary.size(), canary_seed(t, 0));
        upload(buffers.tensors[t].base(), canary.data(), canary.size(), stream);
        fill_canary(canary.data(), canary.size(), canary_seed(t, 1));
        upload(buffers.tensors[t].data() + buffers.tensors[t].bytes(), canary.data(), canary.size(),
               stream);
      }
    };
    auto write_inputs_and_poison = [&](int variant) {
      for (std::size_t t = 0; t < n; ++t) {
        const auto& tensor = task_.tensors[t];
        if (tasks::is_input(tensor.role)) {
          if (setup.bytes[t] > 0) {
            check(
                cuMemcpyDtoDAsync(pointers[t], buffers.pristine[t].data(), setup.bytes[t], stream),
                "restore inputs");
          }
        } else {
          poison_device(pointers[t], tensor.dtype, setup.counts[t], variant);
        }
      }
    };

    // Reference on pristine inputs; its outputs go to the host, its workspaces are scrubbed.
    std::vector<std::byte*> expected(n, nullptr);
    {
      std::vector<DeviceBuffer> workspace;
      std::vector<CUdeviceptr> workspace_ptrs;
      for (const auto bytes : setup.reference.workspace_bytes) {
        workspace.emplace_back(bytes, false);
        workspace_ptrs.push_back(workspace.back().data());
      }
      write_canaries();
      write_inputs_and_poison(draw);
      launch(reference_side(), setup.reference, setup, pointers, workspace_ptrs);
      sync_or_fail(stream, false, "on case " + c.name, job_.kernel_timeout_ms);
      for (std::size_t t = 0; t < n; ++t) {
        if (!tasks::is_output(task_.tensors[t].role)) continue;
        expected[t] = device_.staging("expected:" + std::to_string(t), setup.bytes[t]);
        download(expected[t], pointers[t], setup.bytes[t], stream);
      }
      for (auto& buffer : workspace) {
        check(cuMemsetD8Async(buffer.data(), 0, buffer.bytes(), stream), "scrub");
      }
      if (library_ != nullptr) library_->scrub(stream);
      check(cuStreamSynchronize(stream), "reference outputs");
    }

    // Candidate on the same inputs, outputs poisoned again, workspaces full of junk.
    std::vector<DeviceBuffer> workspace;
    std::vector<CUdeviceptr> workspace_ptrs;
    for (const auto bytes : setup.candidate.workspace_bytes) {
      workspace.emplace_back(bytes, false);
      check(cuMemsetD8Async(workspace.back().data(), 0xA5, bytes, stream), "workspace fill");
      workspace_ptrs.push_back(workspace.back().data());
    }
    write_canaries();
    write_inputs_and_poison(draw);
    check(cuStreamSynchronize(stream), "inputs");
    launch(Side{&job_.candidate_plan.plan, candidate_module_.get(), true}, setup.candidate, setup,
           pointers, workspace_ptrs);
    sync_or_fail(stream, true, "on case " + std::string(c.hidden ? "(hidden) " : "") + c.name,
                 job_.kernel_timeout_ms);

    Value verdict{{"case", c.name},
                  {"hidden", c.hidden},
                  {"run", draw + 1},
                  {"symbols", setup.symbols_value}};
    Value outputs = Value::array();
    std::vector<std::string> problems;
    std::vector<std::byte*> whole(n, nullptr);
    for (std::size_t t = 0; t < n; ++t) {
      whole[t] = device_.staging("whole:" + std::to_string(t), buffers.tensors[t].total_bytes());
      download(whole[t], buffers.tensors[t].base(), buffers.tensors[t].total_bytes(), stream);
    }
    check(cuStreamSynchronize(stream), "download");
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      std::size_t bad = 0;
      if (!check_canary(whole[t], DeviceBuffer::kCanaryBytes, canary_seed(t, 0), &bad)) {
        problems.push_back("wrote " + std::to_string(DeviceBuffer::kCanaryBytes - bad) +
                           " bytes before the start of '" + tensor.name + "'");
      }
      const std::byte* payload = whole[t] + DeviceBuffer::kCanaryBytes;
      if (!check_canary(payload + setup.bytes[t], DeviceBuffer::kCanaryBytes, canary_seed(t, 1),
                        &bad)) {
        problems.push_back("wrote past the end of '" + tensor.name + "' (byte " +
                           std::to_string(bad) + " after its last element)");
      }
      if (tensor.role == tasks::Role::kIn) {
        const auto diff = compare_bytes(payload, inputs(t), setup.bytes[t]);
        if (!diff.equal) {
          problems.push_back("modified the read-only input '" + tensor.name + "' (" +
                             std::to_string(diff.diff_bytes) + " bytes changed, first at element " +
                             std::to_string(diff.first_diff / core::dtype_size(tensor.dtype)) +
                             ")");
        }
      }
    }
    Views payloads(n, nullptr), before(n, nullptr);
    std::vector<std::vector<std::byte>> poisoned(n);
    for (std::size_t t = 0; t < n; ++t) {
      payloads[t] = whole[t] + DeviceBuffer::kCanaryBytes;
      if (tasks::is_input(task_.tensors[t].role)) {
        before[t] = inputs(t);
      } else if (checker_ != nullptr) {  // a checker sees what the call started from
        poisoned[t].resize(setup.bytes[t]);
        fill_poison(task_.tensors[t].dtype, poisoned[t].data(), setup.counts[t], draw);
        before[t] = poisoned[t].data();
      }
    }
    for (const auto& report :
         judge_outputs(setup, before, payloads, as_views(expected), draw, !c.hidden)) {
      if (report.reference_invalid()) {
        fail(StepStatus::kInfraError, "the reference produced NaN on case " + c.name);
      }
      if (!report.pass) problems.push_back(report.summary);
      outputs.push_back(report.to_value());
    }
    verdict["outputs"] = std::move(outputs);
    verdict["pass"] = problems.empty();
    if (!problems.empty()) {
      std::string text;
      for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
      verdict["problems"] = problems;
      if (failed_case_.empty()) {
        failed_status_ = StepStatus::kIncorrect;
        failed_case_ = std::string(c.hidden ? "hidden case " : "case ") + c.name + " (run " +
                       std::to_string(draw + 1) + "): " + text;
      }
    }
    return verdict;
  }

  Value check_all_cases() {
    for (const auto& setup : cases_) {
      const auto started = Clock::now();
      CaseBuffers buffers;
      for (std::size_t t = 0; t < task_.tensors.size(); ++t) {
        buffers.tensors.emplace_back(setup.bytes[t], true);
        buffers.pointers.push_back(buffers.tensors.back().data());
        buffers.pristine.emplace_back(tasks::is_input(task_.tensors[t].role)
                                          ? DeviceBuffer(setup.bytes[t], false)
                                          : DeviceBuffer());
      }
      for (int draw = 0; draw < 2; ++draw) {
        case_reports_.push_back(check_case(setup, draw, buffers));
        if (!failed_case_.empty()) break;
      }
      record_phase("correctness " + setup.c->name, started);
      if (!failed_case_.empty()) break;
    }
    return correctness_value();
  }

  // Wall-clock milliseconds of each phase of the job, reported beside the device facts so a
  // slow step can be explained (and a slow runner found).
  void record_phase(const std::string& name, Clock::time_point since) {
    phases_[name] = std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  }

  Value correctness_value() const {
    std::size_t passed = 0;
    for (const auto& r : case_reports_) passed += r["pass"].get<bool>() ? 1 : 0;
    return Value{{"runs", case_reports_},
                 {"passed", passed},
                 {"checked", case_reports_.size()},
                 {"total", cases_.size() * 2}};
  }

  // ---- timing ----------------------------------------------------------------------------

  struct Slot {
    std::vector<DeviceBuffer> tensors;
    std::vector<DeviceBuffer> reference_ws;
    std::vector<DeviceBuffer> candidate_ws;
    std::vector<CUdeviceptr> tensor_ptrs, reference_ws_ptrs, candidate_ws_ptrs;
  };

  Value time_case(const CaseSetup& setup) {
    const auto setup_started = Clock::now();
    const auto& c = *setup.c;
    const CUstream stream = device_.stream;
    const std::size_t n = task_.tensors.size();
    std::size_t slot_bytes = 0;
    for (const auto b : setup.bytes) slot_bytes += b;
    for (const auto b : setup.reference.workspace_bytes) slot_bytes += b;
    for (const auto b : setup.candidate.workspace_bytes) slot_bytes += b;
    const std::size_t budget = std::size_t{4} << 30;
    const std::size_t slots_count =
        std::clamp<std::size_t>(budget / std::max<std::size_t>(slot_bytes, 1), 2, 8);

    // Value pools: each input's values for call i are a window of its pool starting at a
    // different offset, so every timed call sees values no earlier call saw. A stream of
    // bounded length (a permutation: distinct slots or block ids) extends only as far as it
    // goes (no further at all when the case uses every value).
    constexpr std::size_t kPoolExtra = 1u << 14;  // distinct windows
    constexpr std::size_t kStride = 977;          // prime, coprime to kPoolExtra + 1 = 5 * 29 * 113
    std::vector<DeviceBuffer> pools(n);
    std::vector<DeviceBuffer> poison(n);
    std::vector<std::size_t> pool_extra(n, 0);
    std::vector<HostValueCache::Bytes> uploaded(n);  // host copies alive until the uploads end
    for (std::size_t t = 0; t < n; ++t) {
      const auto& tensor = task_.tensors[t];
      if (tasks::is_input(tensor.role)) {
        const std::uint64_t seed = tasks::tensor_seed(setup.seed, tensor.name, 2);
        const auto& spec = c.values.at(tensor.name);
        pool_extra[t] = kPoolExtra;
        if (const auto length = tasks::stream_length(spec)) {
          const std::uint64_t used = setup.counts[t];
          pool_extra[t] = std::min<std::size_t>(kPoolExtra, *length > used ? *length - used : 0);
        }
        const std::size_t count = setup.counts[t] + pool_extra[t];
        pools[t] = DeviceBuffer(count * core::dtype_size(tensor.dtype), false);
        uploaded[t] = fill_input(c, tensor, seed, count, pools[t].data());
      } else {
        poison[t] = DeviceBuffer(setup.bytes[t], false);
        poison_device(poison[t].data(), tensor.dtype, setup.counts[t], 0);
      }
    }
    check(cuStreamSynchronize(stream), "pool upload");
    std::vector<Slot> slots(slots_count);
    for (auto& slot : slots) {
      for (std::size_t t = 0; t < n; ++t) {
        slot.tensors.emplace_back(setup.bytes[t], false);
        slot.tensor_ptrs.push_back(slot.tensors.back().data());
      }
      for (const auto b : setup.reference.workspace_bytes) {
        slot.reference_ws.emplace_back(b, false);
        slot.reference_ws_ptrs.push_back(slot.reference_ws.back().data());
      }
      for (const auto b : setup.candidate.workspace_bytes) {
        slot.candidate_ws.emplace_back(b, false);
        slot.candidate_ws_ptrs.push_back(slot.candidate_ws.back().data());
        // Fresh device memory may hold an earlier job's data: workspaces start as junk.
        check(cuMemsetD8Async(slot.candidate_ws.back().data(), 0xA5, b, stream), "workspace fill");
      }
    }
    auto prepare_call = [&](const Slot& slot, std::size_t call) {
      for (std::size_t t = 0; t < n; ++t) {
        const auto& tensor = task_.tensors[t];
        const std::size_t esize = core::dtype_size(tensor.dtype);
        const std::size_t offset = (call * kStride) % (pool_extra[t] + 1);
        const CUdeviceptr source =
            tasks::is_input(tensor.role) ? pools[t].data() + offset * esize : poison[t].data();
        if (setup.bytes[t] > 0) {
          check(cuMemcpyDtoDAsync(slot.tensor_ptrs[t], source, setup.bytes[t], stream), "refresh");
        }
      }
      device_.flush_l2(static_cast<std::uint32_t>(call));
    };

    std::mt19937_64 chooser(mix(job_.secret, setup.index));
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    bool first_candidate_call = true;

    const Side reference = reference_side();
    const Side candidate{&job_.candidate_plan.plan, candidate_module_.get(), true};
    const std::size_t candidate_launches = setup.candidate.launches.size();
    const std::size_t reference_launches = library_ != nullptr
                                               ? library_->kernels_per_call(setup.index)
                                               : setup.reference.launches.size();

    struct Pending {
      bool is_candidate;
      bool warmup;
    };
    std::map<std::uint64_t, Pending> pending;
    std::vector<double> reference_ns, candidate_ns;
    std::size_t checked = 0, incomplete = 0, call = 0;
    const auto started = Clock::now();
    const auto cap = std::chrono::duration<double, std::milli>(job_.timing.time_cap_ms);
    const std::size_t warmup = job_.timing.warmup_calls;
    StoppingRule rule;
    rule.target_rel_halfwidth = job_.timing.target_rel_ci;
    rule.min_samples = job_.timing.min_samples;
    rule.max_samples = job_.timing.max_samples;
    const auto order = interleaved_order(job_.timing.max_samples + warmup);
    // Checked calls: the candidate's outputs kept aside and the device check's verdicts (three
    // u64 per tensor); host copies are pinned only when a check fails.
    std::vector<DeviceBuffer> kept(n);
    for (std::size_t t = 0; t < n; ++t) {
      if (tasks::is_output(task_.tensors[t].role)) kept[t] = DeviceBuffer(setup.bytes[t], false);
    }
    DeviceBuffer check_results(24 * n, false);
    std::byte* check_host = device_.staging("check results", 24 * n);
    record_phase("timing setup " + c.name, setup_started);

    auto collect = [&] {
      // 32 calls of both kernels may be in flight.
      sync_or_fail(stream, true, "in timed calls of case " + c.name, 64 * job_.kernel_timeout_ms);
      for (const auto& [tag, span] : timer_.collect()) {
        const auto it = pending.find(tag);
        if (it == pending.end()) continue;
        const std::size_t expected_kernels =
            it->second.is_candidate ? candidate_launches : reference_launches;
        if (span.operations() != expected_kernels) {
          ++incomplete;
        } else if (!it->second.warmup) {
          (it->second.is_candidate ? candidate_ns : reference_ns).push_back(span.duration_ns());
        }
        pending.erase(it);
      }
    };

    for (std::size_t i = 0; i < order.size(); ++i) {
      const bool is_candidate = order[i] == 1;
      const bool is_warmup = i < 2 * warmup;
      const Slot& slot = slots[call % slots.size()];
      const std::size_t this_call = call++;
      prepare_call(slot, this_call);
      const std::uint64_t tag = next_tag_++;
      pending[tag] = Pending{is_candidate, is_warmup};
      {
        const TagScope scope(timer_, tag);
        launch(is_candidate ? candidate : reference,
               is_candidate ? setup.candidate : setup.reference, setup, slot.tensor_ptrs,
               is_candidate ? slot.candidate_ws_ptrs : slot.reference_ws_ptrs);
      }
      // The first timed call, then a share drawn from the secret: a kernel cannot tell which
      // of its calls are checked, so one that misbehaves on a fraction f of calls escapes
      // n checks with probability (1 - f)^n.
      const bool check_this = is_candidate && !is_warmup &&
                              (first_candidate_call || coin(chooser) < job_.timing.check_fraction);
      if (is_candidate && !is_warmup) first_candidate_call = false;
      if (check_this) {
        // The candidate's outputs are set aside on the device, the reference runs on the same
        // inputs, and a runner kernel compares the two; only a failure brings both to the
        // host, for compare_outputs' full report. One synchronisation per check, and no code
        // of the candidate runs between the comparison and the read of its result.
        for (std::size_t t = 0; t < n; ++t) {
          if (!tasks::is_output(task_.tensors[t].role) || setup.bytes[t] == 0) continue;
          check(cuMemcpyDtoDAsync(kept[t].data(), slot.tensor_ptrs[t], setup.bytes[t], stream),
                "keep outputs");
        }
        prepare_call(slot, this_call);
        launch(reference, setup.reference, setup, slot.tensor_ptrs, slot.reference_ws_ptrs);
        check(cuMemsetD8Async(check_results.data(), 0, check_results.bytes(), stream),
              "check results");
        for (std::size_t t = 0; t < n; ++t) {
          const auto& tensor = task_.tensors[t];
          if (!tasks::is_output(tensor.role)) continue;
          const tasks::Tolerance tol = tensor.tolerance.value_or(tasks::Tolerance{});
          device_.launch_check(kept[t].data(), slot.tensor_ptrs[t], setup.counts[t], tensor.dtype,
                               tol.atol, tol.rtol, check_results.data() + 24 * t);
        }
        download(check_host, check_results.data(), check_results.bytes(), stream);
        sync_or_fail(stream, true, "in timed call " + std::to_string(this_call),
                     2 * job_.kernel_timeout_ms);
        bool suspect = false;
        for (std::size_t t = 0; t < n; ++t) {
          if (!tasks::is_output(task_.tensors[t].role)) continue;
          std::uint64_t verdict[3];
          std::memcpy(verdict, check_host + 24 * t, sizeof verdict);
          const bool all_zero = setup.counts[t] > 0 && verdict[1] == 0 && verdict[2] != 0;
          suspect |= verdict[0] != 0 || all_zero;
        }
        if (suspect) {
          // Both sides' outputs to the host, and (for a task checker) the call's inputs, which
          // preparing the call again restores; then the host's full verdict decides.
          std::vector<std::byte*> got(n, nullptr), want(n, nullptr);
          for (std::size_t t = 0; t < n; ++t) {
            if (!tasks::is_output(task_.tensors[t].role)) continue;
            got[t] = device_.staging("got:" + std::to_string(t), setup.bytes[t]);
            want[t] = device_.staging("want:" + std::to_string(t), setup.bytes[t]);
            download(got[t], kept[t].data(), setup.bytes[t], stream);
            download(want[t], slot.tensor_ptrs[t], setup.bytes[t], stream);
          }
          std::vector<std::byte*> call_inputs(n, nullptr);
          if (checker_ != nullptr) {
            prepare_call(slot, this_call);
            for (std::size_t t = 0; t < n; ++t) {
              call_inputs[t] = device_.staging("call input:" + std::to_string(t), setup.bytes[t]);
              download(call_inputs[t], slot.tensor_ptrs[t], setup.bytes[t], stream);
            }
          }
          check(cuStreamSynchronize(stream), "download");
          const auto reports =
              judge_outputs(setup, as_views(call_inputs), as_views(got), as_views(want), 0, true);
          for (const auto& report : reports) {
            if (report.reference_invalid()) {
              fail(StepStatus::kInfraError,
                   "the reference produced invalid output in a timed call of case " + c.name);
            }
            if (!report.pass) {
              fail(StepStatus::kIncorrect,
                   "case " + c.name + ", timed call " + std::to_string(this_call) +
                       ": the output was wrong although the correctness runs passed: " +
                       report.summary);
            }
          }
        }
        ++checked;
      }
      if (i % 32 == 31 || i + 1 == order.size()) {
        collect();
        const bool enough = should_stop(reference_ns, rule) && should_stop(candidate_ns, rule);
        const bool out_of_time = Clock::now() - started > cap;
        if (enough || out_of_time) break;
      }
    }
    collect();
    record_phase("timing " + c.name, started);
    if (timer_.dropped_records() > 0) {
      fail(StepStatus::kInfraError, "CUPTI dropped activity records; the timing is void");
    }
    if (reference_ns.empty() || candidate_ns.empty()) {
      fail(StepStatus::kInfraError, "no complete timed call was recorded for case " + c.name);
    }
    const auto reference_summary = summarize(reference_ns);
    const auto candidate_summary = summarize(candidate_ns);
    const double speedup = reference_summary.median_ns / candidate_summary.median_ns;
    // A floor must be optimistic: the highest bandwidth the card could reach (30 % above the
    // measured copy rate, never below the datasheet figure) and dense tensor-core peak.
    tasks::GpuPeak peak = tasks::kH200Peak;
    peak.memory_bytes_per_s = std::max(peak.memory_bytes_per_s, device_.copy_bandwidth_bps * 1.3);
    const double floor_ns = tasks::roofline_floor_ns(setup.cost, peak);
    if (candidate_summary.median_ns < floor_ns && hack_.empty()) {
      hack_ = "case " + c.name + ": your kernel's median time " +
              std::to_string(candidate_summary.median_ns) + " ns is below the roofline floor " +
              std::to_string(floor_ns) + " ns (" + std::to_string(setup.cost.bytes) + " bytes, " +
              std::to_string(setup.cost.flops) +
              " FLOPs): physically impossible, so the timing was not honest";
    }
    Value timed{{"case", c.name},
                {"weight", c.weight},
                {"symbols", setup.symbols_value},
                {"candidate", candidate_summary.to_value()},
                {"reference", reference_summary.to_value()},
                {"speedup", speedup},
                {"floor_ns", floor_ns},
                {"checked_calls", checked},
                {"incomplete_calls", incomplete},
                {"slots", slots_count}};
    if (library_ != nullptr) timed["reference_library"] = library_->describe(setup.index);
    return timed;
  }

  Value time_visible_cases() {
    Value cases = Value::array();
    std::vector<std::pair<double, double>> weighted;
    for (const auto& setup : cases_) {
      if (setup.c->hidden) continue;
      Value timed = time_case(setup);
      weighted.emplace_back(timed["speedup"].get<double>(), setup.c->weight);
      cases.push_back(std::move(timed));
    }
    const auto geomean = weighted_geomean(weighted);
    if (geomean) speedup_ = *geomean;
    Value out{{"cases", std::move(cases)}, {"method", "CUPTI kernel activity, median"}};
    if (geomean) out["speedup"] = *geomean;
    return out;
  }

  const RunJob& job_;
  const tasks::Task& task_;
  Device& device_;
  KernelTimer& timer_;
  PlanContext context_;
  LoadedModule* reference_module_ = nullptr;
  std::unique_ptr<LoadedModule> candidate_module_;
  std::unique_ptr<LibraryReference> library_;
  std::vector<CaseSetup> cases_;
  std::vector<Value> case_reports_;
  std::string failed_case_;
  StepStatus failed_status_ = StepStatus::kIncorrect;
  std::string hack_;
  std::optional<double> speedup_;
  std::uint64_t next_tag_ = 1;
  Value phases_ = Value::object();
  const TaskChecker* checker_ = nullptr;
};

}  // namespace

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
  return runner.run();
}

}  // namespace crucible::runner::child
