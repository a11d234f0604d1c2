// @tensormap: TMA descriptors over views of task tensors, in both plan forms, evaluated per case
// against the TMA's rules and the tensor's extent, matched to kernel parameters, and on the wire.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "action/evaluated_plan.hpp"
#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "tests/action/plan_test_support.hpp"

using namespace crucible;
using namespace crucible::action;
using crucible::action::testing::describe;
using crucible::action::testing::parse;
using crucible::action::testing::rms_norm_context;
using crucible::action::testing::shape;

namespace {

const char* const kRows =
    "// @tensormap rows input dims(hidden_size, num_tokens) box(64, 1) swizzle(128)\n"
    "// @launch k<<<num_tokens, 256>>>(out, rows, weight, epsilon, hidden_size)\n";

std::string parse_error(const std::string& source) {
  const auto plan = parse_launch_plan(source, rms_norm_context());
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().code == core::ErrorCode::kInvalidArgument);
  return plan.error().message;
}

std::string evaluate_error(const std::string& source, std::int64_t num_tokens,
                           std::int64_t hidden_size) {
  const auto concrete =
      evaluate_plan(parse(source), shape(num_tokens, hidden_size), rms_norm_context());
  REQUIRE_FALSE(concrete.ok());
  return concrete.error().message;
}

}  // namespace

TEST_CASE("tensor map: the directive declares a map a launch passes by name") {
  const LaunchPlan plan = parse(kRows);
  CHECK(describe(plan) ==
        "@2 k<<<num_tokens; 256; 0>>>(out:t0 rows:m0 weight:t2 epsilon:s0 hidden_size:y1)\n"
        "@1 tensormap rows t1 dims(hidden_size, num_tokens) box(64, 1) swizzle128\n");
  // Clauses in any order, wrapped over comment lines, with explicit strides.
  const LaunchPlan strided = parse(
      "// @tensormap tile out box(8, 4, 2) strides(hidden_size,\n"
      "//   hidden_size * 4) dims(hidden_size, 4, num_tokens / 4)\n"
      "// @launch k<<<1, 32>>>(tile)\n");
  CHECK(describe(strided) ==
        "@3 k<<<1; 32; 0>>>(tile:m0)\n"
        "@1 tensormap tile t0 dims(hidden_size, 4, num_tokens / 4) box(8, 4, 2) "
        "strides(hidden_size, hidden_size * 4) swizzle0\n");
}

TEST_CASE("tensor map: the structured form gives the same plan") {
  const core::Value structured{
      {"launches",
       core::Value::array({core::Value{
           {"kernel", "k"},
           {"grid", "num_tokens"},
           {"block", 256},
           {"args", core::Value::array({"out", "rows", "weight", "epsilon", "hidden_size"})}}})},
      {"tensor_maps",
       core::Value::array({core::Value{{"name", "rows"},
                                       {"tensor", "input"},
                                       {"dims", core::Value::array({"hidden_size", "num_tokens"})},
                                       {"box", core::Value::array({64, 1})},
                                       {"swizzle", 128}}})}};
  const auto plan = parse_structured_plan(structured, rms_norm_context());
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  CHECK(describe(*plan) ==
        "@0 k<<<num_tokens; 256; 0>>>(out:t0 rows:m0 weight:t2 epsilon:s0 hidden_size:y1)\n"
        "@0 tensormap rows t1 dims(hidden_size, num_tokens) box(64, 1) swizzle128\n");

  core::Value wrong = structured;
  wrong["tensor_maps"][0]["swizzle"] = 48;
  auto refused = parse_structured_plan(wrong, rms_norm_context());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "tensor_maps[0]: 'swizzle' is 0 (none), 32, 64 or 128 (bytes), got 48");
  wrong = structured;
  wrong["tensor_maps"][0]["boxes"] = 1;
  refused = parse_structured_plan(wrong, rms_norm_context());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message == "tensor_maps[0]: unknown field 'boxes'; did you mean 'box'?");
  wrong = structured;
  wrong["tensor_maps"][0]["dims"] = core::Value::array();
  refused = parse_structured_plan(wrong, rms_norm_context());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "tensor_maps[0]: 'dims' must be an array of 1 to 5 expressions, got 0 values");
}

TEST_CASE("tensor map: evaluation gives the driver's figures for each case") {
  const LaunchPlan plan = parse(kRows);
  const auto concrete = evaluate_plan(plan, shape(3, 4096), rms_norm_context());
  REQUIRE_MESSAGE(concrete.ok(), concrete.error().message);
  REQUIRE(concrete->tensor_maps.size() == 1);
  const ConcreteTensorMap& map = concrete->tensor_maps[0];
  CHECK(map.tensor == 1);
  CHECK(map.dtype == core::DType::kBF16);
  CHECK(map.rank == 2);
  CHECK(map.dims[0] == 4096);
  CHECK(map.dims[1] == 3);
  CHECK(map.stride_bytes[0] == 8192);  // packed: one row of bf16
  CHECK(map.box[0] == 64);
  CHECK(map.box[1] == 1);
  CHECK(map.swizzle == 128);

  // A strided view: every other row, as two 3-D tiles of rows.
  const auto strided = evaluate_plan(
      parse("// @tensormap m input dims(hidden_size, 2, num_tokens / 4) box(16, 2, 1) strides(\n"
            "//   hidden_size * 2, hidden_size * 4)\n"
            "// @launch k<<<1, 32>>>(m)\n"),
      shape(8, 256), rms_norm_context());
  REQUIRE_MESSAGE(strided.ok(), strided.error().message);
  CHECK(strided->tensor_maps[0].stride_bytes[0] == 1024);
  CHECK(strided->tensor_maps[0].stride_bytes[1] == 2048);
  CHECK(strided->tensor_maps[0].dims[2] == 2);
}

TEST_CASE("tensor map: mistakes in the declaration are refused before any case") {
  struct Case {
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"// @tensormap m inputs dims(hidden_size) box(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' views 'inputs', which is not a tensor of the task; the tensors are "
       "out, input, weight; did you mean 'input'?"},
      {"// @tensormap m epsilon dims(hidden_size) box(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' views 'epsilon', which is not a tensor of the task; the tensors "
       "are out, input, weight"},
      {"// @tensormap m input dims(hidden_size, num_tokens) box(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' has 2 dims but 1 box extents; give one per dimension"},
      {"// @tensormap m input dims(hidden_size, num_tokens) box(64, 1) strides(1, 2)\n"
       "// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' has 2 dims and 2 strides; give one per dimension after the first "
       "(the first is 1 element), or none for a packed view"},
      {"// @tensormap m input dims(1, 1, 1, 1, 1, 1) box(8)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' dims has 6 values; a tensor map has at most 5 dimensions"},
      {"// @tensormap m input dims(hidden_size) box(300)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' box[0] is 300; each box extent is 1 to 256"},
      {"// @tensormap m input dims(hidden_size) box(10)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' box[0] is 10 elements of 2 bytes = 20 bytes; the innermost box "
       "extent must be a multiple of 16 bytes"},
      {"// @tensormap m input dims(hidden_size) box(128) swizzle(128)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' box[0] is 256 bytes, more than its 128-byte swizzle span; with a "
       "swizzle the innermost box extent is at most the span"},
      {"// @tensormap m input dims(hidden_size) box(64) swizzle(48)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: swizzle of tensor map 'm' is '48'; it is 0 (none), 32, 64 or 128 (bytes)"},
      {"// @tensormap m input dims(hidden_size) boxes(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: unexpected 'boxes(64)' in tensor map 'm'; after the tensor come dims(...), "
       "box(...) and optionally strides(...) and swizzle(...); did you mean 'box'?"},
      {"// @tensormap m input dims(hidden_size) dims(8) box(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' gives dims twice"},
      {"// @tensormap m input dims(hidden_size)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' needs dims(...) and box(...); write // @tensormap NAME TENSOR "
       "dims(d0, d1, ...) box(b0, b1, ...) [strides(s1, ...)] [swizzle(128)]"},
      {"// @tensormap input input dims(hidden_size) box(64)\n// @launch k<<<1, 1>>>(input)\n",
       "line 1: tensor map 'input' has the same name as the task's tensor; pick another name"},
      {"// @workspace m float[4]\n// @tensormap m input dims(hidden_size) box(64)\n"
       "// @launch k<<<1, 1>>>(m)\n",
       "line 2: tensor map 'm' has the same name as the workspace at line 1"},
      {"// @tensormap m input dims(hidden_size) box(64)\n"
       "// @tensormap m out dims(hidden_size) box(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 2: tensor map 'm' is declared twice (first at line 1)"},
      {"// @tensormap m input dims(hidden_size * epsilon) box(64)\n// @launch k<<<1, 1>>>(m)\n",
       "line 1: tensor map 'm' dims[0] uses 'epsilon', which is a scalar; sizes and conditions "
       "may use only the shape symbols num_tokens, hidden_size"},
      {"// @tensormap m input dims(hidden_size) box(64)\n// @launch k<<<m, 1>>>(input)\n",
       "line 2: grid uses 'm', which is a tensor map; sizes and conditions may use only the shape "
       "symbols num_tokens, hidden_size"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.source);
    CHECK(parse_error(c.source) == c.message);
  }
  std::string many;
  for (int i = 0; i < 9; ++i) {
    many += "// @tensormap m" + std::to_string(i) + " input dims(hidden_size) box(64)\n";
  }
  CHECK(parse_error(many + "// @launch k<<<1, 1>>>(m0)\n") ==
        "line 9: tensor map 9 is one too many; a plan may have at most 8 tensor maps");
}

TEST_CASE("tensor map: each case is checked against the TMA's rules and the tensor") {
  // A packed row of 7 bf16 is 14 bytes: not a stride the TMA takes.
  CHECK(evaluate_error(kRows, 4, 7) ==
        "line 1: tensor map 'rows' stride of dimension 1 is 7 elements (14 bytes, not a multiple "
        "of 16); each stride is a positive multiple of 16 bytes below 2^40 bytes (this is the "
        "packed stride over dims; give strides(...) for a padded or strided view) (for "
        "num_tokens=4, hidden_size=7)");
  // A view one row longer than the tensor.
  CHECK(evaluate_error("// @tensormap m input dims(hidden_size, num_tokens + 1) box(64, 1)\n"
                       "// @launch k<<<1, 1>>>(m)\n",
                       4, 64) ==
        "line 1: tensor map 'm' reaches 320 elements of 'input', which has 256; the view (dims "
        "and strides) must lie inside the tensor (for num_tokens=4, hidden_size=64)");
  // Strides that overlap rows stay inside; strides that skip past the end do not.
  CHECK(evaluate_plan(parse("// @tensormap m input dims(hidden_size, num_tokens) box(64, 1) "
                            "strides(8)\n// @launch k<<<1, 1>>>(m)\n"),
                      shape(4, 64), rms_norm_context())
            .ok());
  CHECK(evaluate_error("// @tensormap m input dims(hidden_size, num_tokens) box(64, 1) "
                       "strides(hidden_size * 2)\n// @launch k<<<1, 1>>>(m)\n",
                       4, 64) ==
        "line 1: tensor map 'm' reaches 448 elements of 'input', which has 256; the view (dims "
        "and strides) must lie inside the tensor (for num_tokens=4, hidden_size=64)");
  CHECK(evaluate_error("// @tensormap m input dims(hidden_size) box(num_tokens * 8)\n"
                       "// @launch k<<<1, 1>>>(m)\n",
                       64, 64) ==
        "line 1: tensor map 'm' box[0] is 512; each box extent is 1 to 256 (for num_tokens=64, "
        "hidden_size=64)");
  CHECK(evaluate_error("// @tensormap m input dims(hidden_size - 64) box(64)\n"
                       "// @launch k<<<1, 1>>>(m)\n",
                       4, 64) ==
        "line 1: tensor map 'm' dims[0] is 0; each extent is 1 to 2^32 (for num_tokens=4, "
        "hidden_size=64)");
  CHECK(evaluate_error("// @tensormap m input dims(hidden_size, 2) box(64, 1) "
                       "strides(0 - 8)\n// @launch k<<<1, 1>>>(m)\n",
                       4, 64) ==
        "line 1: tensor map 'm' stride of dimension 1 is -8 elements (not positive); each stride "
        "is a positive multiple of 16 bytes below 2^40 bytes (for num_tokens=4, hidden_size=64)");
}

TEST_CASE("tensor map: a map is evaluated only where a launch that passes it runs") {
  // The TMA path for rows of whole 16-byte multiples, a plain kernel for the rest: a 7-wide row
  // (14 bytes) would be refused as a map's stride, but no launch passes the map there.
  const LaunchPlan plan = parse(
      "// @tensormap rows input dims(hidden_size, num_tokens) box(64, 1)\n"
      "// @launch if (hidden_size % 8 == 0) tma<<<num_tokens, 256>>>(out, rows)\n"
      "// @launch if (hidden_size % 8 != 0) plain<<<num_tokens, 256>>>(out, input)\n");
  const auto narrow = evaluate_plan(plan, shape(4, 7), rms_norm_context());
  REQUIRE_MESSAGE(narrow.ok(), narrow.error().message);
  REQUIRE(narrow->tensor_maps.size() == 1);
  CHECK(narrow->tensor_maps[0].rank == 0);
  const auto wide = evaluate_plan(plan, shape(4, 64), rms_norm_context());
  REQUIRE_MESSAGE(wide.ok(), wide.error().message);
  CHECK(wide->tensor_maps[0].rank == 2);

  // On the wire an unused map stays unused, and a launch that passes one does not fit.
  EvaluatedPlan sent;
  sent.plan = plan;
  sent.cases = {*narrow, *wide};
  const auto got = evaluated_plan_from_value(to_value(sent));
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  CHECK(got->cases[0].tensor_maps[0].rank == 0);
  CHECK(got->cases[1].tensor_maps[0].rank == 2);
  CHECK(fits(*got, rms_norm_context(), 2).ok());
  EvaluatedPlan damaged = *got;
  damaged.cases[1].tensor_maps[0].rank = 0;
  const auto refused = fits(damaged, rms_norm_context(), 2);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "evaluated plan: a launch passes a tensor map the case does not encode");
}

TEST_CASE("tensor map: the kernel declares a 128-byte CUtensorMap parameter") {
  const LaunchPlan plan = parse(kRows);
  const Launch& launch = plan.launches[0];
  CHECK(check_kernel_params(launch, {8, 128, 8, 4, 4}, rms_norm_context()).ok());
  const auto wrong = check_kernel_params(launch, {8, 8, 8, 4, 4}, rms_norm_context());
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message ==
        "line 2: argument 2 'rows' is a tensor map (128 bytes) but parameter 2 of 'k' is 8 bytes; "
        "declare it as const __grid_constant__ CUtensorMap");
}

TEST_CASE("tensor map: the evaluated plan carries the maps to the runner, and refuses damage") {
  EvaluatedPlan sent;
  sent.plan = parse(kRows);
  for (const std::int64_t tokens : {1, 5}) {
    auto concrete = evaluate_plan(sent.plan, shape(tokens, 4096), rms_norm_context());
    REQUIRE(concrete.ok());
    sent.cases.push_back(std::move(concrete).value());
  }
  const core::Value wire = to_value(sent);
  const auto got = evaluated_plan_from_value(wire);
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  REQUIRE(got->plan.tensor_maps.size() == 1);
  CHECK(got->plan.tensor_maps[0].name == "rows");
  CHECK(got->plan.launches[0].args[1].kind == ArgKind::kTensorMap);
  REQUIRE(got->cases.size() == 2);
  const ConcreteTensorMap& map = got->cases[1].tensor_maps.at(0);
  CHECK(map.rank == 2);
  CHECK(map.dims[1] == 5);
  CHECK(map.stride_bytes[0] == 8192);
  CHECK(map.box[0] == 64);
  CHECK(map.swizzle == 128);
  CHECK(map.dtype == core::DType::kBF16);
  CHECK(fits(*got, rms_norm_context(), 2).ok());

  const auto refuse = [&](const char* field, const core::Value& value) {
    core::Value damaged = wire;
    damaged["cases"][0]["tensor_maps"][0][field] = value;
    CAPTURE(field);
    CHECK_FALSE(evaluated_plan_from_value(damaged).ok());
  };
  refuse("box", core::Value::array({0, 1}));
  refuse("box", core::Value::array({64}));
  refuse("stride_bytes", core::Value::array());
  refuse("swizzle", 16);
  refuse("dtype", "f128");
  core::Value missing = wire;
  missing["cases"][1]["tensor_maps"] = core::Value::array();
  CHECK_FALSE(evaluated_plan_from_value(missing).ok());

  // A map over a tensor the task lacks, or of another dtype, does not fit the task.
  EvaluatedPlan other = *got;
  other.cases[0].tensor_maps[0].dtype = core::DType::kF32;
  CHECK_FALSE(fits(other, rms_norm_context(), 2).ok());
  other = *got;
  other.cases[0].tensor_maps[0].tensor = 3;
  CHECK_FALSE(fits(other, rms_norm_context(), 2).ok());
  other = *got;
  other.cases[0].tensor_maps[0].tensor = 0;  // out: a tensor of the task, not the one declared
  CHECK_FALSE(fits(other, rms_norm_context(), 2).ok());
}

TEST_CASE("tensor map: the packed arguments leave the map's slot to the runner") {
  const LaunchPlan plan = parse(kRows);
  tasks::Task task;
  task.scalars.push_back(tasks::ScalarSpec{"epsilon", core::DType::kF32, "", 1e-6});
  task.symbols = {"num_tokens", "hidden_size"};
  tasks::Case c;
  c.symbols = shape(2, 64);
  c.scalars = {{"epsilon", 1e-6}};
  const auto packed =
      pack_launch_args(plan.launches[0], task, c, {8, 128, 8, 4, 4}, {0x1000, 0x2000, 0x3000}, {});
  REQUIRE_MESSAGE(packed.ok(), packed.error().message);
  CHECK((*packed)[1] == ParamBytes{});
  DeviceAddress weight = 0;
  std::memcpy(&weight, (*packed)[2].data(), sizeof weight);
  CHECK(weight == 0x3000);
}
