// Reference lookup: reading, listing, and refusing paths outside kernels/.
#include <doctest/doctest.h>

#include <algorithm>

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
    {"", core::ErrorCode::kInvalidArgument},
};

TEST_CASE("references: paths outside kernels/, non-CUDA files and missing files are refused") {
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
