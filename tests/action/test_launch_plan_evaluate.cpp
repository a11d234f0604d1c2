// Evaluating a plan for one case, and matching its arguments to a compiled kernel's parameters.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "action/launch_plan.hpp"
#include "tests/action/plan_test_support.hpp"

using namespace crucible;
using namespace crucible::action;
using crucible::action::testing::parse;
using crucible::action::testing::rms_norm_context;
using crucible::action::testing::shape;

namespace {

std::string dims(const std::array<std::uint32_t, 3>& v) {
  return std::to_string(v[0]) + "x" + std::to_string(v[1]) + "x" + std::to_string(v[2]);
}

// "launch#grid/block/smem[/cluster]" per launch that runs, then the workspace sizes.
std::string describe(const ConcretePlan& plan) {
  std::string out;
  for (const auto& launch : plan.launches) {
    out += std::to_string(launch.launch) + "#" + dims(launch.grid) + "/" + dims(launch.block) +
           "/" + std::to_string(launch.smem_bytes);
    if (launch.has_cluster) out += "/" + dims(launch.cluster);
    out += " ";
  }
  for (const auto bytes : plan.workspace_bytes) out += "ws" + std::to_string(bytes) + " ";
  return out;
}

const char* const kGuarded =
    "// @launch if (num_tokens <= 64) small<<<num_tokens, 128>>>(out, input, weight, epsilon, "
    "hidden_size)\n"
    "// @launch if (num_tokens > 64) big<<<dim3(cdiv(num_tokens, 4), 2), dim3(32, 4), "
    "hidden_size * 2>>>(out, input, weight, epsilon, hidden_size, partials)\n"
    "// @workspace partials float[num_tokens * 2]\n"
    "// @cluster big (2, 2)\n";

}  // namespace

TEST_CASE("launch plan: evaluation gives concrete shapes per case") {
  struct Case {
    const char* source;
    std::int64_t num_tokens;
    std::int64_t hidden_size;
    const char* concrete;
  };
  const Case cases[] = {
      {"// @launch k<<<num_tokens, 256>>>(out)", 7, 4096, "0#7x1x1/256x1x1/0 "},
      {kGuarded, 1, 4096, "0#1x1x1/128x1x1/0 ws8 "},
      {kGuarded, 64, 4096, "0#64x1x1/128x1x1/0 ws512 "},
      {kGuarded, 4096, 8192, "1#1024x2x1/32x4x1/16384/2x2x1 ws32768 "},
      {"// @launch a<<<1, 32>>>(out)\n// @launch b<<<dim3(hidden_size / 128, num_tokens), "
       "min(hidden_size, 1024)>>>(out)",
       3, 2048, "0#1x1x1/32x1x1/0 1#16x3x1/1024x1x1/0 "},
      {"// @launch k<<<max(1, num_tokens / 0x1000), 64, 227 * 1024>>>(out)", 100, 64,
       "0#1x1x1/64x1x1/232448 "},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string source = c.source;
    CAPTURE(source);
    CAPTURE(c.num_tokens);
    const auto concrete = evaluate_plan(parse(source), shape(c.num_tokens, c.hidden_size), context);
    REQUIRE_MESSAGE(concrete.ok(), concrete.error().message);
    CHECK(describe(*concrete) == c.concrete);
    CHECK(concrete->symbol_values == std::vector<std::int64_t>{c.num_tokens, c.hidden_size});
  }
}

TEST_CASE("launch plan: evaluation errors name the line and the case") {
  struct Case {
    const char* source;
    std::int64_t num_tokens;
    std::int64_t hidden_size;
    const char* message;
  };
  const Case cases[] = {
      {"// @launch k<<<num_tokens, hidden_size>>>(out)", 4, 2048,
       "line 1: block size 2048 exceeds the 1024 threads a block may have (for num_tokens=4, "
       "hidden_size=2048)"},
      {"// @launch k<<<num_tokens - 4, 32>>>(out)", 4, 2048,
       "line 1: grid is 0; every grid, block and cluster dimension must be at least 1 (for "
       "num_tokens=4, hidden_size=2048)"},
      {"// @launch k<<<dim3(1, num_tokens), 32>>>(out)", 70000, 2048,
       "line 1: grid y 70000 exceeds the device limit of 65535; put the largest dimension in x "
       "(for num_tokens=70000, hidden_size=2048)"},
      {"// @launch k<<<num_tokens * hidden_size, 32>>>(out)", 65536, 65536,
       "line 1: grid 4294967296 exceeds the device limit of 2147483647 (for num_tokens=65536, "
       "hidden_size=65536)"},
      {"// @launch k<<<1, 32, hidden_size * 64>>>(out)", 1, 8192,
       "line 1: shared memory size 524288 bytes exceeds the 232448 bytes of dynamic shared memory "
       "a block may use (for num_tokens=1, hidden_size=8192)"},
      {"// @launch k<<<cdiv(num_tokens, hidden_size - 2048), 32>>>(out)", 5, 2048,
       "line 1: grid 'cdiv(num_tokens, hidden_size - 2048)': column 1: cdiv divisor must be "
       "positive in 'cdiv(num_tokens, hidden_size - 2048)', got 0 (for num_tokens=5, "
       "hidden_size=2048)"},
      {"// @launch k<<<1, 32>>>(out)\n// @launch if (hidden_size / (num_tokens - 5) > 1) "
       "k<<<1, 32>>>(out)",
       5, 2048,
       "line 2: if condition 'hidden_size / (num_tokens - 5) > 1': column 13: division by zero in "
       "'hidden_size / (num_tokens - 5)' (for num_tokens=5, hidden_size=2048)"},
      {"// @launch k<<<num_tokens * num_tokens * num_tokens, 32>>>(out)", 3000000, 1,
       "line 1: grid 'num_tokens * num_tokens * num_tokens': column 25: signed 64-bit overflow in "
       "'num_tokens * num_tokens * num_tokens' (9000000000000 * 3000000) (for "
       "num_tokens=3000000, hidden_size=1)"},
      {kGuarded, 4098, 4096,
       "line 2: grid x 1025 is not a multiple of cluster x 2 (line 4) (for num_tokens=4098, "
       "hidden_size=4096)"},
      {"// @launch if (num_tokens > 1) k<<<1, 32>>>(out)\n"
       "// @launch if (hidden_size > 8192) k<<<1, 32>>>(out)",
       1, 4096,
       "no launch runs for num_tokens=1, hidden_size=4096: every launch has an if condition that "
       "is false; add a launch without a condition or widen one"},
      {"// @launch k<<<1, 32>>>(out, w)\n// @workspace w float[num_tokens - hidden_size]", 1, 2,
       "line 2: workspace 'w' count -1 is negative (for num_tokens=1, hidden_size=2)"},
      {"// @launch k<<<1, 32>>>(out, w)\n// @workspace w float[num_tokens * hidden_size]", 1 << 16,
       1 << 14,
       "line 2: workspace 'w' needs 1073741824 x 4 bytes, more than the 1073741824 bytes all "
       "workspaces together may use (for num_tokens=65536, hidden_size=16384)"},
      {"// @launch k<<<1, 32>>>(out, a, b)\n// @workspace a u8[num_tokens]\n"
       "// @workspace b u8[hidden_size]",
       1 << 29, (1 << 29) + 1,
       "line 3: workspaces need 1073741825 bytes together with 'b', more than the "
       "1073741824-byte limit (for num_tokens=536870912, hidden_size=536870913)"},
      {"// @launch k<<<8, 32>>>(out)\n// @cluster k (num_tokens)", 16, 1,
       "line 2: cluster 16 x 1 x 1 = 16 blocks exceeds the 8 blocks a cluster may have (for "
       "num_tokens=16, hidden_size=1)"},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string source = c.source;
    CAPTURE(source);
    CAPTURE(c.num_tokens);
    const auto concrete = evaluate_plan(parse(source), shape(c.num_tokens, c.hidden_size), context);
    REQUIRE_FALSE(concrete.ok());
    CHECK(concrete.error().code == core::ErrorCode::kInvalidArgument);
    CHECK(concrete.error().message == c.message);
  }
}

TEST_CASE("launch plan: a missing symbol value is the server's bug, not the agent's") {
  const LaunchPlan plan = parse("// @launch k<<<num_tokens, 32>>>(out)");
  CHECK_THROWS_AS((void)evaluate_plan(plan, {{"num_tokens", 4}}, rms_norm_context()),
                  core::InternalError);
}

TEST_CASE("launch plan: arguments are checked against the kernel's parameter sizes") {
  const PlanContext context = rms_norm_context();
  const LaunchPlan plan = parse(
      "// @launch k<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size, ws)\n"
      "// @workspace ws float[4]");
  const Launch& launch = plan.launches[0];
  CHECK(check_kernel_params(launch, {8, 8, 8, 4, 4, 8}, context).ok());
  CHECK(check_kernel_params(launch, {8, 8, 8, 4, 8, 8}, context).ok());  // int64_t hidden_size
  struct Case {
    std::vector<std::size_t> params;
    const char* message;
  };
  const Case cases[] = {
      {{8, 8, 8, 4, 4},
       "line 1: kernel 'k' takes 5 parameters but the launch passes 6 arguments (out, input, "
       "weight, epsilon, hidden_size, ws)"},
      {{4, 8, 8, 4, 4, 8},
       "line 1: argument 1 'out' is a device pointer (8 bytes) but parameter 1 of 'k' is 4 bytes; "
       "declare it as __nv_bfloat16*"},
      {{8, 8, 8, 8, 4, 8},
       "line 1: argument 4 'epsilon' is a f32 scalar passed as float (4 bytes) but parameter 4 of "
       "'k' is 8 bytes; declare it as float"},
      {{8, 8, 8, 4, 2, 8},
       "line 1: argument 5 'hidden_size' is a shape symbol passed as int (4 bytes) or int64_t (8 "
       "bytes) but parameter 5 of 'k' is 2 bytes; declare it as int or int64_t"},
      {{8, 8, 8, 4, 4, 16},
       "line 1: argument 6 'ws' is a device pointer (8 bytes) but parameter 6 of 'k' is 16 bytes; "
       "declare it as a pointer to its element type"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    const auto status = check_kernel_params(launch, c.params, context);
    REQUIRE_FALSE(status.ok());
    CHECK(status.error().message == c.message);
  }
}

TEST_CASE("launch plan: symbols are encoded at the width the kernel declares") {
  const LaunchPlan plan = parse("// @launch k<<<1, 32>>>(out, num_tokens)");
  const Launch& launch = plan.launches[0];
  auto four = encode_symbol_arg(launch, 1, -5, 4);
  REQUIRE(four.ok());
  REQUIRE(four->size() == 4);
  std::int32_t narrow = 0;
  std::memcpy(&narrow, four->data(), 4);
  CHECK(narrow == -5);
  auto eight = encode_symbol_arg(launch, 1, std::int64_t{1} << 40, 8);
  REQUIRE(eight.ok());
  REQUIRE(eight->size() == 8);
  std::int64_t wide = 0;
  std::memcpy(&wide, eight->data(), 8);
  CHECK(wide == std::int64_t{1} << 40);
  const auto too_big = encode_symbol_arg(launch, 1, std::int64_t{1} << 31, 4);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().message ==
        "line 1: shape symbol 'num_tokens' = 2147483648 does not fit parameter 2 of 'k', a 4-byte "
        "int; declare it as int64_t");
  CHECK_THROWS_AS((void)encode_symbol_arg(launch, 0, 1, 4), core::InternalError);
}
