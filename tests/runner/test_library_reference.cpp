// On a GPU: the cuBLASLt references of llm/linear and llm/fp8_scaled_linear agree with the
// float64 oracle on every case (every row where the CPU oracle is quick, the first and last rows
// of the largest), launches
// the kernels it says it launches, writes nothing around its output and leaves its inputs as
// they were. The runner times agents against this library call, so it is held to the oracle like
// every NVRTC reference (tests/kernels/test_references_gpu.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "runner/child/kernel_timer.hpp"
#include "runner/child/library_reference.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tasks/roofline.hpp"

using namespace crucible;
using runner::child::check;
using runner::child::DeviceBuffer;

namespace crucible::runner_test {
runner::child::Device& device();
runner::child::KernelTimer& timer();
}  // namespace crucible::runner_test

namespace {

// Rows of out compared with the float64 oracle: all of them up to this many multiply-adds, else
// the first and last kSampleRows (each output row depends only on its input row and the weight,
// so a case of those rows alone is what the oracle computes).
constexpr std::int64_t kMaxOracleMacs = std::int64_t{1} << 31;
constexpr std::int64_t kSampleRows = 4;

// Holds task `id`'s library reference to its oracle on every case. `token_rows` names the input
// tensors with one row per token (the rows the sampled check keeps).
void check_library_reference(const std::string& id, const std::string& library_name,
                             const std::vector<std::string>& token_rows) {
  auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  const tasks::Task* task = registry->find(id);
  REQUIRE(task != nullptr);
  REQUIRE(task->reference_library == library_name);
  auto& device = runner_test::device();
  auto& timer = runner_test::timer();
  const CUstream stream = device.stream;

  runner::child::LibraryHooks hooks;
  hooks.stream = stream;
  std::uint32_t flushes = 0;
  hooks.flush_l2 = [&] { device.flush_l2(flushes++); };
  std::uint64_t tag = 1u << 30;
  hooks.count_kernels = [&](const std::function<void()>& enqueue) {
    return timer.count_operations(stream, ++tag, enqueue);
  };
  auto library = runner::child::make_library_reference(task->reference_library);

  std::size_t checked = 0, sampled = 0;
  for (std::size_t index = 0; index < task->cases.size(); ++index) {
    const tasks::Case& c = task->cases[index];
    const std::int64_t m = c.symbols.at("num_tokens"), n = c.symbols.at("out_features"),
                       k = c.symbols.at("in_features");
    CAPTURE(c.name);
    std::vector<std::vector<std::int64_t>> shapes;
    for (const auto& spec : task->tensors) shapes.push_back(tasks::resolve_shape(spec, c).value());
    library->prepare_case(index, shapes, core::DType::kBF16, !c.hidden, hooks);
    CHECK(library->kernels_per_call(index) >= 1);

    const auto inputs = tasks::case_inputs(*task, c, tasks::case_seed(c, 20261130));
    REQUIRE_MESSAGE(inputs.ok(), inputs.error().message);
    std::vector<DeviceBuffer> buffers;
    std::vector<CUdeviceptr> pointers;
    for (const auto& spec : task->tensors) {
      const std::size_t bytes = static_cast<std::size_t>(tasks::element_count(spec, c).value()) *
                                core::dtype_size(spec.dtype);
      buffers.emplace_back(bytes, true);
      pointers.push_back(buffers.back().data());
      // Canaries and the output poisoned with 0xFF bytes (bf16 NaN), then the inputs.
      check(cuMemsetD8Async(buffers.back().base(), 0xFF, buffers.back().total_bytes(), stream),
            "poison");
      if (tasks::is_input(spec.role)) {
        const auto& host = inputs->at(spec.name);
        check(cuMemcpyHtoDAsync(pointers.back(), host.data(), host.size(), stream), "upload");
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
    CHECK(spans.at(mine).operations() == library->kernels_per_call(index));
    CHECK(spans.at(mine).kernels >= 1);

    std::vector<std::byte> out_bytes(buffers[0].total_bytes());
    check(cuMemcpyDtoH(out_bytes.data(), buffers[0].base(), out_bytes.size()), "download");
    const std::size_t pad = buffers[0].pad();
    const std::size_t payload = buffers[0].bytes();
    // Nothing written around the output.
    CHECK(std::all_of(out_bytes.begin(), out_bytes.begin() + static_cast<long>(pad),
                      [](std::byte b) { return b == std::byte{0xFF}; }));
    CHECK(std::all_of(out_bytes.begin() + static_cast<long>(pad + payload), out_bytes.end(),
                      [](std::byte b) { return b == std::byte{0xFF}; }));
    const auto got = tasks::decode_values(core::DType::kBF16, out_bytes.data() + pad,
                                          static_cast<std::size_t>(m * n));

    // The rows the oracle checks, and a case of those rows alone.
    std::vector<std::int64_t> rows;
    if (m * n * k <= kMaxOracleMacs || m <= 2 * kSampleRows) {
      for (std::int64_t r = 0; r < m; ++r) rows.push_back(r);
    } else {
      for (std::int64_t r = 0; r < kSampleRows; ++r) rows.push_back(r);
      for (std::int64_t r = m - kSampleRows; r < m; ++r) rows.push_back(r);
      ++sampled;
    }
    tasks::Case part = c;
    part.symbols["num_tokens"] = static_cast<std::int64_t>(rows.size());
    tasks::InputBytes part_inputs = *inputs;
    for (const auto& name : token_rows) {
      const auto& whole = inputs->at(name);
      const std::size_t row_bytes = whole.size() / static_cast<std::size_t>(m);
      part_inputs[name].assign(rows.size() * row_bytes, std::byte{0});
      for (std::size_t i = 0; i < rows.size(); ++i) {
        std::memcpy(part_inputs[name].data() + i * row_bytes,
                    whole.data() + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
      }
    }
    const auto expected = tasks::run_oracle(*task, part, part_inputs);
    REQUIRE_MESSAGE(expected.ok(), expected.error().message);
    const auto& want = expected->at("out").values;
    const tasks::Tolerance tol = task->tensors[0].tolerance.value();
    std::size_t bad = 0;
    double worst = 0.0;
    // The smallest atol this case needs at the task's rtol: what the tolerance must cover.
    double needed_atol = 0.0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        const double w = want[i * static_cast<std::size_t>(n) + static_cast<std::size_t>(j)];
        const double g = got[static_cast<std::size_t>(rows[i] * n + j)];
        const double error = std::fabs(g - w);
        worst = std::max(worst, std::isfinite(error) ? error : INFINITY);
        needed_atol = std::max(needed_atol,
                               std::isfinite(error) ? error - tol.rtol * std::fabs(w) : INFINITY);
        if (!(error <= tol.atol + tol.rtol * std::fabs(w))) ++bad;
      }
    }
    CHECK(bad == 0);
    std::printf(
        "%s %s %-24s %5zu rows  max |error| %.3g  atol needed at rtol %.3g: %.3g (task atol "
        "%.3g)  %zu of %zu elements outside  %s\n",
        id.c_str(), library_name.c_str(), c.name.c_str(), rows.size(), worst, tol.rtol, needed_atol,
        tol.atol, bad, rows.size() * static_cast<std::size_t>(n), library->describe(index).c_str());
    // Inputs unchanged.
    for (std::size_t t = 1; t < task->tensors.size(); ++t) {
      std::vector<std::byte> after(buffers[t].bytes());
      check(cuMemcpyDtoH(after.data(), pointers[t], after.size()), "download input");
      CHECK(after == inputs->at(task->tensors[t].name));
    }
    ++checked;
  }
  CHECK(checked == task->cases.size());
  CHECK(sampled > 0);
}

}  // namespace

TEST_CASE("library reference: cuBLASLt linear agrees with the float64 oracle on every case") {
  check_library_reference("llm/linear", "cublaslt", {"input"});
}

TEST_CASE("library reference: cuBLASLt fp8 row-wise scaled GEMM agrees with the float64 oracle") {
  check_library_reference("llm/fp8_scaled_linear", "cublaslt_fp8_rowwise", {"a", "a_scales"});
}
