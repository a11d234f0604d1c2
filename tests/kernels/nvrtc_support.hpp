// NVRTC compilation and launch-directive scanning shared by the kernel test suites.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace crucible::kernels_test {

std::string read_text(const std::filesystem::path& path);

// The kernel name expressions of every `// @launch` directive: the text between the optional
// `if (...)` guard and `<<<`, e.g. "rms_norm_kernel" or "gemm<float, 128>". The full directive
// grammar belongs to sandbox/; this is just enough to know which kernels must exist.
std::vector<std::string> launched_kernels(const std::string& source);

struct Compiled {
  bool ok = false;
  std::string log;
  std::string cubin;
  std::vector<std::string> lowered;  // per requested kernel, when ok
};

// The name under which compile_with_options offers the compile worker's prelude
// (sandbox::compile_prelude()) as a header.
inline constexpr const char* kPreludeName = "crucible_prelude.cuh";

// Compiles `source` for CRUCIBLE_TEST_ARCH with the CUDA and CCCL include paths and the compile
// worker's prelude pre-included (as the server compiles it), asking for the lowered names of
// `kernels`.
Compiled compile(const std::string& source, const std::string& name,
                 const std::vector<std::string>& kernels);

// Compiles `source` with exactly `options` (nothing added; the prelude is there to include but
// not pre-included), asking for the lowered names of `kernels` (none: the program is compiled as
// it stands).
Compiled compile_with_options(const std::string& source, const std::string& name,
                              const std::vector<std::string>& options,
                              const std::vector<std::string>& kernels);

// The functions a cubin defines (STT_FUNC symbols with a section: kernels and non-inlined device
// functions), sorted; empty when `cubin` is not a 64-bit ELF file or is malformed.
std::vector<std::string> defined_functions(const std::string& cubin);

// Every *.cu file under `root`, sorted.
std::vector<std::filesystem::path> cuda_files_under(const std::filesystem::path& root);

}  // namespace crucible::kernels_test
