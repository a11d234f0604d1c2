// The runner's device: context, stream, scratch for L2 flushes, and RAII device buffers.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/value.hpp"

namespace crucible::sandbox::runner {

// Set once a kernel is known to be stuck (a timeout): from then on nothing may be freed or
// unloaded, because cuMemFree and cuModuleUnload wait for the device, and the device never
// finishes. The process reports and exits; the server kills it.
void abandon_context();
bool context_abandoned();

// Device memory with a canary region before and after the payload. `data()` is 256-byte
// aligned. Frees itself; move-only.
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
  CUdeviceptr base_ = 0;
  std::size_t bytes_ = 0;
  std::size_t pad_ = 0;
};

struct Device {
  int ordinal = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::string name;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
  std::size_t l2_bytes = 0;
  std::size_t max_smem_optin = 0;
  std::size_t total_memory = 0;
  DeviceBuffer l2_scratch;  // 2 x L2, read between timed calls
  DeviceBuffer l2_sink;     // where the sweep kernel parks its (never used) result
  CUmodule sweep_module = nullptr;
  CUfunction sweep = nullptr;       // reads all of l2_scratch
  double copy_bandwidth_bps = 0.0;  // device-to-device copy, bytes read + written per second

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
  core::Value describe() const;
};

// SM and memory clocks in MHz through NVML (dlopen'ed); {} when NVML is missing.
core::Value read_clocks(int ordinal);

}  // namespace crucible::sandbox::runner
