// Device setup, buffers, L2 flush and NVML clock reads.
#include "runner/child/device.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "judge/compare.hpp"
#include "kernels/runner/module_source.hpp"
#include "runner/child/cuda_check.hpp"

namespace crucible::runner::child {

namespace {
std::atomic<bool> g_abandoned{false};
}  // namespace

void abandon_context() { g_abandoned.store(true); }
bool context_abandoned() { return g_abandoned.load(); }

DeviceBuffer::DeviceBuffer(std::size_t payload_bytes, bool with_canaries)
    : bytes_(payload_bytes), pad_(with_canaries ? kCanaryBytes : 0) {
  check(cuMemAlloc(&base_, total_allocation()), "cuMemAlloc");
}

void DeviceBuffer::release() {
  if (base_ != 0 && !context_abandoned()) cuMemFree(base_);
  base_ = 0;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : base_(std::exchange(other.base_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      pad_(std::exchange(other.pad_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    pad_ = std::exchange(other.pad_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

PinnedHostBuffer::PinnedHostBuffer(std::size_t bytes) : bytes_(bytes) {
  void* data = nullptr;
  check(cuMemHostAlloc(&data, std::max<std::size_t>(bytes, 1), 0), "cuMemHostAlloc");
  data_ = static_cast<std::byte*>(data);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

void PinnedHostBuffer::release() {
  if (data_ != nullptr && !context_abandoned()) cuMemFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
}

std::byte* Device::staging(const std::string& key, std::size_t bytes) {
  PinnedHostBuffer& buffer = staging_[key];
  if (buffer.bytes() < bytes) {
    buffer = PinnedHostBuffer();  // free first: the old and new buffer need not coexist
    buffer = PinnedHostBuffer(bytes + bytes / 4);
  }
  return buffer.data();
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
  // The runner's own kernels (kernels/runner/*.cu, embedded at build time), compiled once per
  // process. `crucible_l2_sweep`: every thread reads 16-byte vectors across the buffer; the sum
  // is stored only when it equals a value no input produces, so the loads cannot be optimised
  // away. `crucible_check`: the elementwise rule of compare_outputs (judge/compare.hpp)
  // on device memory, built without FMA contraction so its double arithmetic rounds exactly as
  // the host's does. `crucible_generate` (device_values.hpp): input values, bit for bit the host
  // generators', for the same reason built without contraction. `crucible_scramble`: XOR with a
  // keystream, so the reference's answer can wait on the device while candidate code runs.
  const std::string source = kernels::runner_program_source();
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), kernels::kRunnerProgramName, 0, nullptr,
                         nullptr) != NVRTC_SUCCESS) {
    throw CudaFailure(CUDA_ERROR_UNKNOWN, "nvrtcCreateProgram (runner kernels)");
  }
  const std::vector<std::string> options = kernels::runner_program_options(
      "sm_" + std::to_string(compute_major) + std::to_string(compute_minor));
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());
  const bool compiled = nvrtcCompileProgram(program, static_cast<int>(option_pointers.size()),
                                            option_pointers.data()) == NVRTC_SUCCESS;
  std::size_t size = 0;
  std::string cubin;
  if (compiled && nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS) {
    cubin.resize(size);
    nvrtcGetCUBIN(program, cubin.data());
  }
  std::string log;
  if (cubin.empty() && nvrtcGetProgramLogSize(program, &size) == NVRTC_SUCCESS) {
    log.resize(size);
    nvrtcGetProgramLog(program, log.data());
  }
  nvrtcDestroyProgram(&program);
  if (cubin.empty()) throw CudaFailure(CUDA_ERROR_UNKNOWN, "compiling the runner kernels: " + log);
  check(cuModuleLoadData(&runner_module, cubin.data()), "cuModuleLoadData (runner kernels)");
  check(cuModuleGetFunction(&sweep, runner_module, kernels::kL2SweepKernel), "cuModuleGetFunction");
  check(cuModuleGetFunction(&check_kernel, runner_module, kernels::kCheckKernel),
        "cuModuleGetFunction");
  check(cuModuleGetFunction(&generate_kernel, runner_module, kernels::kGenerateKernel),
        "cuModuleGetFunction");
  check(cuModuleGetFunction(&scramble_kernel, runner_module, kernels::kScrambleKernel),
        "cuModuleGetFunction (scramble)");
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

namespace {
int check_kind(core::DType dtype) {
  switch (dtype) {
    case core::DType::kBF16:
      return 0;
    case core::DType::kF16:
      return 1;
    case core::DType::kF32:
      return 2;
    case core::DType::kF64:
      return 3;
    case core::DType::kFP8E4M3:
      return 4;
    case core::DType::kFP8E5M2:
      return 5;
    case core::DType::kI8:
      return 6;
    case core::DType::kU8:
    case core::DType::kBool:
      return 7;
    case core::DType::kI16:
      return 8;
    case core::DType::kI32:
      return 9;
    case core::DType::kI64:
      return 10;
  }
  return 10;
}
}  // namespace

void Device::scramble(CUdeviceptr data, std::size_t bytes, std::uint64_t key) {
  if (bytes == 0) return;
  unsigned long long n = bytes;
  unsigned long long k = key;
  void* params[] = {&data, &n, &k};
  const unsigned int blocks = static_cast<unsigned int>(
      std::clamp<std::size_t>((bytes / 8 + 256) / 256, 1, static_cast<std::size_t>(sm_count) * 8));
  check(cuLaunchKernel(scramble_kernel, blocks, 1, 1, 256, 1, 1, 0, stream, params, nullptr),
        "cuLaunchKernel (scramble)");
}

void Device::launch_equal(CUdeviceptr got, CUdeviceptr want, std::size_t bytes,
                          CUdeviceptr result) {
  // As 8-byte words where both are aligned to them: a large input's check then reads at full
  // bandwidth.
  if (bytes % 8 == 0 && got % 8 == 0 && want % 8 == 0) {
    launch_check(got, want, bytes / 8, core::DType::kI64, 0.0, 0.0, result);
    return;
  }
  launch_check(got, want, bytes, core::DType::kU8, 0.0, 0.0, result);
}

void Device::launch_check(CUdeviceptr got, CUdeviceptr want, std::size_t count, core::DType dtype,
                          double atol, double rtol, CUdeviceptr result, int variant) {
  unsigned long long n = count;
  int kind = check_kind(dtype);
  // The integer poison of `variant`, as the kernel reads it.
  long long poison = 0;
  if (kind >= 6) {
    const std::uint64_t bits = judge::poison_pattern(dtype, variant);
    switch (core::dtype_size(dtype)) {
      case 1:
        poison = kind == 6 ? static_cast<std::int8_t>(bits) : static_cast<long long>(bits & 0xFF);
        break;
      case 2:
        poison = static_cast<std::int16_t>(bits);
        break;
      case 4:
        poison = static_cast<std::int32_t>(bits);
        break;
      default:
        poison = static_cast<long long>(bits);
    }
  }
  void* params[] = {&got, &want, &n, &kind, &atol, &rtol, &poison, &result};
  const unsigned int blocks = static_cast<unsigned int>(
      std::clamp<std::size_t>((count + 255) / 256, 1, static_cast<std::size_t>(sm_count) * 8));
  check(cuLaunchKernel(check_kernel, blocks, 1, 1, 256, 1, 1, 0, stream, params, nullptr),
        "cuLaunchKernel (output check)");
}

CheckResult CheckResult::read(const std::byte* words) {
  std::uint64_t w[Device::kCheckWords];
  std::memcpy(w, words, sizeof w);
  return CheckResult{w[0], w[1] != 0, w[2] != 0, std::bit_cast<double>(w[3]),
                     std::bit_cast<double>(w[4])};
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

}  // namespace crucible::runner::child
