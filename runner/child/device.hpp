// The runner's device: context, stream, scratch for L2 flushes, and RAII device buffers.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/value.hpp"
#include "runner/child/gate_client.hpp"

namespace crucible::runner::child {

// Set once a kernel is known to be stuck (a timeout): from then on nothing may be freed or
// unloaded, because cuMemFree and cuModuleUnload wait for the device, and the device never
// finishes. The process reports and exits; the server kills it.
void abandon_context();
bool context_abandoned();

// Device memory with a canary region before and after the payload. `data()` is 256-byte
// aligned. Frees itself; move-only. (Buffers are deliberately not recycled across jobs: a
// fresh allocation per job lands at other physical addresses, so a placement that happens to
// favour or slow one kernel does not persist through every job of a runner's life.)
class DeviceBuffer {
 public:
  static constexpr std::size_t kCanaryBytes = 4096;
  DeviceBuffer() = default;
  // Allocates payload + 2 canaries. Throws CudaFailure when the device is out of memory.
  DeviceBuffer(std::size_t payload_bytes, bool with_canaries);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  CUdeviceptr data() const { return base_ + pad_; }
  CUdeviceptr base() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t pad() const { return pad_; }
  std::size_t total_bytes() const { return bytes_ + 2 * pad_; }

 private:
  std::size_t total_allocation() const { return std::max<std::size_t>(bytes_ + 2 * pad_, 256); }
  void release();

  CUdeviceptr base_ = 0;
  std::size_t bytes_ = 0;
  std::size_t pad_ = 0;
};

// Page-locked host memory, for downloads at full link speed (a pageable copy goes through the
// driver's own bounce buffer at a fraction of it). Frees itself unless the context was
// abandoned; move-only.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(std::size_t bytes);
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release();

  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// What launch_check left in its result words (host copy).
struct CheckResult {
  std::uint64_t failures = 0;
  bool got_nonzero = false;
  bool want_nonzero = false;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;

  static CheckResult read(const std::byte* words);
  // compare_outputs' all-zero rule: the candidate all zero where the reference is not.
  bool all_zero(std::size_t count) const { return count > 0 && !got_nonzero && want_nonzero; }
  bool pass(std::size_t count) const { return failures == 0 && !all_zero(count); }
};

struct Device {
  int ordinal = 0;
  // The runner's share of the GPU with the other runners on it: exclusive while it times.
  GateClient gate;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::string name;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
  std::size_t l2_bytes = 0;
  std::size_t max_smem_optin = 0;
  std::size_t total_memory = 0;
  DeviceBuffer l2_scratch;               // 2 x L2, read between timed calls
  DeviceBuffer l2_sink;                  // where the sweep kernel parks its (never used) result
  CUmodule runner_module = nullptr;      // the runner's own kernels (below)
  CUfunction sweep = nullptr;            // reads all of l2_scratch
  CUfunction check_kernel = nullptr;     // elementwise output check (launch_check)
  CUfunction generate_kernel = nullptr;  // input values (device_values.hpp)
  CUfunction scramble_kernel = nullptr;  // XOR with a keystream (scramble)
  double copy_bandwidth_bps = 0.0;       // device-to-device copy, bytes read + written per second

  // cuInit, primary context, a stream and the scratch buffer; no kernel runs, so a spare runner
  // starting beside a busy one does not disturb its timing. Throws CudaFailure.
  void open(int ordinal);
  // Measures copy_bandwidth_bps once (1 GiB device-to-device copies); later calls return at once.
  void measure_bandwidth();
  // Reads the whole scratch buffer on the stream, evicting every line of L2. Reading (not
  // writing) matters: a write-based flush leaves L2 full of dirty lines whose write-back then
  // competes with the next timed kernel for memory bandwidth (measured: +17 % on a 21 us
  // kernel against ncu's cache control).
  void flush_l2(std::uint32_t salt);
  // Enqueues the elementwise check of `count` elements of `got` against `want` on the stream,
  // with compare_outputs' rule (a NaN reference fails, non-finite values must match exactly,
  // integers differ by at least 1): adds the failing elements to result[0], sets result[1] /
  // result[2] to 1 when any candidate / reference element is non-zero, and raises result[3] /
  // result[4] to compare_outputs' max_abs_error / max_rel_error (as double bits). `result` is
  // kCheckWords u64 in device memory, zeroed by the caller (CheckResult reads them). A pass here
  // is a pass of compare_outputs except for the all-zero rule, which CheckResult applies.
  static constexpr std::size_t kCheckWords = 5;
  static constexpr std::size_t kCheckBytes = 8 * kCheckWords;
  // `variant`: the poison variant the outputs were filled with (an integer element left holding
  // it is unwritten).
  void launch_check(CUdeviceptr got, CUdeviceptr want, std::size_t count, core::DType dtype,
                    double atol, double rtol, CUdeviceptr result, int variant = 0);
  // Enqueues an XOR of `bytes` at `data` with the keystream of `key`; a second call with the
  // same key undoes it.
  void scramble(CUdeviceptr data, std::size_t bytes, std::uint64_t key);
  // Enqueues a byte-for-byte comparison of `bytes` at `got` and `want` into the check result
  // at `result` (failures: differing words, or bytes where the two are not 8-byte aligned).
  void launch_equal(CUdeviceptr got, CUdeviceptr want, std::size_t bytes, CUdeviceptr result);
  core::Value describe() const;
  // A page-locked host buffer of at least `bytes`, named by `key` and kept for the runner's
  // life: pinning costs about a millisecond per 10 MB, so buffers are reused across jobs and
  // grow (by reallocation) only when a larger case needs it. Distinct keys never alias.
  std::byte* staging(const std::string& key, std::size_t bytes);

 private:
  std::map<std::string, PinnedHostBuffer> staging_;
};

// SM and memory clocks in MHz through NVML (dlopen'ed); {} when NVML is missing.
core::Value read_clocks(int ordinal);

}  // namespace crucible::runner::child
