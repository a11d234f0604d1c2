// The runner's program: the embedded kernel texts in order, and its NVRTC options.
#include "kernels/runner/module_source.hpp"

#include <cstddef>

namespace crucible::embedded {
// Defined by the sources cmake/embed_text.cmake generates (target crucible_runner_kernels).
extern const char kL2FlushAndCheckCu[];
extern const std::size_t kL2FlushAndCheckCuBytes;
extern const char kDeviceValuesCu[];
extern const std::size_t kDeviceValuesCuBytes;
}  // namespace crucible::embedded

namespace crucible::kernels {

std::span<const RunnerSource> runner_sources() {
  // The L2 flush and output check first, then the value generators: the order of the text the
  // runner compiled when the two were string literals in runner/child/.
  static const RunnerSource kSources[] = {
      {"kernels/runner/l2_flush_and_check.cu",
       {embedded::kL2FlushAndCheckCu, embedded::kL2FlushAndCheckCuBytes}},
      {"kernels/runner/device_values.cu",
       {embedded::kDeviceValuesCu, embedded::kDeviceValuesCuBytes}},
  };
  return kSources;
}

std::string runner_program_source() {
  std::string source;
  for (const RunnerSource& part : runner_sources()) source += part.text;
  return source;
}

std::vector<std::string> runner_program_options(std::string_view arch) {
  return {"-arch=" + std::string(arch), "--fmad=false"};
}

}  // namespace crucible::kernels
