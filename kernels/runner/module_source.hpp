// The GPU runner's own kernels as the one NVRTC program it compiles: texts, options, names.
//
// The kernels are .cu files beside this header (an L2 flush, the device-side output check and a
// scrambler; the input value generators), embedded in the binary at build time by
// cmake/embed_text.cmake, byte for byte. They are not task references: kernels::list_references
// skips this folder. The runner (runner/child/device.cpp) and the NVRTC compile test
// (tests/kernels) both build the program from this header, so the test compiles exactly what the
// runner compiles.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace crucible::kernels {

// One of the runner's kernel sources: its path relative to the repository root
// ("kernels/runner/device_values.cu") and its text as embedded at build time.
struct RunnerSource {
  std::string_view path;
  std::string_view text;
};

// Every .cu file of kernels/runner/, in the order runner_program_source() joins them. Static
// storage; thread-safe.
std::span<const RunnerSource> runner_sources();

// The runner's program: the texts of runner_sources(), concatenated in order, as one source.
std::string runner_program_source();

// The name NVRTC gives the program in its diagnostics.
inline constexpr const char* kRunnerProgramName = "crucible_runner.cu";

// The NVRTC options of the runner's program for the GPU architecture `arch` ("sm_90"):
// "-arch=<arch>" and "--fmad=false", since the output check and the value generators must
// round every double exactly as the host does (no FMA contraction).
std::vector<std::string> runner_program_options(std::string_view arch);

// The kernels the runner takes from the compiled module (cuModuleGetFunction), by name.
inline constexpr const char* kL2SweepKernel = "crucible_l2_sweep";
inline constexpr const char* kCheckKernel = "crucible_check";
inline constexpr const char* kGenerateKernel = "crucible_generate";
inline constexpr const char* kScrambleKernel = "crucible_scramble";
inline constexpr std::array<const char*, 4> kRunnerKernels = {kL2SweepKernel, kCheckKernel,
                                                              kGenerateKernel, kScrambleKernel};

}  // namespace crucible::kernels
