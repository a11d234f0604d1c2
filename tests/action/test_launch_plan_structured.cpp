// The structured launch plan (the `plan` field): what it accepts and how it reports mistakes.
#include <doctest/doctest.h>

#include <string>

#include "action/launch_plan.hpp"
#include "tests/action/plan_test_support.hpp"

using namespace crucible;
using namespace crucible::action;
using core::Value;
using crucible::action::testing::describe;
using crucible::action::testing::rms_norm_context;

namespace {
Value launch(const char* kernel) {
  return Value{
      {"kernel", kernel}, {"grid", "num_tokens"}, {"block", 256}, {"args", Value::array({"out"})}};
}
}  // namespace

TEST_CASE("launch plan: structured plans parse like the directives") {
  struct Case {
    const char* name;
    Value plan;
    const char* described;
  };
  Value with_template = launch("k");
  with_template["template_args"] = " float, 256 ";
  Value with_dims = launch("k");
  with_dims["grid"] = Value::array({"cdiv(hidden_size, 64)", "num_tokens"});
  with_dims["block"] = Value::array({32, 8, 1});
  with_dims["smem"] = "hidden_size * 4";
  Value guarded = launch("k");
  guarded["if"] = "num_tokens > 64";
  Value always = launch("k");
  always["if"] = true;
  const Case cases[] = {
      {"an array of launches", Value::array({launch("k")}),
       "@0 k<<<num_tokens; 256; 0>>>(out:t0)\n"},
      {"a map with launches only", Value{{"launches", Value::array({launch("k")})}},
       "@0 k<<<num_tokens; 256; 0>>>(out:t0)\n"},
      {"template arguments", Value::array({with_template}),
       "@0 k<float, 256><<<num_tokens; 256; 0>>>(out:t0)\n"},
      {"dims as arrays and a shared memory expression", Value::array({with_dims}),
       "@0 k<<<dim3(cdiv(hidden_size, 64), num_tokens, 1); dim3(32, 8, 1); hidden_size * 4>>>"
       "(out:t0)\n"},
      {"an if condition", Value::array({guarded}),
       "@0 if (num_tokens > 64) k<<<num_tokens; 256; 0>>>(out:t0)\n"},
      {"a boolean if condition", Value::array({always}),
       "@0 if (1) k<<<num_tokens; 256; 0>>>(out:t0)\n"},
      {"workspaces and clusters",
       Value{{"launches", Value::array({Value{{"kernel", "k"},
                                              {"grid", Value::array({8})},
                                              {"block", 128},
                                              {"args", Value::array({"out", "scratch", "epsilon",
                                                                     "hidden_size"})}}})},
             {"workspaces",
              Value::array({Value{{"name", "scratch"}, {"type", "f32"}, {"count", "num_tokens"}}})},
             {"clusters", Value::array({Value{{"kernel", "k"}, {"dims", Value::array({2, 1})}}})}},
       "@0 k<<<dim3(8, 1, 1); 128; 0>>>(out:t0 scratch:w0 epsilon:s0 hidden_size:y1) cluster#0\n"
       "@0 workspace scratch f32/4[num_tokens]\n"
       "@0 cluster k dim3(2, 1, 1)\n"},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto plan = parse_structured_plan(c.plan, context);
    REQUIRE_MESSAGE(plan.ok(), plan.error().message);
    CHECK(describe(*plan) == c.described);
    CHECK(plan->launches[0].where == "launches[0]");
  }
}

TEST_CASE("launch plan: structured plan mistakes name the path") {
  struct Case {
    const char* name;
    Value plan;
    const char* message;
  };
  const auto with = [](const char* key, Value value) {
    Value out = launch("k");
    out[key] = std::move(value);
    return Value::array({out});
  };
  const auto without = [](const char* key) {
    Value out = launch("k");
    out.erase(key);
    return Value::array({out});
  };
  Value many = Value::array();
  for (int i = 0; i < 17; ++i) many.push_back(launch("k"));
  const Case cases[] = {
      {"a string", Value("k<<<1, 1>>>()"),
       "the plan must be an array of launches or a map {launches, workspaces, clusters, "
       "tensor_maps}, got string"},
      {"empty array", Value::array(),
       "the plan has no launches: give at least one, e.g. {\"kernel\": \"my_kernel\", \"grid\": "
       "\"num_tokens\", \"block\": 256, \"args\": [\"out\", \"input\", \"weight\"]}"},
      {"misspelled top-level key", Value{{"launchs", Value::array()}},
       "plan: unknown field 'launchs'; did you mean 'launches'?"},
      {"missing launches", Value{{"workspaces", Value::array()}}, "plan: missing field 'launches'"},
      {"launches not an array", Value{{"launches", 3}},
       "plan: 'launches' must be an array, got integer"},
      {"too many launches", many, "plan: 17 launches; a plan may have at most 16"},
      {"launch not a map", Value::array({"k"}), "launches[0] must be a map, got string"},
      {"misspelled launch key", with("gird", 1),
       "launches[0]: unknown field 'gird'; did you mean 'grid'?"},
      {"unrelated launch key", with("stream", 1),
       "launches[0]: unknown field 'stream'; the fields are kernel, template_args, grid, block, "
       "smem, args, if"},
      {"missing kernel", without("kernel"), "launches[0]: missing field 'kernel'"},
      {"missing grid", without("grid"), "launches[0]: missing field 'grid'"},
      {"missing args", without("args"), "launches[0]: missing field 'args'"},
      {"kernel with template arguments", with("kernel", "k<float>"),
       "launches[0]: 'kernel' must be a kernel name like rms_norm_kernel or ns::gemm (template "
       "arguments go in 'template_args'), got 'k<float>'"},
      {"kernel not a string", with("kernel", 5),
       "launches[0]: 'kernel' must be a string, got integer"},
      {"float grid", with("grid", 1.5),
       "launches[0]: grid must be an expression string or an integer, got float"},
      {"four grid values", with("grid", Value::array({1, 1, 1, 1})),
       "launches[0]: grid must have 1 to 3 values (x, y, z), got 4"},
      {"bad block y", with("block", Value::array({32, "("})),
       "launches[0]: block y '(': column 2: expected a number, a symbol, a function call or '(', "
       "got end of expression"},
      {"huge integer", with("smem", Value(std::uint64_t{18446744073709551615ull})),
       "launches[0]: shared memory size 18446744073709551615 does not fit in a signed 64-bit "
       "integer"},
      {"args not an array", with("args", "out"),
       "launches[0]: 'args' must be an array of names, got string"},
      {"arg not a name", with("args", Value::array({"out", "x + 1"})),
       "launches[0]: argument 2 must be the name of a tensor, scalar, shape symbol or workspace, "
       "got 'x + 1'"},
      {"arg not a string", with("args", Value::array({1})),
       "launches[0]: argument 1 must be the name of a tensor, scalar, shape symbol or workspace, "
       "got integer"},
      {"unknown arg", with("args", Value::array({"output"})),
       "launches[0]: unknown argument 'output'; the task's tensors are out, input, weight; "
       "scalars: epsilon; symbols: num_tokens, hidden_size"},
      {"block too big", with("block", 4096),
       "launches[0]: block size 4096 exceeds the 1024 threads a block may have"},
      {"bad workspace type",
       Value{{"launches", Value::array({launch("k")})},
             {"workspaces", Value::array({Value{{"name", "w"}, {"type", "flot"}, {"count", 4}}})}},
       "workspaces[0]: unknown workspace element type 'flot'; did you mean 'float'?"},
      {"workspace missing count",
       Value{{"launches", Value::array({launch("k")})},
             {"workspaces", Value::array({Value{{"name", "w"}, {"type", "float"}}})}},
       "workspaces[0]: missing field 'count'"},
      {"workspace with a bad name",
       Value{
           {"launches", Value::array({launch("k")})},
           {"workspaces", Value::array({Value{{"name", "a b"}, {"type", "float"}, {"count", 1}}})}},
       "workspaces[0]: workspace name 'a b' is not an identifier"},
      {"cluster for an unknown kernel",
       Value{{"launches", Value::array({launch("k")})},
             {"clusters", Value::array({Value{{"kernel", "q"}, {"dims", 2}}})}},
       "clusters[0]: the cluster shape names kernel 'q', which no launch runs; the launched "
       "kernels are k"},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto plan = parse_structured_plan(c.plan, context);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error().code == core::ErrorCode::kInvalidArgument);
    CHECK(plan.error().message == c.message);
  }
}

TEST_CASE("launch plan: an action uses the structured plan or the directives, not both") {
  const PlanContext context = rms_norm_context();
  const std::string with_directive = "// @launch k<<<1, 32>>>(out)\n";
  auto plan = parse_action_plan(with_directive, Value(), context);
  REQUIRE(plan.ok());
  CHECK(plan->launches[0].where == "line 1");

  plan = parse_action_plan("__global__ void k() {}\n// @param doc comments are fine here",
                           Value::array({launch("k")}), context);
  REQUIRE(plan.ok());
  CHECK(plan->launches[0].where == "launches[0]");

  plan = parse_action_plan("\n" + with_directive, Value::array({launch("k")}), context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message ==
        "line 2: the action has both a structured plan and a @launch directive; send the plan in "
        "one place: remove the directives or the 'plan' field");
}

// Found by fuzz/fuzz_launch_plan: a name from the plan quoted with its bytes as they were.
TEST_CASE("launch plan: structured plan messages quoting ill-formed UTF-8 are valid UTF-8") {
  const Value plan{
      {"launches", Value::array({launch("k")})},
      {"workspaces",
       Value::array({Value{{"name", "sc\x8e\x9eh"}, {"type", "f32"}, {"count", "num_tokens"}}})}};
  const auto parsed = parse_structured_plan(plan, rms_norm_context());
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().message ==
        "workspaces[0]: workspace name 'sc\xef\xbf\xbd\xef\xbf\xbdh' is not an identifier");
}
