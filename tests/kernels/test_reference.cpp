// Reference lookup: reading, listing, and refusing paths outside kernels/ or in kernels/runner/.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "kernels/reference.hpp"
#include "tasks/registry.hpp"

using namespace crucible;

TEST_CASE("references: the rms_norm reference is read with its launch directive") {
  const auto source = kernels::read_reference(CRUCIBLE_SOURCE_DIR, "kernels/llm/rms_norm.cu");
  REQUIRE(source.ok());
  CHECK(source->find("// @launch if (num_tokens < 1024) rms_norm_kernel<<<num_tokens, 256>>>") !=
        std::string::npos);
  CHECK(source->find("rms_norm_kernel<<<num_tokens, 128>>>") != std::string::npos);
  CHECK(source->find("extern \"C\" __global__") != std::string::npos);
}

struct BadPath {
  const char* path;
  core::ErrorCode code;
};

const BadPath kBadPaths[] = {
    {"/etc/passwd", core::ErrorCode::kInvalidArgument},
    {"kernels/../tasks/llm/rms_norm/task.toml", core::ErrorCode::kInvalidArgument},
    {"tasks/llm/rms_norm/task.toml", core::ErrorCode::kInvalidArgument},
    {"kernels/reference.cpp", core::ErrorCode::kInvalidArgument},
    {"kernels/llm/no_such_kernel.cu", core::ErrorCode::kIo},
    {"kernels/runner/device_values.cu", core::ErrorCode::kInvalidArgument},
    {"kernels/./runner/l2_flush_and_check.cu", core::ErrorCode::kInvalidArgument},
    {"", core::ErrorCode::kInvalidArgument},
};

TEST_CASE(
    "references: paths outside kernels/, runner kernels, non-CUDA and missing files are refused") {
  for (const auto& row : kBadPaths) {
    CAPTURE(row.path);
    const auto source = kernels::read_reference(CRUCIBLE_SOURCE_DIR, row.path);
    REQUIRE_FALSE(source.ok());
    CHECK(source.error().code == row.code);
  }
}

TEST_CASE("references: every task's reference is among the listed references") {
  const auto listed = kernels::list_references(CRUCIBLE_SOURCE_DIR);
  REQUIRE(listed.ok());
  CHECK(std::find(listed->begin(), listed->end(), "kernels/llm/rms_norm.cu") != listed->end());
  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE(registry.ok());
  for (const auto& task : registry->all()) {
    CAPTURE(task.id);
    CHECK(std::find(listed->begin(), listed->end(), task.reference_path) != listed->end());
    const auto source = kernels::read_reference(CRUCIBLE_SOURCE_DIR, task.reference_path);
    REQUIRE(source.ok());
    CHECK(*source == task.reference_source);
  }
}

TEST_CASE("references: the runner's own kernels under kernels/runner/ are not listed") {
  const auto listed = kernels::list_references(CRUCIBLE_SOURCE_DIR);
  REQUIRE(listed.ok());
  // The folder does hold .cu files (embedded in the runner), so the check below can fail.
  REQUIRE(std::filesystem::is_regular_file(std::filesystem::path(CRUCIBLE_SOURCE_DIR) /
                                           "kernels/runner/device_values.cu"));
  for (const auto& path : *listed) {
    CAPTURE(path);
    CHECK_FALSE(kernels::is_runner_kernel(path));
    CHECK(path.rfind("kernels/runner/", 0) == std::string::npos);
  }
}

struct RunnerPath {
  const char* path;
  bool runner;
};

const RunnerPath kRunnerPaths[] = {
    {"kernels/runner", true},
    {"kernels/runner/device_values.cu", true},
    {"kernels/./runner/sub/x.cu", true},
    {"kernels/runner_x.cu", false},
    {"kernels/llm/runner/x.cu", false},
    {"kernels/llm/rms_norm.cu", false},
    {"runner/child/device.cpp", false},
};

TEST_CASE("references: a path is a runner kernel exactly when it lies in kernels/runner/") {
  for (const auto& row : kRunnerPaths) {
    CAPTURE(row.path);
    CHECK(kernels::is_runner_kernel(row.path) == row.runner);
  }
}
