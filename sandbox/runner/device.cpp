// Device setup, buffers, L2 flush and NVML clock reads.
#include "sandbox/runner/device.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <atomic>
#include <chrono>
#include <utility>

#include "sandbox/runner/cuda_check.hpp"

namespace crucible::sandbox::runner {

namespace {
std::atomic<bool> g_abandoned{false};
}  // namespace

void abandon_context() { g_abandoned.store(true); }
bool context_abandoned() { return g_abandoned.load(); }

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
    if (base_ != 0 && !context_abandoned()) cuMemFree(base_);
    base_ = std::exchange(other.base_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    pad_ = std::exchange(other.pad_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (base_ != 0 && !context_abandoned()) cuMemFree(base_);
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
  l2_sink = DeviceBuffer(4096, false);
  check(cuMemsetD32Async(l2_scratch.data(), 0x3f800000u, l2_scratch.bytes() / 4, stream),
        "cuMemsetD32Async");
  // The sweep kernel: every thread reads 16-byte vectors across the buffer; the sum is stored
  // only when it equals a value no input produces, so the loads cannot be optimised away.
  static const char* kSweep = R"(
extern "C" __global__ void crucible_l2_sweep(const uint4* data, unsigned long long count,
                                             unsigned int salt, unsigned int* sink) {
  unsigned int acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const uint4 v = data[i];
    acc ^= v.x + v.y + v.z + v.w;
  }
  if (acc == salt) sink[threadIdx.x & 1023] = acc;
}
)";
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, kSweep, "sweep.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    throw CudaFailure(CUDA_ERROR_UNKNOWN, "nvrtcCreateProgram (L2 sweep)");
  }
  const std::string arch =
      "-arch=sm_" + std::to_string(compute_major) + std::to_string(compute_minor);
  const char* options[] = {arch.c_str()};
  const bool compiled = nvrtcCompileProgram(program, 1, options) == NVRTC_SUCCESS;
  std::size_t size = 0;
  std::string cubin;
  if (compiled && nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS) {
    cubin.resize(size);
    nvrtcGetCUBIN(program, cubin.data());
  }
  nvrtcDestroyProgram(&program);
  if (cubin.empty()) throw CudaFailure(CUDA_ERROR_UNKNOWN, "compiling the L2 sweep kernel");
  check(cuModuleLoadData(&sweep_module, cubin.data()), "cuModuleLoadData (L2 sweep)");
  check(cuModuleGetFunction(&sweep, sweep_module, "crucible_l2_sweep"), "cuModuleGetFunction");
  check(cuStreamSynchronize(stream), "L2 scratch");
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
  CUdeviceptr data = l2_scratch.data();
  unsigned long long count = l2_scratch.bytes() / 16;
  unsigned int value = 0x9E3779B9u ^ salt;  // a match only writes to the sink: harmless
  CUdeviceptr sink = l2_sink.data();
  void* params[] = {&data, &count, &value, &sink};
  check(cuLaunchKernel(sweep, static_cast<unsigned>(sm_count) * 4, 1, 1, 512, 1, 1, 0, stream,
                       params, nullptr),
        "L2 sweep");
}

core::Value Device::describe() const {
  return core::Value{
      {"index", ordinal},
      {"name", name},
      {"compute_capability", std::to_string(compute_major) + "." + std::to_string(compute_minor)},
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
  static const auto get_clock =
      reinterpret_cast<GetClock>(dlsym(library, "nvmlDeviceGetClockInfo"));
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
