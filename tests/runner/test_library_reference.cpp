// On a GPU: the cuBLASLt reference of llm/linear agrees with the float64 oracle on every case
// small enough for the CPU oracle, launches the kernels it says it launches, and reads only its
// inputs. The runner times agents against this library call, so it is held to the oracle like
// every NVRTC reference (tests/kernels/test_references_gpu.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/oracles/oracle.hpp"
#include "sandbox/runner/cuda_check.hpp"
#include "sandbox/runner/device.hpp"
#include "sandbox/runner/kernel_timer.hpp"
#include "sandbox/runner/library_reference.hpp"
#include "tasks/registry.hpp"
#include "tasks/roofline.hpp"

using namespace crucible;
using sandbox::runner::check;
using sandbox::runner::DeviceBuffer;

namespace crucible::runner_test {
sandbox::runner::Device& device();
sandbox::runner::KernelTimer& timer();
}  // namespace crucible::runner_test

namespace {

// Multiply-adds the CPU oracle does in a few seconds.
constexpr std::int64_t kMaxOracleMacs = std::int64_t{2} << 30;

}  // namespace

TEST_CASE("library reference: cuBLASLt linear agrees with the float64 oracle") {
  auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const tasks::Task* task = registry->find("llm/linear");
  REQUIRE(task != nullptr);
  REQUIRE(task->reference_library == "cublaslt");
  auto& device = runner_test::device();
  auto& timer = runner_test::timer();
  const CUstream stream = device.stream;

  sandbox::runner::LibraryHooks hooks;
  hooks.stream = stream;
  std::uint32_t flushes = 0;
  hooks.flush_l2 = [&] { device.flush_l2(flushes++); };
  std::uint64_t tag = 1u << 30;
  hooks.count_kernels = [&](const std::function<void()>& enqueue) {
    const std::uint64_t mine = ++tag;
    timer.set_tag(mine);
    enqueue();
    timer.set_tag(0);
    check(cuStreamSynchronize(stream), "probe");
    const auto spans = timer.collect();
    const auto it = spans.find(mine);
    return it == spans.end() ? std::uint32_t{0} : it->second.kernels;
  };
  auto library = sandbox::runner::make_library_reference(task->reference_library);

  std::size_t checked = 0;
  for (std::size_t index = 0; index < task->cases.size(); ++index) {
    const tasks::Case& c = task->cases[index];
    const std::int64_t m = c.symbols.at("num_tokens"), n = c.symbols.at("out_features"),
                       k = c.symbols.at("in_features");
    if (m * n * k > kMaxOracleMacs) continue;
    CAPTURE(c.name);
    std::vector<std::vector<std::int64_t>> shapes;
    for (const auto& spec : task->tensors) shapes.push_back(tasks::resolve_shape(spec, c).value());
    library->prepare_case(index, shapes, core::DType::kBF16, hooks);
    CHECK(library->kernels_per_call(index) >= 1);

    const auto inputs = kernels::case_inputs(*task, c, tasks::case_seed(c, 20261130));
    REQUIRE_MESSAGE(inputs.ok(), inputs.error().message);
    std::vector<DeviceBuffer> buffers;
    std::vector<CUdeviceptr> pointers;
    for (const auto& spec : task->tensors) {
      const std::size_t bytes = static_cast<std::size_t>(tasks::element_count(spec, c).value()) *
                                core::dtype_size(spec.dtype);
      buffers.emplace_back(bytes, false);
      pointers.push_back(buffers.back().data());
      if (tasks::is_input(spec.role)) {
        const auto& host = inputs->at(spec.name);
        check(cuMemcpyHtoDAsync(pointers.back(), host.data(), host.size(), stream), "upload");
      } else {
        check(cuMemsetD8Async(pointers.back(), 0xFF, bytes, stream), "poison");  // bf16 NaN
      }
    }
    // One call under a tag: exactly the kernels the library announced.
    const std::uint64_t mine = ++tag;
    timer.set_tag(mine);
    library->launch(index, pointers, stream);
    timer.set_tag(0);
    check(cuStreamSynchronize(stream), "library call");
    const auto spans = timer.collect();
    REQUIRE(spans.count(mine) == 1);
    CHECK(spans.at(mine).kernels == library->kernels_per_call(index));

    std::vector<std::byte> out_bytes(buffers[0].bytes());
    check(cuMemcpyDtoH(out_bytes.data(), pointers[0], out_bytes.size()), "download");
    const auto got = kernels::decode_values(core::DType::kBF16, out_bytes.data(),
                                            static_cast<std::size_t>(m * n));
    const auto expected = kernels::run_oracle(*task, c, *inputs);
    REQUIRE_MESSAGE(expected.ok(), expected.error().message);
    const auto& want = expected->at("out").values;
    const tasks::Tolerance tol = task->tensors[0].tolerance.value();
    std::size_t bad = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double error = std::fabs(got[i] - want[i]);
      worst = std::max(worst, std::isfinite(error) ? error : INFINITY);
      if (!(error <= tol.atol + tol.rtol * std::fabs(want[i]))) ++bad;
    }
    CHECK(bad == 0);
    std::printf("llm/linear cublaslt %-24s max |error| %.3g  %s\n", c.name.c_str(), worst,
                library->describe(index).c_str());
    // Inputs unchanged.
    for (std::size_t t = 1; t < task->tensors.size(); ++t) {
      std::vector<std::byte> after(buffers[t].bytes());
      check(cuMemcpyDtoH(after.data(), pointers[t], after.size()), "download input");
      CHECK(after == inputs->at(task->tensors[t].name));
    }
    ++checked;
  }
  CHECK(checked >= 8);
}
