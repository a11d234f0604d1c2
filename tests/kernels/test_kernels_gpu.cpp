// On a GPU: the llm/rms_norm reference and the example solutions compute what the task says.
// The driver is loaded at run time (dlopen), so this binary also starts where there is none;
// then it reports itself skipped (exit 77, CTest SKIP_RETURN_CODE), never passed.
#include <cuda.h>
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "tasks/generators.hpp"
#include "tasks/registry.hpp"
#include "tasks/roofline.hpp"
#include "tests/kernels/gpu_driver.hpp"
#include "tests/kernels/nvrtc_support.hpp"

using namespace crucible;
using namespace crucible::kernels_test;

namespace {

namespace fs = std::filesystem;

struct Kernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  action::LaunchPlan plan;
  action::PlanContext context;
};

// The grid and block of `kernel`'s launch on case `c`, as its directives say.
std::pair<unsigned, unsigned> launch_shape(const Kernel& kernel, const tasks::Case& c) {
  const auto concrete = action::evaluate_plan(kernel.plan, c.symbols, kernel.context);
  REQUIRE_MESSAGE(concrete.ok(), concrete.error().message);
  REQUIRE(concrete->launches.size() == 1);
  return {concrete->launches[0].grid[0], concrete->launches[0].block[0]};
}

Kernel load_kernel(const fs::path& path, const tasks::Task& task) {
  const std::string source = read_text(path);
  // One kernel, possibly launched by several directives (the reference picks the block size
  // by batch size).
  auto names = launched_kernels(source);
  names.erase(std::unique(names.begin(), names.end()), names.end());
  REQUIRE(names.size() == 1);
  const Compiled compiled = compile(source, path.filename().string(), names);
  INFO(compiled.log);
  REQUIRE(compiled.ok);
  Kernel kernel;
  kernel.context = action::make_plan_context(task);
  auto plan = action::parse_launch_plan(source, kernel.context);
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  kernel.plan = std::move(plan).value();
  CU_REQUIRE(driver().module_load(&kernel.module, compiled.cubin.data()));
  CU_REQUIRE(driver().get_function(&kernel.function, kernel.module, compiled.lowered[0].c_str()));
  return kernel;
}

struct Outcome {
  std::int64_t mismatches = 0;
  double max_abs_error = 0.0;
};

// Runs `kernel` as its directives say (one block per token) on inputs from the task's generators
// and compares with a double-precision CPU result under the task tolerance.
Outcome run_rms_norm(const tasks::Task& task, const tasks::Case& c, const Kernel& kernel) {
  const auto& out_spec = task.tensors[0];
  const auto seed = tasks::case_seed(c, 20240611);
  const auto input = tasks::generate_tensor(c, task.tensors[1], seed).value();
  const auto weight = tasks::generate_tensor(c, task.tensors[2], seed).value();
  const int tokens = static_cast<int>(c.symbols.at("num_tokens"));
  int hidden = static_cast<int>(c.symbols.at("hidden_size"));
  float epsilon = static_cast<float>(c.scalars.at("epsilon"));

  const Driver& d = driver();
  CUdeviceptr d_out = 0, d_in = 0, d_w = 0;
  CU_REQUIRE(d.alloc(&d_out, input.size()));
  CU_REQUIRE(d.alloc(&d_in, input.size()));
  CU_REQUIRE(d.alloc(&d_w, weight.size()));
  CU_REQUIRE(d.memset(d_out, 0xFF, input.size()));  // NaN poison: unwritten elements fail
  CU_REQUIRE(d.to_device(d_in, input.data(), input.size()));
  CU_REQUIRE(d.to_device(d_w, weight.data(), weight.size()));
  void* args[] = {&d_out, &d_in, &d_w, &epsilon, &hidden};
  const auto [grid, block] = launch_shape(kernel, c);
  CU_REQUIRE(d.launch(kernel.function, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr));
  CU_REQUIRE(d.synchronize());
  std::vector<std::uint16_t> out(input.size() / 2);
  CU_REQUIRE(d.to_host(out.data(), d_out, input.size()));
  d.free(d_out);
  d.free(d_in);
  d.free(d_w);

  std::vector<std::uint16_t> x(input.size() / 2), w(weight.size() / 2);
  std::memcpy(x.data(), input.data(), input.size());
  std::memcpy(w.data(), weight.data(), weight.size());
  Outcome outcome;
  for (int t = 0; t < tokens; ++t) {
    double sum = 0.0;
    for (int i = 0; i < hidden; ++i) {
      const double v = tasks::bf16_to_float(x[static_cast<std::size_t>(t) * hidden + i]);
      sum += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum / hidden + static_cast<double>(epsilon));
    for (int i = 0; i < hidden; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * hidden + i;
      const double expected = tasks::bf16_to_float(x[at]) * inv_rms * tasks::bf16_to_float(w[i]);
      const double got = tasks::bf16_to_float(out[at]);
      const double error = std::abs(got - expected);
      if (!(error <= out_spec.tolerance->atol + out_spec.tolerance->rtol * std::abs(expected))) {
        ++outcome.mismatches;
      }
      if (!(error <= outcome.max_abs_error)) outcome.max_abs_error = error;
    }
  }
  return outcome;
}

// Every case of the task plus two shapes that exercise the other code paths of the reference:
// a width that is not a whole number of 16-byte vectors, and one wider than its register cache.
std::vector<tasks::Case> cases_to_run(const tasks::Task& task) {
  std::vector<tasks::Case> cases(task.cases.begin(), task.cases.end());
  tasks::Case ragged = task.cases.front();
  ragged.name = "ragged_4100";
  ragged.symbols = {{"num_tokens", 5}, {"hidden_size", 4100}};
  cases.push_back(ragged);
  tasks::Case wide = task.cases.front();
  wide.name = "wide_12288";
  wide.symbols = {{"num_tokens", 3}, {"hidden_size", 12288}};
  cases.push_back(wide);
  return cases;
}

}  // namespace

TEST_CASE(
    "gpu: the rms_norm reference and the simple solution are right on every case; the "
    "unweighted one is wrong") {
  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE(registry.ok());
  const tasks::Task* task = registry->find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const fs::path root(CRUCIBLE_SOURCE_DIR);
  driver();
  const Kernel reference = load_kernel(root / task->reference_path, *task);
  const Kernel simple = load_kernel(root / "tasks/llm/rms_norm/solution.cu", *task);
  const Kernel wrong = load_kernel(root / "examples/solutions/llm/rms_norm_wrong.cu", *task);
  for (const auto& c : cases_to_run(*task)) {
    CAPTURE(c.name);
    const Outcome ref = run_rms_norm(*task, c, reference);
    MESSAGE(c.name << ": reference max |error| " << ref.max_abs_error);
    CHECK(ref.mismatches == 0);
    CHECK(run_rms_norm(*task, c, simple).mismatches == 0);
    const std::int64_t elements = c.symbols.at("num_tokens") * c.symbols.at("hidden_size");
    CHECK(run_rms_norm(*task, c, wrong).mismatches > elements / 2);
  }
}

// Not the server's timing method (CUPTI, L2 flushes, interleaving: bench/ and sandbox/), just a
// sanity check that the reference is in the right class: a bandwidth-bound kernel far from the
// HBM roofline would inflate every agent's speedup.
TEST_CASE("gpu: the rms_norm reference runs near the HBM roofline on prefill") {
  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE(registry.ok());
  const tasks::Task* task = registry->find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const Driver& d = driver();
  const Kernel reference = load_kernel(fs::path(CRUCIBLE_SOURCE_DIR) / task->reference_path, *task);
  const Kernel simple =
      load_kernel(fs::path(CRUCIBLE_SOURCE_DIR) / "tasks/llm/rms_norm/solution.cu", *task);
  for (const char* name : {"decode_32", "prefill_4096"}) {
    const tasks::Case* c = task->find_case(name);
    REQUIRE(c != nullptr);
    int tokens = static_cast<int>(c->symbols.at("num_tokens"));
    int hidden = static_cast<int>(c->symbols.at("hidden_size"));
    float epsilon = 1e-5f;
    const std::size_t bytes = static_cast<std::size_t>(tokens) * hidden * 2;
    CUdeviceptr d_out = 0, d_in = 0, d_w = 0;
    CU_REQUIRE(d.alloc(&d_out, bytes));
    CU_REQUIRE(d.alloc(&d_in, bytes));
    CU_REQUIRE(d.alloc(&d_w, static_cast<std::size_t>(hidden) * 2));
    CU_REQUIRE(d.memset(d_in, 0x3F, bytes));
    CU_REQUIRE(d.memset(d_w, 0x3F, static_cast<std::size_t>(hidden) * 2));
    void* args[] = {&d_out, &d_in, &d_w, &epsilon, &hidden};
    CUevent start = nullptr, stop = nullptr;
    CU_REQUIRE(d.event_create(&start, 0));
    CU_REQUIRE(d.event_create(&stop, 0));
    const auto time_us = [&](const Kernel& kernel) {
      const auto [grid, block] = launch_shape(kernel, *c);  // as in the directives
      constexpr int kCalls = 200;
      for (int i = 0; i < 10; ++i) {
        d.launch(kernel.function, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr);
      }
      d.event_record(start, nullptr);
      for (int i = 0; i < kCalls; ++i) {
        d.launch(kernel.function, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr);
      }
      d.event_record(stop, nullptr);
      d.synchronize();
      float ms = 0.0f;
      d.event_elapsed(&ms, start, stop);
      return 1000.0 * ms / kCalls;
    };
    const double reference_us = time_us(reference);
    const double simple_us = time_us(simple);
    const auto cost = tasks::roofline_cost(*task, *c).value();
    const double floor_us = tasks::roofline_floor_ns(cost, tasks::kH200Peak) / 1000.0;
    MESSAGE(std::string(name) << ": reference " << reference_us << " us, simple solution "
                              << simple_us << " us, roofline floor " << floor_us << " us ("
                              << 100.0 * floor_us / reference_us
                              << "% of peak bandwidth; back-to-back, L2 warm)");
    CHECK(reference_us <= simple_us * 1.05);
    d.free(d_out);
    d.free(d_in);
    d.free(d_w);
  }
}
