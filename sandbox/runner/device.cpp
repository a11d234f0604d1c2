// Device setup, buffers, L2 flush and NVML clock reads.
#include "sandbox/runner/device.hpp"

#include <dlfcn.h>

#include <chrono>
#include <utility>

#include "sandbox/runner/cuda_check.hpp"

namespace crucible::sandbox::runner {

DeviceBuffer::DeviceBuffer(std::size_t payload_bytes, bool with_canaries)
    : bytes_(payload_bytes), pad_(with_canaries ? kCanaryBytes : 0) {
  const std::size_t total = std::max<std::size_t>(bytes_ + 2 * pad_, 256);
  check(cuMemAlloc(&base_, total), "cuMemAlloc");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : base_(std::exchange(other.base_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      pad_(std::exchange(other.pad_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (base_ != 0) cuMemFree(base_);
    base_ = std::exchange(other.base_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    pad_ = std::exchange(other.pad_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (base_ != 0) cuMemFree(base_);
}

void Device::open(int index) {
  ordinal = index;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device, index), "cuDeviceGet");
  char text[256] = {};
  check(cuDeviceGetName(text, sizeof text, device), "cuDeviceGetName");
  name = text;
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  int value = 0;
  check(cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "attr");
  check(cuDeviceGetAttribute(&compute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "attr");
  check(cuDeviceGetAttribute(&compute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "attr");
  check(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device), "attr");
  l2_bytes = static_cast<std::size_t>(value);
  check(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
        "attr");
  max_smem_optin = static_cast<std::size_t>(value);
  check(cuDeviceTotalMem(&total_memory, device), "cuDeviceTotalMem");
  l2_scratch = DeviceBuffer(std::max<std::size_t>(2 * l2_bytes, 64u << 20), false);
}

void Device::measure_bandwidth() {
  if (copy_bandwidth_bps > 0.0) return;
  // Copy bandwidth: 1 GiB device-to-device, best of 5, timed with events.
  const std::size_t copy_bytes = std::size_t{1} << 30;
  DeviceBuffer a(copy_bytes, false);
  DeviceBuffer b(copy_bytes, false);
  check(cuMemsetD32Async(a.data(), 0x3f800000u, copy_bytes / 4, stream), "cuMemsetD32Async");
  CUevent start = nullptr, stop = nullptr;
  check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  float best_ms = 0.0f;
  for (int i = 0; i < 6; ++i) {
    check(cuEventRecord(start, stream), "cuEventRecord");
    check(cuMemcpyDtoDAsync(b.data(), a.data(), copy_bytes, stream), "cuMemcpyDtoDAsync");
    check(cuEventRecord(stop, stream), "cuEventRecord");
    check(cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0.0f;
    check(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    if (i > 0 && (best_ms == 0.0f || ms < best_ms)) best_ms = ms;
  }
  cuEventDestroy(start);
  cuEventDestroy(stop);
  copy_bandwidth_bps = 2.0 * static_cast<double>(copy_bytes) / (best_ms * 1e-3);
}

void Device::flush_l2(std::uint32_t salt) {
  check(cuMemsetD32Async(l2_scratch.data(), 0x9E3779B9u ^ salt, l2_scratch.bytes() / 4, stream),
        "cuMemsetD32Async (L2 flush)");
}

core::Value Device::describe() const {
  return core::Value{{"index", ordinal},
                     {"name", name},
                     {"compute_capability",
                      std::to_string(compute_major) + "." + std::to_string(compute_minor)},
                     {"sm_count", sm_count},
                     {"l2_bytes", l2_bytes},
                     {"memory_bytes", total_memory},
                     {"copy_bandwidth_gbps", copy_bandwidth_bps / 1e9}};
}

core::Value read_clocks(int ordinal) {
  // NVML through dlopen: the runner must not fail to start where NVML is missing.
  static void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return core::Value::object();
  using Init = int (*)();
  using GetHandle = int (*)(unsigned, void**);
  using GetClock = int (*)(void*, int, unsigned*);
  static const auto init = reinterpret_cast<Init>(dlsym(library, "nvmlInit_v2"));
  static const auto get_handle =
      reinterpret_cast<GetHandle>(dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
  static const auto get_clock = reinterpret_cast<GetClock>(dlsym(library, "nvmlDeviceGetClockInfo"));
  static const bool ready = init != nullptr && init() == 0;
  if (!ready || get_handle == nullptr || get_clock == nullptr) return core::Value::object();
  void* handle = nullptr;
  if (get_handle(static_cast<unsigned>(ordinal), &handle) != 0) return core::Value::object();
  unsigned sm = 0, memory = 0;
  constexpr int kClockSm = 1;   // NVML_CLOCK_SM
  constexpr int kClockMem = 2;  // NVML_CLOCK_MEM
  core::Value out = core::Value::object();
  if (get_clock(handle, kClockSm, &sm) == 0) out["sm_mhz"] = sm;
  if (get_clock(handle, kClockMem, &memory) == 0) out["memory_mhz"] = memory;
  return out;
}

}  // namespace crucible::sandbox::runner
