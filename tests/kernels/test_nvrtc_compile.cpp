// Every reference kernel, example solution and the runner's own program compiles with NVRTC.
#include <doctest/doctest.h>
#include <nvrtc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/reference.hpp"
#include "kernels/runner/module_source.hpp"
#include "tests/kernels/nvrtc_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace crucible::kernels_test;

void check_compiles(const fs::path& path) {
  CAPTURE(path.string());
  const std::string source = read_text(path);
  const auto kernels = launched_kernels(source);
  CHECK_MESSAGE(!kernels.empty(), "no // @launch directive");
  const Compiled compiled = compile(source, path.filename().string(), kernels);
  INFO("NVRTC log:\n" << compiled.log);
  REQUIRE(compiled.ok);
  CHECK_FALSE(compiled.cubin.empty());
  REQUIRE(compiled.lowered.size() == kernels.size());
  for (const auto& lowered : compiled.lowered) {
    CAPTURE(lowered);
    // The symbol table of the cubin names every kernel the directives launch.
    CHECK(compiled.cubin.find(lowered + '\0') != std::string::npos);
  }
}

}  // namespace

TEST_CASE("nvrtc: the launch-directive scan finds names, guarded launches and templates") {
  const auto names = launched_kernels(
      "// @launch a<<<n, 256>>>(x)\n"
      "//   @launch if (n > 4096) big<float, 4><<<dim3(cdiv(n, 4), 1, 1), 512, 49152>>>(x)\n"
      "// no directive here <<<1, 1>>>\n"
      "// @launch if (n % 8 == 0)\n"
      "//     wide<8><<<cdiv(n, 1024), 128>>>(x,\n"
      "//     n)\n");
  CHECK(names == std::vector<std::string>{"a", "big<float, 4>", "wide<8>"});
}

TEST_CASE("nvrtc: every reference kernel compiles and defines the kernels it launches") {
  const auto references = crucible::kernels::list_references(CRUCIBLE_SOURCE_DIR);
  REQUIRE(references.ok());
  REQUIRE_FALSE(references->empty());
  for (const auto& relative : *references) check_compiles(fs::path(CRUCIBLE_SOURCE_DIR) / relative);
}

TEST_CASE("nvrtc: every example solution compiles and defines the kernels it launches") {
  // Each task folder's solution.cu, and the deliberately wrong ones under examples/.
  auto files = cuda_files_under(fs::path(CRUCIBLE_SOURCE_DIR) / "examples" / "solutions");
  std::size_t solutions = 0;
  for (const auto& path : cuda_files_under(fs::path(CRUCIBLE_SOURCE_DIR) / "tasks")) {
    if (path.filename() != "solution.cu") continue;
    files.push_back(path);
    ++solutions;
  }
  CHECK(solutions >= 10);
  for (const auto& path : files) check_compiles(path);
}

TEST_CASE("nvrtc: the runner's own kernels are embedded as the .cu files under kernels/runner/") {
  // Every .cu file of the folder is part of the runner's program, with its text byte for byte.
  const fs::path root(CRUCIBLE_SOURCE_DIR);
  std::vector<std::string> on_disk;
  for (const auto& path : cuda_files_under(root / "kernels" / "runner")) {
    on_disk.push_back(path.lexically_relative(root).generic_string());
  }
  std::vector<std::string> embedded;
  for (const auto& part : crucible::kernels::runner_sources()) {
    CAPTURE(part.path);
    embedded.emplace_back(part.path);
    CHECK(part.text == read_text(root / part.path));
    CHECK(part.text.find('\0') == std::string_view::npos);
  }
  std::sort(embedded.begin(), embedded.end());
  CHECK(embedded == on_disk);
  CHECK(embedded.size() >= 2);
}

TEST_CASE(
    "nvrtc: the runner's program compiles as the runner compiles it and defines its kernels") {
  // The same source (the embedded texts, concatenated), name and options as Device::open, for
  // the default arch instead of the device's; no name expressions, so nothing is added.
  const std::string source = crucible::kernels::runner_program_source();
  std::string joined;
  for (const auto& part : crucible::kernels::runner_sources()) joined += part.text;
  CHECK(source == joined);
  const auto options = crucible::kernels::runner_program_options(CRUCIBLE_TEST_ARCH);
  CHECK(options ==
        std::vector<std::string>{std::string("-arch=") + CRUCIBLE_TEST_ARCH, "--fmad=false"});
  const Compiled compiled =
      compile_with_options(source, crucible::kernels::kRunnerProgramName, options, {});
  INFO("NVRTC log:\n" << compiled.log);
  REQUIRE(compiled.ok);
  const auto functions = defined_functions(compiled.cubin);
  CAPTURE(functions.size());
  for (const std::string kernel : crucible::kernels::kRunnerKernels) {
    CAPTURE(kernel);
    CHECK(std::binary_search(functions.begin(), functions.end(), kernel));
  }
  // The symbol check can fail: a name the program does not define is not found.
  CHECK_FALSE(std::binary_search(functions.begin(), functions.end(),
                                 std::string("crucible_no_such_kernel")));
}

TEST_CASE("nvrtc: a source with an error fails to compile with a log, so the checks can fail") {
  const Compiled compiled = compile(
      "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n", "bad.cu", {"k"});
  CHECK_FALSE(compiled.ok);
  CHECK(compiled.log.find("undefined_name") != std::string::npos);
}
