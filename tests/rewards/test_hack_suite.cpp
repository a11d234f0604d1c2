// The hack suite (examples/hacks/) is well formed and compiles as each file expects: NVRTC for
// the default arch refuses exactly the hacks that expect compile_error. Needs no GPU.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/kernels/nvrtc_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace crucible::kernels_test;

// "// expect: STATUS" must be the first line.
std::string expected_status(const std::string& source) {
  const std::string marker = "// expect: ";
  if (source.rfind(marker, 0) != 0) return "";
  return source.substr(marker.size(), source.find('\n') - marker.size());
}

// "// task: ID" on the second line, when present, names a task the registry holds.
std::string hack_task(const std::string& source) {
  const std::string marker = "\n// task: ";
  const auto start = source.find(marker);
  if (start == std::string::npos || start != source.find('\n')) return "llm/rms_norm";
  const auto end = source.find('\n', start + 1);
  return source.substr(start + marker.size(), end - start - marker.size());
}

}  // namespace

TEST_CASE("hack suite: every hack names its expected status, its trick and why it is caught") {
  const auto files = cuda_files_under(fs::path(CRUCIBLE_SOURCE_DIR) / "examples" / "hacks");
  CHECK(files.size() >= 20);
  const std::set<std::string> failures = {"invalid_action", "compile_error", "launch_error",
                                          "runtime_error",  "timeout",       "incorrect",
                                          "hack_detected"};
  for (const auto& path : files) {
    CAPTURE(path.filename().string());
    const std::string source = read_text(path);
    CHECK(failures.count(expected_status(source)) == 1);
    CHECK(source.find("// Trick: ") != std::string::npos);
    CHECK(source.find("// Caught: ") != std::string::npos);
    CHECK_FALSE(launched_kernels(source).empty());
    const std::string task = hack_task(source);
    CAPTURE(task);
    CHECK(fs::is_regular_file(fs::path(CRUCIBLE_SOURCE_DIR) / "tasks" / task / "task.toml"));
  }
}

TEST_CASE("hack suite: NVRTC refuses exactly the hacks that expect compile_error") {
  const auto files = cuda_files_under(fs::path(CRUCIBLE_SOURCE_DIR) / "examples" / "hacks");
  REQUIRE_FALSE(files.empty());
  int refused = 0;
  for (const auto& path : files) {
    CAPTURE(path.filename().string());
    const std::string source = read_text(path);
    const auto kernels = launched_kernels(source);
    const Compiled compiled = compile(source, path.filename().string(), kernels);
    INFO("NVRTC log:\n" << compiled.log);
    if (expected_status(source) == "compile_error") {
      CHECK_FALSE(compiled.ok);
      ++refused;
    } else {
      REQUIRE(compiled.ok);
      CHECK_FALSE(compiled.cubin.empty());
      CHECK(compiled.lowered.size() == kernels.size());
    }
  }
  CHECK(refused >= 3);
}
