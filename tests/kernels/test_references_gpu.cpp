// On a GPU: every task's reference kernel, and its example solution where there is one, agrees
// with the task's CPU float64 oracle (kernels/oracles/) on the task's cases, under the task's
// tolerances. Kernels are launched the way the runner launches them: the launch plan of their
// `@launch` directives, evaluated per case, arguments packed by action::pack_launch_args.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"
#include "runner/child/launch_config.hpp"
#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/kernels/gpu_driver.hpp"
#include "tests/kernels/nvrtc_support.hpp"

using namespace crucible;
using namespace crucible::kernels_test;

namespace {

namespace fs = std::filesystem;

// Cases whose tensors hold more elements than this are left to the runner's own suites (the
// float64 oracle is single-threaded); the test prints how many it left out.
constexpr std::size_t kMaxCaseElements = std::size_t{24} << 20;

struct LoadedFunction {
  CUfunction function = nullptr;
  std::vector<std::size_t> param_bytes;
};

struct LoadedSource {
  CUmodule module = nullptr;
  action::LaunchPlan plan;
  std::map<std::string, LoadedFunction> functions;  // by name expression
};

LoadedSource load_source(const fs::path& path, const action::PlanContext& context) {
  const Driver& d = driver();
  const std::string source = read_text(path);
  auto plan = action::parse_launch_plan(source, context);
  INFO(path.string());
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  std::vector<std::string> names;
  for (const auto& launch : plan->launches) {
    if (std::find(names.begin(), names.end(), launch.name_expression) == names.end()) {
      names.push_back(launch.name_expression);
    }
  }
  const Compiled compiled = compile(source, path.filename().string(), names);
  INFO(compiled.log);
  REQUIRE(compiled.ok);
  LoadedSource loaded;
  loaded.plan = std::move(plan).value();
  CU_REQUIRE(d.module_load(&loaded.module, compiled.cubin.data()));
  for (std::size_t i = 0; i < names.size(); ++i) {
    LoadedFunction function;
    CU_REQUIRE(d.get_function(&function.function, loaded.module, compiled.lowered[i].c_str()));
    for (std::size_t p = 0;; ++p) {
      std::size_t offset = 0, size = 0;
      if (d.param_info(function.function, p, &offset, &size) != CUDA_SUCCESS) break;
      function.param_bytes.push_back(size);
    }
    loaded.functions.emplace(names[i], std::move(function));
  }
  return loaded;
}

struct OutputVerdict {
  std::string name;
  std::size_t count = 0;
  std::size_t mismatches = 0;
  std::size_t first = 0;
  double first_got = 0.0, first_expected = 0.0;
  double max_abs_error = 0.0;
};

// Runs `source` on one case and compares every out/inout tensor with the oracle's values.
std::vector<OutputVerdict> run_case(const tasks::Task& task, const tasks::Case& c,
                                    const LoadedSource& source, const action::PlanContext& context,
                                    std::uint64_t seed) {
  const Driver& d = driver();
  auto inputs = tasks::case_inputs(task, c, seed);
  REQUIRE_MESSAGE(inputs.ok(), inputs.error().message);
  auto oracle = tasks::run_oracle(task, c, *inputs);
  REQUIRE_MESSAGE(oracle.ok(), oracle.error().message);
  std::vector<CUdeviceptr> buffers;
  std::vector<std::size_t> counts, sizes;
  // What each tensor holds before the call: the case's inputs, the poison in outputs.
  std::vector<std::vector<std::byte>> initial;
  for (const auto& spec : task.tensors) {
    const auto count = static_cast<std::size_t>(tasks::element_count(spec, c).value());
    const std::size_t bytes = count * core::dtype_size(spec.dtype);
    std::vector<std::byte> host(bytes);
    if (tasks::is_input(spec.role)) {
      host = inputs->at(spec.name);
    } else {
      judge::fill_poison(spec.dtype, host.data(), count, 0);
    }
    CUdeviceptr pointer = 0;
    CU_REQUIRE(d.alloc(&pointer, std::max<std::size_t>(bytes, 256)));
    if (bytes > 0) CU_REQUIRE(d.to_device(pointer, host.data(), bytes));
    initial.push_back(std::move(host));
    buffers.push_back(pointer);
    counts.push_back(count);
    sizes.push_back(bytes);
  }
  auto concrete = action::evaluate_plan(source.plan, c.symbols, context);
  REQUIRE_MESSAGE(concrete.ok(), concrete.error().message);
  std::vector<CUdeviceptr> workspaces;
  for (const auto bytes : concrete->workspace_bytes) {
    CUdeviceptr pointer = 0;
    CU_REQUIRE(d.alloc(&pointer, std::max<std::uint64_t>(bytes, 256)));
    CU_REQUIRE(d.memset(pointer, 0xA5, bytes));
    workspaces.push_back(pointer);
  }
  std::vector<CUtensorMap> maps;
  CU_REQUIRE(
      runner::child::encode_tensor_maps(concrete->tensor_maps, buffers, maps, d.encode_tiled));
  for (const auto& step : concrete->launches) {
    const action::Launch& launch = source.plan.launches[step.launch];
    const LoadedFunction& function = source.functions.at(launch.name_expression);
    auto params =
        action::pack_launch_args(launch, task, c, function.param_bytes, buffers, workspaces);
    REQUIRE_MESSAGE(params.ok(), params.error().message);
    std::vector<void*> pointers = runner::child::param_pointers(launch, *params, maps);
    // The dynamic limit raised for any dynamic shared memory: a kernel with static memory
    // needs it below 48 KiB of dynamic memory too (the runner: needs_dynamic_smem_optin).
    if (step.smem_bytes > 0) {
      CU_REQUIRE(d.set_attribute(function.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(step.smem_bytes)));
    }
    CUlaunchAttribute attribute{};
    const CUlaunchConfig config = runner::child::launch_config(step, nullptr, attribute);
    CU_REQUIRE(d.launch_ex(&config, function.function, pointers.data(), nullptr));
  }
  CU_REQUIRE(d.synchronize());

  std::vector<OutputVerdict> verdicts;
  if (!task.checker.empty()) {
    // Outputs with several right answers: the task's checker judges the kernel's outputs
    // against the oracle's (encoded in the output dtypes), as the runner would a candidate's.
    const judge::TaskChecker* checker = judge::find_task_checker(task.checker);
    REQUIRE(checker != nullptr);
    std::vector<std::vector<std::byte>> got, want;
    std::vector<judge::HostTensorView> input_views, candidate, reference;
    std::vector<judge::Tolerance> tolerances;
    for (std::size_t t = 0; t < task.tensors.size(); ++t) {
      const auto& spec = task.tensors[t];
      input_views.push_back(
          {spec.name, spec.dtype, initial[t].data(), counts[t], oracle->at(spec.name).shape});
    }
    got.reserve(task.tensors.size());
    want.reserve(task.tensors.size());
    for (std::size_t t = 0; t < task.tensors.size(); ++t) {
      const auto& spec = task.tensors[t];
      if (!tasks::is_output(spec.role)) continue;
      const auto& shape = oracle->at(spec.name).shape;
      got.emplace_back(sizes[t]);
      if (sizes[t] > 0) CU_REQUIRE(d.to_host(got.back().data(), buffers[t], sizes[t]));
      want.push_back(tasks::encode_values(spec.dtype, oracle->at(spec.name).values));
      candidate.push_back({spec.name, spec.dtype, got.back().data(), counts[t], shape});
      reference.push_back({spec.name, spec.dtype, want.back().data(), counts[t], shape});
      const tasks::Tolerance tol = spec.tolerance.value_or(tasks::Tolerance{});
      tolerances.push_back({tol.atol, tol.rtol});
    }
    judge::TaskCheckRequest request;
    request.inputs = input_views;
    request.candidate = candidate;
    request.reference = reference;
    request.tolerances = tolerances;
    request.scalars = &c.scalars;
    request.reveal_values = true;
    const auto reports = checker->check(request);
    for (const auto& report : reports) {
      OutputVerdict verdict;
      verdict.name = report.output_name + " (" + task.checker + " checker: " + report.summary + ")";
      verdict.count = report.count;
      verdict.mismatches = report.pass ? 0 : std::max<std::size_t>(report.mismatches, 1);
      verdict.max_abs_error = report.max_abs_error;
      verdicts.push_back(verdict);
    }
    for (const auto pointer : buffers) d.free(pointer);
    for (const auto pointer : workspaces) d.free(pointer);
    return verdicts;
  }
  for (std::size_t t = 0; t < task.tensors.size(); ++t) {
    const auto& spec = task.tensors[t];
    if (!tasks::is_output(spec.role)) continue;
    std::vector<std::byte> host(sizes[t]);
    if (sizes[t] > 0) CU_REQUIRE(d.to_host(host.data(), buffers[t], sizes[t]));
    const auto got = tasks::decode_values(spec.dtype, host.data(), counts[t]);
    const auto& expected = oracle->at(spec.name).values;
    REQUIRE(expected.size() == got.size());
    const tasks::Tolerance tol = spec.tolerance.value_or(tasks::Tolerance{});
    OutputVerdict verdict;
    verdict.name = spec.name;
    verdict.count = got.size();
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double error = std::fabs(got[i] - expected[i]);
      const bool ok = error <= tol.atol + tol.rtol * std::fabs(expected[i]);
      if (std::isfinite(error)) verdict.max_abs_error = std::max(verdict.max_abs_error, error);
      if (ok) continue;
      if (verdict.mismatches++ == 0) {
        verdict.first = i;
        verdict.first_got = got[i];
        verdict.first_expected = expected[i];
      }
    }
    verdicts.push_back(verdict);
  }
  for (const auto pointer : buffers) d.free(pointer);
  for (const auto pointer : workspaces) d.free(pointer);
  return verdicts;
}

}  // namespace

TEST_CASE("gpu: every reference and example solution agrees with its task's float64 oracle") {
  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const Driver& d = driver();
  const fs::path root(CRUCIBLE_SOURCE_DIR);
  std::size_t checked = 0, left_out = 0;
  // CRUCIBLE_GPU_TASKS (ids or id prefixes, space separated) narrows the run to some tasks, for a
  // GPU session spent on what changed; the tasks it leaves out are named, never counted.
  std::vector<std::string> only;
  if (const char* list = std::getenv("CRUCIBLE_GPU_TASKS")) {
    std::istringstream words(list);
    for (std::string word; words >> word;) only.push_back(word);
  }
  for (const auto& task : registry->all()) {
    CAPTURE(task.id);
    if (!only.empty() && std::none_of(only.begin(), only.end(), [&](const std::string& prefix) {
          return task.id.rfind(prefix, 0) == 0;
        })) {
      MESSAGE("not run (CRUCIBLE_GPU_TASKS): " << task.id);
      continue;
    }
    REQUIRE_MESSAGE(tasks::find_oracle(task.id) != nullptr, "no oracle for " << task.id);
    const auto context = action::make_plan_context(task);
    std::vector<fs::path> sources{root / task.reference_path};
    const fs::path example = task.solution_path();
    REQUIRE_MESSAGE(fs::exists(example), "every task folder holds a solution.cu");
    sources.push_back(example);
    for (const auto& path : sources) {
      CAPTURE(path.string());
      const LoadedSource source = load_source(path, context);
      for (const auto& c : task.cases) {
        std::size_t elements = 0;
        for (const auto& spec : task.tensors) {
          elements += static_cast<std::size_t>(tasks::element_count(spec, c).value());
        }
        if (elements > kMaxCaseElements) {
          ++left_out;
          continue;
        }
        CAPTURE(c.name);
        for (const auto& verdict :
             run_case(task, c, source, context, tasks::case_seed(c, 20261130))) {
          CAPTURE(verdict.name);
          INFO("first mismatch at " << verdict.first << ": got " << verdict.first_got
                                    << ", expected " << verdict.first_expected);
          CHECK(verdict.mismatches == 0);
          std::printf("%-42s %-28s %-22s %-14s max |error| %.3g\n", task.id.c_str(),
                      path.filename().string().c_str(), c.name.c_str(), verdict.name.c_str(),
                      verdict.max_abs_error);
        }
        ++checked;
      }
      CU_REQUIRE(d.module_unload(source.module));
    }
  }
  std::printf("checked %zu (source, case) pairs; %zu left out for size\n", checked, left_out);
  CHECK(checked > 0);
}
