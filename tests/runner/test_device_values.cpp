// On a GPU: input values made by the runner's kernel (device_values.hpp) are the host
// generators' bytes, bit for bit, for every input of every case of every task in the repository
// (at the start of the stream and at an odd offset past its end, as the timing pools read it)
// and for every generator the kernel serves on every dtype it can hold, including values that
// saturate integer types and seeds and offsets past 2^32.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "judge/compare.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "runner/child/device_values.hpp"
#include "tasks/generators.hpp"
#include "tasks/registry.hpp"

using namespace crucible;
using runner::child::check;
using runner::child::DeviceBuffer;

namespace crucible::runner_test {
runner::child::Device& device();
}  // namespace crucible::runner_test

namespace {

// The first element where device and host differ, or -1.
long long first_difference(const tasks::GeneratorSpec& spec, core::DType dtype, std::uint64_t seed,
                           std::uint64_t first, std::uint64_t count) {
  const std::size_t bytes = count * core::dtype_size(dtype);
  std::vector<std::byte> host(bytes), device_bytes(bytes);
  const auto status = tasks::generate_into(spec, dtype, seed, host, first);
  REQUIRE_MESSAGE(status.ok(), status.error().message);
  auto& device = runner_test::device();
  DeviceBuffer out(bytes, false);
  runner::child::generate_on_device(device, spec, dtype, seed, first, count, out.data());
  check(cuMemcpyDtoHAsync(device_bytes.data(), out.data(), bytes, device.stream), "download");
  check(cuStreamSynchronize(device.stream), "generate");
  const auto diff = judge::compare_bytes(host.data(), device_bytes.data(), bytes);
  return diff.equal ? -1 : static_cast<long long>(diff.first_diff / core::dtype_size(dtype));
}

}  // namespace

TEST_CASE("device values: every generated input of every task matches the host's bytes") {
  auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE_MESSAGE(registry.ok(), registry.error().message);
  std::size_t compared = 0, host_only = 0;
  for (const auto& task : registry->all()) {
    for (const auto& c : task.cases) {
      for (const auto& tensor : task.tensors) {
        if (!tasks::is_input(tensor.role)) continue;
        const auto& spec = c.values.at(tensor.name);
        if (!runner::child::generates_on_device(spec, tensor.dtype)) {
          ++host_only;
          continue;
        }
        CAPTURE(task.id);
        CAPTURE(c.name);
        CAPTURE(tensor.name);
        const auto count = static_cast<std::uint64_t>(tasks::element_count(tensor, c).value());
        const std::uint64_t seed =
            tasks::tensor_seed(tasks::case_seed(c, 20261130), tensor.name, 0);
        // The start of the stream (a correctness run), and a window at an odd offset (a timed
        // call's), each at most 2^20 elements.
        const std::uint64_t head = std::min<std::uint64_t>(count, 1u << 20);
        CHECK(first_difference(spec, tensor.dtype, seed, 0, head) == -1);
        std::uint64_t offset = 977;
        if (const auto length = tasks::stream_length(spec)) {
          offset = *length > head ? std::min<std::uint64_t>(977, *length - head) : 0;
        }
        CHECK(first_difference(spec, tensor.dtype, seed, offset, head) == -1);
        ++compared;
      }
    }
  }
  MESSAGE(compared << " inputs compared; " << host_only
                   << " made on the host (captured, rope_cache)");
  CHECK(compared > 300);
}

TEST_CASE("device values: each generator on each dtype, saturation, large seeds and offsets") {
  using tasks::GeneratorKind;
  std::vector<tasks::GeneratorSpec> specs;
  auto add = [&](GeneratorKind kind, auto&& set) {
    tasks::GeneratorSpec spec;
    spec.kind = kind;
    set(spec);
    specs.push_back(spec);
  };
  add(GeneratorKind::kRandn, [](auto& s) { s.mean = 0.5, s.std = 3.0; });
  add(GeneratorKind::kRandn,
      [](auto& s) { s.mean = 0.0, s.std = 400.0; });  // saturates i8, f16 edge
  add(GeneratorKind::kUniform, [](auto& s) { s.lo = -3.5, s.hi = 7.25; });
  add(GeneratorKind::kUniform, [](auto& s) { s.lo = 1.0, s.hi = 1025.0; });
  add(GeneratorKind::kUniform, [](auto& s) { s.lo = -1e6, s.hi = 1e20; });  // saturates ints
  add(GeneratorKind::kConstant, [](auto& s) { s.value = 1e30; });
  add(GeneratorKind::kConstant, [](auto& s) { s.value = -2.5; });
  add(GeneratorKind::kConstant, [](auto& s) { s.value = 65519.0; });  // f16 rounding edge
  add(GeneratorKind::kOnes, [](auto&) {});
  add(GeneratorKind::kZeros, [](auto&) {});
  add(GeneratorKind::kPositions, [](auto& s) { s.max = 4096; });
  add(GeneratorKind::kPermutation, [](auto& s) { s.max = 1000003, s.pad = 0.1; });
  add(GeneratorKind::kList, [](auto& s) { s.list = {7, 1, 333.5, -2, 1e10}; });
  const core::DType dtypes[] = {core::DType::kBF16, core::DType::kF16,     core::DType::kF32,
                                core::DType::kF64,  core::DType::kI8,      core::DType::kU8,
                                core::DType::kI16,  core::DType::kI32,     core::DType::kI64,
                                core::DType::kBool, core::DType::kFP8E4M3, core::DType::kFP8E5M2};
  std::size_t compared = 0;
  for (const auto& spec : specs) {
    for (const auto dtype : dtypes) {
      REQUIRE(runner::child::generates_on_device(spec, dtype));
      for (const std::uint64_t seed : {1ull, 0xDEADBEEFCAFEF00Dull}) {
        for (const std::uint64_t first : {0ull, 12345ull, (1ull << 33) + 1}) {
          if (tasks::stream_length(spec) && first + 50001 > *tasks::stream_length(spec)) continue;
          CAPTURE(tasks::describe(spec));
          CAPTURE(core::dtype_name(dtype));
          CAPTURE(seed);
          CAPTURE(first);
          CHECK(first_difference(spec, dtype, seed, first, 50001) == -1);
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 600);
  tasks::GeneratorSpec captured;
  captured.kind = GeneratorKind::kCaptured;
  CHECK_FALSE(runner::child::generates_on_device(captured, core::DType::kBF16));
  tasks::GeneratorSpec rope;
  rope.kind = GeneratorKind::kRopeCache;
  CHECK_FALSE(runner::child::generates_on_device(rope, core::DType::kF32));
}

TEST_CASE("device values: a timed call's fast randn is the same normal distribution, repeatable") {
  // Draw::kFast is for values only the device reads: it need not match the host, but a checked
  // call draws the same seed again and must get the same bytes, and the values must keep the
  // distribution the manifest asks for.
  tasks::GeneratorSpec spec;
  spec.kind = tasks::GeneratorKind::kRandn;
  spec.mean = 0.5;
  spec.std = 3.0;
  const std::uint64_t count = 1u << 22;
  auto& device = runner_test::device();
  auto draw = [&](runner::child::Draw how, std::uint64_t first) {
    std::vector<float> values(count);
    DeviceBuffer out(count * sizeof(float), false);
    runner::child::generate_on_device(device, spec, core::DType::kF32, 77, first, count, out.data(),
                                      how);
    check(cuMemcpyDtoHAsync(values.data(), out.data(), count * sizeof(float), device.stream),
          "download");
    check(cuStreamSynchronize(device.stream), "generate");
    return values;
  };
  const auto fast = draw(runner::child::Draw::kFast, 0);
  CHECK(fast == draw(runner::child::Draw::kFast, 0));
  // A window of the stream is the same elements wherever it starts (partial redraws).
  const auto shifted = draw(runner::child::Draw::kFast, 1000);
  CHECK(std::equal(shifted.begin(), shifted.end() - 1000, fast.begin() + 1000));
  const auto exact = draw(runner::child::Draw::kAsHost, 0);
  CHECK(fast != exact);
  double sum = 0, sum2 = 0, beyond_3_sigma = 0, below_mean = 0;
  for (const float v : fast) {
    const double z = (v - spec.mean) / spec.std;
    sum += z;
    sum2 += z * z;
    beyond_3_sigma += std::abs(z) > 3 ? 1 : 0;
    below_mean += z < 0 ? 1 : 0;
  }
  const double n = static_cast<double>(count);
  // Each bound is about ten standard errors of its statistic over 2^22 values: loose enough
  // never to fail by chance, tight enough to catch a wrong scale, offset or tail.
  CHECK(std::abs(sum / n) < 0.005);                       // mean
  CHECK(std::abs(sum2 / n - 1.0) < 0.007);                // variance
  CHECK(std::abs(beyond_3_sigma / n - 0.0027) < 2.5e-4);  // the two-sided 3-sigma share
  CHECK(std::abs(below_mean / n - 0.5) < 0.003);
}
