// Times one rms_norm kernel the way the runner does (CUPTI activity records, L2 flushed between
// calls), or just launches it (--no-cupti) so `ncu --metrics gpu__time_duration.sum` can time
// the same launches; bench/gpu/compare_ncu.py puts the two side by side.
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "runner/child/kernel_timer.hpp"

using namespace crucible::runner::child;

int main(int argc, char** argv) {
  std::string path = "kernels/llm/rms_norm.cu";
  std::string kernel = "rms_norm_kernel";
  int tokens = 4096, hidden = 4096, reps = 200, threads = 256;
  bool cupti = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] { return std::string(argv[++i]); };
    if (arg == "--source")
      path = next();
    else if (arg == "--kernel")
      kernel = next();
    else if (arg == "--tokens")
      tokens = std::stoi(next());
    else if (arg == "--hidden")
      hidden = std::stoi(next());
    else if (arg == "--reps")
      reps = std::stoi(next());
    else if (arg == "--threads")
      threads = std::stoi(next());
    else if (arg == "--no-cupti")
      cupti = false;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = "#include <cuda_bf16.h>\n" + text.str();
  nvrtcProgram program;
  nvrtcCreateProgram(&program, source.c_str(), "k.cu", 0, nullptr, nullptr);
  const char* options[] = {"-arch=sm_90a", "-std=c++17", "-I/usr/local/cuda/include"};
  if (nvrtcCompileProgram(program, 3, options) != NVRTC_SUCCESS) {
    std::size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    std::fprintf(stderr, "compile failed:\n%s\n", log.c_str());
    return 1;
  }
  std::size_t cubin_size = 0;
  nvrtcGetCUBINSize(program, &cubin_size);
  std::string cubin(cubin_size, '\0');
  nvrtcGetCUBIN(program, cubin.data());

  Device device;
  device.open(0);
  KernelTimer* timer = nullptr;
  if (cupti) {
    const auto error = KernelTimer::start(&timer);
    if (!error.empty()) {
      std::fprintf(stderr, "CUPTI: %s\n", error.c_str());
      return 1;
    }
  }
  CUmodule module;
  check(cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
  CUfunction function;
  check(cuModuleGetFunction(&function, module, kernel.c_str()), "cuModuleGetFunction");
  const std::size_t count = static_cast<std::size_t>(tokens) * hidden;
  DeviceBuffer out(count * 2, false), input(count * 2, false), weight(hidden * 2, false);
  check(cuMemsetD16Async(input.data(), 0x3f80, count, device.stream), "memset");
  check(cuMemsetD16Async(weight.data(), 0x3f80, hidden, device.stream), "memset");
  float epsilon = 1e-6f;
  CUdeviceptr out_ptr = out.data(), in_ptr = input.data(), w_ptr = weight.data();
  void* params[] = {&out_ptr, &in_ptr, &w_ptr, &epsilon, &hidden};
  CUlaunchConfig config{};
  config.gridDimX = tokens;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = device.stream;
  std::vector<double> durations;
  for (int r = 0; r < reps; ++r) {
    device.flush_l2(static_cast<std::uint32_t>(r));
    if (timer != nullptr) timer->set_tag(static_cast<std::uint64_t>(r + 1));
    check(cuLaunchKernelEx(&config, function, params, nullptr), "cuLaunchKernelEx");
    if (timer != nullptr) timer->set_tag(0);
  }
  check(cuStreamSynchronize(device.stream), "sync");
  if (timer != nullptr) {
    for (const auto& [tag, span] : timer->collect()) durations.push_back(span.duration_ns());
    std::sort(durations.begin(), durations.end());
    std::printf(
        "{\"tool\": \"cupti\", \"kernel\": \"%s\", \"tokens\": %d, \"hidden\": %d, "
        "\"reps\": %zu, \"median_ns\": %.1f, \"min_ns\": %.1f, \"max_ns\": %.1f}\n",
        kernel.c_str(), tokens, hidden, durations.size(), durations[durations.size() / 2],
        durations.front(), durations.back());
  }
  return 0;
}
