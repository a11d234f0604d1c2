// On a GPU: the runner's device-side output check (Device::launch_check) reaches the verdict and
// the error maxima of the host's compare_outputs on every dtype, over random bit patterns (every
// NaN, infinity, subnormal and poison included) and values at the tolerance bound. Timed calls are
// checked on the device and a wrong verdict there would let a kernel misbehave in timed calls, so
// the two implementations are held to the same element counts. test_library_reference.cpp
// holds the library references (cuBLASLt) to their oracles. Without a CUDA device the suite
// reports itself skipped (exit 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "judge/compare.hpp"
#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "runner/child/kernel_timer.hpp"
#include "runner/child/loaded_module.hpp"
#include "tasks/oracle.hpp"

using namespace crucible;
using core::DType;
using runner::child::Device;
using runner::child::DeviceBuffer;

namespace {

Device* g_device = nullptr;

const DType kAllDTypes[] = {DType::kBF16,    DType::kF16,     DType::kF32, DType::kF64,
                            DType::kFP8E4M3, DType::kFP8E5M2, DType::kI8,  DType::kU8,
                            DType::kI16,     DType::kI32,     DType::kI64, DType::kBool};

runner::child::CheckResult device_check(DType dtype, const std::vector<unsigned char>& got,
                                        const std::vector<unsigned char>& want,
                                        judge::Tolerance tol, int variant) {
  Device& device = *g_device;
  const std::size_t count = want.size() / core::dtype_size(dtype);
  DeviceBuffer got_buffer(got.size(), false), want_buffer(want.size(), false),
      result(Device::kCheckBytes, false);
  using runner::child::check;
  // Everything on the runner's stream, in order, as the runner does it: that stream does not
  // synchronise with the legacy default stream the non-Async calls use.
  const CUstream stream = device.stream;
  check(cuMemcpyHtoDAsync(got_buffer.data(), got.data(), got.size(), stream), "upload");
  check(cuMemcpyHtoDAsync(want_buffer.data(), want.data(), want.size(), stream), "upload");
  check(cuMemsetD8Async(result.data(), 0, Device::kCheckBytes, stream), "memset");
  device.launch_check(got_buffer.data(), want_buffer.data(), count, dtype, tol.atol, tol.rtol,
                      result.data(), variant);
  std::byte out[Device::kCheckBytes] = {};
  check(cuMemcpyDtoHAsync(out, result.data(), sizeof out, stream), "download");
  check(cuStreamSynchronize(stream), "check");
  return runner::child::CheckResult::read(out);
}

void expect_same_verdict(DType dtype, const std::vector<unsigned char>& got,
                         const std::vector<unsigned char>& want, judge::Tolerance tol,
                         int variant = 0) {
  const std::size_t count = want.size() / core::dtype_size(dtype);
  const auto host =
      judge::compare_outputs(dtype, got.data(), want.data(), count, {}, tol, variant, true, "out");
  const auto device = device_check(dtype, got, want, tol, variant);
  // The device counts a NaN reference element as a failure; the host reports it apart.
  CHECK(device.failures == host.mismatches + host.reference_nans);
  CHECK(device.all_zero(count) == host.all_zero);
  CHECK(device.pass(count) == host.pass);
  // The error maxima, bit for bit: a passing case's reply is built from the device's.
  CHECK(device.max_abs_error == host.max_abs_error);
  CHECK(device.max_rel_error == host.max_rel_error);
  if (host.pass) {
    const auto rebuilt =
        judge::passing_report(count, device.max_abs_error, device.max_rel_error, tol, true, "out");
    CHECK(rebuilt.to_value() == host.to_value());
  }
}

}  // namespace

TEST_CASE("device check: random bit patterns get the host's verdict on every dtype") {
  std::mt19937_64 rng(20261130);
  constexpr std::size_t kCount = 200'003;
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const std::size_t esize = core::dtype_size(dtype);
    std::vector<unsigned char> want(kCount * esize);
    for (auto& byte : want) byte = static_cast<unsigned char>(rng());
    // The candidate: equal, off in the lowest bits (near the bound), or unrelated bits.
    std::vector<unsigned char> got = want;
    for (std::size_t i = 0; i < kCount; ++i) {
      const auto roll = rng() % 10;
      unsigned char* element = got.data() + i * esize;
      if (roll < 5) continue;
      if (roll < 9) {
        element[0] = static_cast<unsigned char>(element[0] ^ (rng() % 4));
      } else {
        for (std::size_t b = 0; b < esize; ++b) element[b] = static_cast<unsigned char>(rng());
      }
    }
    const auto tol = judge::default_tolerance(dtype);
    expect_same_verdict(dtype, got, want, tol);
    expect_same_verdict(dtype, want, want, tol);
    expect_same_verdict(dtype, got, want, judge::Tolerance{0.0, 0.0});
    expect_same_verdict(dtype, got, want, judge::Tolerance{0.5, 0.25});
    expect_same_verdict(dtype, got, want, judge::Tolerance{0.5, 0.25}, 1);
  }
}

TEST_CASE("device check: clean, poisoned, all-zero and at-the-bound outputs") {
  constexpr std::size_t kCount = 4099;
  for (const DType dtype : kAllDTypes) {
    CAPTURE(core::dtype_name(dtype));
    const std::size_t esize = core::dtype_size(dtype);
    std::vector<unsigned char> want(kCount * esize), got(kCount * esize), zeros(kCount * esize);
    // Small exact values 1..7 (bool: 0/1) in every dtype.
    std::vector<double> values(kCount);
    for (std::size_t i = 0; i < kCount; ++i) {
      values[i] =
          dtype == DType::kBool ? static_cast<double>(i % 2) : 1.0 + static_cast<double>(i % 7);
    }
    const auto encoded = tasks::encode_values(dtype, values);
    std::memcpy(want.data(), encoded.data(), want.size());
    got = want;
    const auto tol = judge::default_tolerance(dtype);
    expect_same_verdict(dtype, got, want, tol);
    judge::fill_poison(dtype, got.data() + 17 * esize, 3, 0);
    expect_same_verdict(dtype, got, want, tol);
    // The second run's poison, under a tolerance wide enough to cover an integer poison's
    // distance from the answer: still unwritten, on both sides.
    got = want;
    judge::fill_poison(dtype, got.data() + 17 * esize, 3, 1);
    expect_same_verdict(dtype, got, want, judge::Tolerance{1e30, 0.0}, 1);
    expect_same_verdict(dtype, zeros, want, tol);
    // A tolerance exactly equal to one element's error: the bound is inclusive on both sides.
    got = want;
    std::vector<unsigned char> other(got.begin() + esize, got.begin() + 2 * esize);
    std::memcpy(got.data(), other.data(), esize);  // element 0 takes element 1's value
    const double error = 1.0;                      // values 1 and 2 differ by exactly 1
    expect_same_verdict(dtype, got, want, judge::Tolerance{error, 0.0});
    expect_same_verdict(dtype, got, want, judge::Tolerance{error / 2, 0.0});
  }
}

TEST_CASE("scramble: the answer kept on the device is noise until unscrambled") {
  Device& device = *g_device;
  using runner::child::check;
  const CUstream stream = device.stream;
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{13}, std::size_t{4096 + 5}}) {
    CAPTURE(bytes);
    std::vector<unsigned char> plain(bytes);
    for (std::size_t i = 0; i < bytes; ++i) plain[i] = static_cast<unsigned char>(i * 37 + 1);
    DeviceBuffer buffer(bytes, false);
    check(cuMemcpyHtoDAsync(buffer.data(), plain.data(), bytes, stream), "upload");
    device.scramble(buffer.data(), bytes, 0x1234);
    std::vector<unsigned char> scrambled(bytes), other(bytes), restored(bytes);
    check(cuMemcpyDtoHAsync(scrambled.data(), buffer.data(), bytes, stream), "download");
    device.scramble(buffer.data(), bytes, 0x1234);
    check(cuMemcpyDtoHAsync(restored.data(), buffer.data(), bytes, stream), "download");
    device.scramble(buffer.data(), bytes, 0x1235);  // another key
    check(cuMemcpyDtoHAsync(other.data(), buffer.data(), bytes, stream), "download");
    check(cuStreamSynchronize(stream), "scramble");
    CHECK(restored == plain);
    std::size_t same = 0, same_other = 0;
    for (std::size_t i = 0; i < bytes; ++i) {
      same += scrambled[i] == plain[i] ? 1 : 0;
      same_other += other[i] == scrambled[i] ? 1 : 0;
    }
    // About 1 byte in 256 agrees by chance.
    CHECK(same <= 1 + bytes / 64);
    CHECK(same_other <= 1 + bytes / 64);
  }
}

namespace crucible::runner_test {
Device& device() { return *g_device; }
runner::child::KernelTimer& timer() {
  static runner::child::KernelTimer* timer = [] {
    runner::child::KernelTimer* started = nullptr;
    const std::string error = runner::child::KernelTimer::start(&started);
    REQUIRE_MESSAGE(error.empty(), error);
    return started;
  }();
  return *timer;
}
}  // namespace crucible::runner_test

int main(int argc, char** argv) {
  Device device;
  try {
    device.open(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\n*** test_runner_device SKIPPED: no usable CUDA device (%s) ***\n\n",
                 e.what());
    return 77;
  }
  g_device = &device;
  doctest::Context context(argc, argv);
  return context.run();
}

TEST_CASE("dynamic shared memory: the limit is raised where static and dynamic pass 48 KiB") {
  runner::child::LoadedKernel kernel;
  kernel.static_smem = 40 * 1024;
  CHECK(runner::child::needs_dynamic_smem_optin(kernel, 16 * 1024));       // 56 KiB in all
  CHECK_FALSE(runner::child::needs_dynamic_smem_optin(kernel, 8 * 1024));  // 48 KiB exactly
  kernel.configured_smem = 16 * 1024;  // raised once: enough for that launch and smaller ones
  CHECK_FALSE(runner::child::needs_dynamic_smem_optin(kernel, 16 * 1024));
  CHECK(runner::child::needs_dynamic_smem_optin(kernel, 20 * 1024));
  kernel.static_smem = 0;
  kernel.configured_smem = 0;
  CHECK_FALSE(runner::child::needs_dynamic_smem_optin(kernel, 48 * 1024));
  CHECK(runner::child::needs_dynamic_smem_optin(kernel, 48 * 1024 + 16));
}
