// Roofline bytes, FLOPs and time floors per case.
#include <doctest/doctest.h>

#include "tasks/registry.hpp"
#include "tasks/roofline.hpp"

using namespace crucible;
using namespace crucible::tasks;

namespace {

struct RooflineRow {
  const char* case_name;
  std::int64_t bytes;
  std::int64_t flops;
  double floor_ns;  // on the H200 peak
};

// bytes = 2*T*H*2 + H*2, flops = 4*T*H.
const RooflineRow kRows[] = {
    {"decode_1", 2 * 1 * 4096 * 2 + 4096 * 2, 4 * 1 * 4096, 24576 / 4.8e3},
    {"decode_32", 2 * 32 * 4096 * 2 + 4096 * 2, 4 * 32 * 4096, 532480 / 4.8e3},
    {"prefill_4096", 2LL * 4096 * 4096 * 2 + 4096 * 2, 4LL * 4096 * 4096, 67117056 / 4.8e3},
    {"h_tokens_333", 2 * 333 * 4096 * 2 + 4096 * 2, 4 * 333 * 4096, 5464064 / 4.8e3},
    {"h_llama70b_width_8192", 2 * 129 * 8192 * 2 + 8192 * 2, 4 * 129 * 8192, 4243456 / 4.8e3},
};

}  // namespace

TEST_CASE("roofline: rms_norm bytes, flops and floors match the formulas") {
  auto registry = Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE(registry.ok());
  const Task* task = registry->find("llm/rms_norm");
  REQUIRE(task != nullptr);
  for (const auto& row : kRows) {
    CAPTURE(row.case_name);
    const Case* c = task->find_case(row.case_name);
    REQUIRE(c != nullptr);
    const auto cost = roofline_cost(*task, *c);
    REQUIRE(cost.ok());
    CHECK(cost->bytes == row.bytes);
    CHECK(cost->flops == row.flops);
    CHECK(roofline_floor_ns(*cost, kH200Peak) == doctest::Approx(row.floor_ns));
  }
}

TEST_CASE("roofline: the floor is set by whichever of memory and compute is slower") {
  const GpuPeak peak{1e12, 1e15};
  CHECK(roofline_floor_ns({1000, 0}, peak) == doctest::Approx(1.0));
  CHECK(roofline_floor_ns({1000, 1000000000000}, peak) == doctest::Approx(1e6));
  CHECK(roofline_floor_ns({0, 0}, peak) == 0.0);
}

TEST_CASE("roofline: a case missing a symbol is an error, not a crash") {
  Task task;
  task.id = "llm/x";
  task.roofline.bytes_expr = core::parse_expr("n * 2").value();
  task.roofline.flops_expr = core::parse_expr("0").value();
  Case c;
  c.name = "empty";
  const auto cost = roofline_cost(task, c);
  REQUIRE_FALSE(cost.ok());
  CHECK(cost.error().code == core::ErrorCode::kInvalidArgument);
  CHECK(cost.error().message.find("roofline.bytes") != std::string::npos);
}
