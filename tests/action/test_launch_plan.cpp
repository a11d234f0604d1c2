// Launch-plan directives: what parses into which plan, and the exact message for each mistake.
#include <doctest/doctest.h>

#include <string>

#include "action/launch_plan.hpp"
#include "tests/action/plan_test_support.hpp"

using namespace crucible;
using namespace crucible::action;
using crucible::action::testing::describe;
using crucible::action::testing::rms_norm_context;

TEST_CASE("launch plan: directives parse into the plan they describe") {
  struct Case {
    const char* name;
    const char* source;
    const char* plan;
  };
  const Case cases[] = {
      {"the design example",
       "// @launch rms_norm_kernel<<<num_tokens, 256>>>(out, input, weight, epsilon, "
       "hidden_size)\n__global__ void rms_norm_kernel() {}\n",
       "@1 rms_norm_kernel<<<num_tokens; 256; 0>>>(out:t0 input:t1 weight:t2 epsilon:s0 "
       "hidden_size:y1)\n"},
      {"no space after //", "//@launch k<<<1, 32>>>(out)", "@1 k<<<1; 32; 0>>>(out:t0)\n"},
      {"wrapped onto the comment lines below",
       "// @launch if (num_tokens > 8)\n//   k<<<cdiv(num_tokens, 4),\n//     128>>>(out,\n"
       "//   input, weight)\n// @launch k2<<<1, 32>>>(out)\n",
       "@1 if (num_tokens > 8) k<<<cdiv(num_tokens, 4); 128; 0>>>(out:t0 input:t1 weight:t2)\n"
       "@5 k2<<<1; 32; 0>>>(out:t0)\n"},
      {"a closed directive does not take the comment below",
       "// @launch k<<<1, 32>>>(out)\n// (not part of it)\n", "@1 k<<<1; 32; 0>>>(out:t0)\n"},
      {"indented, tabs, spaces inside",
       "\t  //   @launch   k  <<<  num_tokens ,  128  >>>  ( out ,input )  ",
       "@1 k<<<num_tokens; 128; 0>>>(out:t0 input:t1)\n"},
      {"trailing semicolon", "// @launch k<<<1, 32>>>(out);", "@1 k<<<1; 32; 0>>>(out:t0)\n"},
      {"after code on the same line", "int x = 1;  // @launch k<<<1, 32>>>(out)",
       "@1 k<<<1; 32; 0>>>(out:t0)\n"},
      {"CRLF line endings", "// line one\r\n// @launch k<<<1, 32>>>(out)\r\n",
       "@2 k<<<1; 32; 0>>>(out:t0)\n"},
      {"no arguments", "// @launch k<<<1, 32>>>()", "@1 k<<<1; 32; 0>>>()\n"},
      {"shared memory size", "// @launch k<<<num_tokens, 512, 49152>>>(out)",
       "@1 k<<<num_tokens; 512; 49152>>>(out:t0)\n"},
      {"shared memory expression", "// @launch k<<<num_tokens, 256, hidden_size * 2 + 16>>>(out)",
       "@1 k<<<num_tokens; 256; hidden_size * 2 + 16>>>(out:t0)\n"},
      {"dim3 with one value", "// @launch k<<<dim3(num_tokens), 256>>>(out)",
       "@1 k<<<dim3(num_tokens, 1, 1); 256; 0>>>(out:t0)\n"},
      {"dim3 with two values",
       "// @launch k<<<dim3(cdiv(hidden_size, 64), num_tokens), dim3(32, 8)>>>(out)",
       "@1 k<<<dim3(cdiv(hidden_size, 64), num_tokens, 1); dim3(32, 8, 1); 0>>>(out:t0)\n"},
      {"dim3 with three values and a space", "// @launch k<<<dim3 (1, 2, 3), dim3(4,4,4)>>>(out)",
       "@1 k<<<dim3(1, 2, 3); dim3(4, 4, 4); 0>>>(out:t0)\n"},
      {"parenthesized expression is not dim3", "// @launch k<<<(num_tokens + 1) / 2, 64>>>(out)",
       "@1 k<<<(num_tokens + 1) / 2; 64; 0>>>(out:t0)\n"},
      {"template arguments", "// @launch k<float, 256><<<num_tokens, 256>>>(out)",
       "@1 k<float, 256><<<num_tokens; 256; 0>>>(out:t0)\n"},
      {"nested template arguments",
       "// @launch gemm<cute::tuple<int, int>, Config<128, 64>><<<1, 128>>>(out)",
       "@1 gemm<cute::tuple<int, int>, Config<128, 64>><<<1; 128; 0>>>(out:t0)\n"},
      {"comparison inside template parentheses", "// @launch k<(4 > 2), 8><<<1, 32>>>(out)",
       "@1 k<(4 > 2), 8><<<1; 32; 0>>>(out:t0)\n"},
      {"space before template arguments", "// @launch k <__nv_bfloat16, 8> <<<1, 32>>>(out)",
       "@1 k<__nv_bfloat16, 8><<<1; 32; 0>>>(out:t0)\n"},
      {"qualified kernel name", "// @launch ops::rms<<<1, 32>>>(out)",
       "@1 ops::rms<<<1; 32; 0>>>(out:t0)\n"},
      {"if guard",
       "// @launch if (num_tokens > 4096) big<<<dim3(cdiv(num_tokens, 4), 1, 1), 512, "
       "49152>>>(out)",
       "@1 if (num_tokens > 4096) big<<<dim3(cdiv(num_tokens, 4), 1, 1); 512; 49152>>>(out:t0)\n"},
      {"if guard with nested parentheses and no space",
       "// @launch if((num_tokens % 2) == 0 && hidden_size >= 1024)k<<<1, 32>>>(out)",
       "@1 if ((num_tokens % 2) == 0 && hidden_size >= 1024) k<<<1; 32; 0>>>(out:t0)\n"},
      {"a kernel whose name starts with if", "// @launch iffy<<<1, 32>>>(out)",
       "@1 iffy<<<1; 32; 0>>>(out:t0)\n"},
      {"several launches in order",
       "// @launch if (num_tokens <= 64) small<<<num_tokens, 128>>>(out, input)\n"
       "// @launch if (num_tokens > 64) large<<<cdiv(num_tokens, 4), 512>>>(out, input)\n"
       "// @launch finish<<<1, 32>>>(out)\n",
       "@1 if (num_tokens <= 64) small<<<num_tokens; 128; 0>>>(out:t0 input:t1)\n"
       "@2 if (num_tokens > 64) large<<<cdiv(num_tokens, 4); 512; 0>>>(out:t0 input:t1)\n"
       "@3 finish<<<1; 32; 0>>>(out:t0)\n"},
      {"workspace passed as an argument, declared after the launch",
       "// @launch k<<<num_tokens, 256>>>(out, partials)\n"
       "// @workspace partials float[num_tokens * 64]\n",
       "@1 k<<<num_tokens; 256; 0>>>(out:t0 partials:w0)\n"
       "@2 workspace partials float/4[num_tokens * 64]\n"},
      {"workspace type spellings",
       "// @launch k<<<1, 32>>>(a, b, c, d)\n"
       "// @workspace a bf16[16]\n"
       "// @workspace b unsigned   int [ hidden_size ]\n"
       "// @workspace c __nv_bfloat16[8]\n"
       "// @workspace d float4[2]\n",
       "@1 k<<<1; 32; 0>>>(a:w0 b:w1 c:w2 d:w3)\n"
       "@2 workspace a bf16/2[16]\n"
       "@3 workspace b unsigned int/4[hidden_size]\n"
       "@4 workspace c __nv_bfloat16/2[8]\n"
       "@5 workspace d float4/16[2]\n"},
      {"cluster shape for a kernel",
       "// @launch big<<<dim3(cdiv(num_tokens, 4), 2), 512>>>(out)\n"
       "// @cluster big (2, 1, 1)\n",
       "@1 big<<<dim3(cdiv(num_tokens, 4), 2, 1); 512; 0>>>(out:t0) cluster#0\n"
       "@2 cluster big dim3(2, 1, 1)\n"},
      {"cluster shape for one template instance",
       "// @launch k<64><<<8, 128>>>(out)\n"
       "// @launch k<32><<<8, 128>>>(out)\n"
       "// @cluster k<64> (2)\n",
       "@1 k<64><<<8; 128; 0>>>(out:t0) cluster#0\n@2 k<32><<<8; 128; 0>>>(out:t0)\n"
       "@3 cluster k<64> dim3(2, 1, 1)\n"},
      {"directives in block comments and strings are ignored",
       "/* // @launch ignored<<<1, 1>>>(nothing)\n   @bogus */\n"
       "const char* s = \"// @launch also_ignored\";\n"
       "const char* r = R\"x(\n// @launch raw_ignored\n)x\";\n"
       "char c = '\"'; int big = 1'000'000;\n"
       "// @launch k<<<1, 32>>>(out)\n",
       "@8 k<<<1; 32; 0>>>(out:t0)\n"},
      {"comments that do not start with @ are not directives",
       "// launch k<<<1, 32>>>(x)\n// see @launch below\n/// @launch doc_comment\n"
       "// @launch k<<<1, 32>>>(out)",
       "@4 k<<<1; 32; 0>>>(out:t0)\n"},
      {"hex sizes", "// @launch k<<<0x10, 0x100, 0xC000>>>(out)",
       "@1 k<<<0x10; 0x100; 0xC000>>>(out:t0)\n"},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto plan = parse_launch_plan(c.source, context);
    REQUIRE_MESSAGE(plan.ok(), plan.error().message);
    CHECK(describe(*plan) == c.plan);
  }
}

TEST_CASE("launch plan: directive mistakes get a message that says what to fix") {
  struct Case {
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"__global__ void k() {}",
       "no @launch directive found: declare at least one launch, e.g. // @launch "
       "my_kernel<<<num_tokens, 256>>>(out, input, weight)"},
      {"// @workspace w float[4]",
       "no @launch directive found: declare at least one launch, e.g. // @launch "
       "my_kernel<<<num_tokens, 256>>>(out, input, weight)"},
      {"// ok\n// ok\n// ok\n// @lanuch k<<<1, 32>>>(out)",
       "line 4: unknown directive '@lanuch'; did you mean '@launch'?"},
      {"// @workspaces w float[4]",
       "line 1: unknown directive '@workspaces'; did you mean '@workspace'?"},
      {"// @param x the input",
       "line 1: unknown directive '@param'; the directives are @launch, @workspace, @cluster and "
       "@tensormap (start other comments with something other than '@')"},
      {"// @ launch k<<<1, 32>>>(out)",
       "line 1: '@' at the start of a // comment begins a directive; expected @launch, "
       "@workspace, @cluster or @tensormap"},
      {"// @launch <<<1, 32>>>(out)",
       "line 1: expected a kernel name, got '<<<1, 32>>>(out)'; write // @launch "
       "kernel<<<grid, block>>>(args)"},
      {"// @launch",
       "line 1: expected a kernel name, got nothing; write // @launch "
       "kernel<<<grid, block>>>(args)"},
      {"// @launch 9k<<<1, 32>>>(out)",
       "line 1: expected a kernel name, got '9k<<<1, 32>>>(out)'; write // @launch "
       "kernel<<<grid, block>>>(args)"},
      {"// @launch k(out)",
       "line 1: expected '<<<' after kernel name 'k'; write // @launch k<<<grid, block>>>(args)"},
      {"// @launch k<<<1, 32>>(out)",
       "line 1: expected '>>>' to close the launch configuration opened by '<<<'"},
      {"// @launch k<<<1>>>(out)",
       "line 1: the launch configuration needs a grid and a block size: "
       "<<<grid, block[, shared_memory_bytes]>>>"},
      {"// @launch k<<<1, 32, 0, stream>>>(out)",
       "line 1: the launch configuration takes at most 3 values, <<<grid, block, "
       "shared_memory_bytes>>>; there is no stream argument: launches run in order on the "
       "runner's stream"},
      {"// @launch k<<<cdiv(num_tokens 4), 32>>>(out)",
       "line 1: grid 'cdiv(num_tokens 4)': column 17: expected ',' or ')' to close 'cdiv(' "
       "opened at column 1"},
      {"// @launch k<<<dim3(1, 2, 3, 4), 32>>>(out)",
       "line 1: dim3 takes 1 to 3 values for the grid, got 4"},
      {"// @launch k<<<1, dim3()>>>(out)", "line 1: dim3 takes 1 to 3 values for the block, got 0"},
      {"// @launch k<<<1, dim3(32, 0 +)>>>(out)",
       "line 1: block y '0 +': column 4: expected a number, a symbol, a function call or '(', "
       "got end of expression"},
      {"// @launch k<<<1, 32, smem>>>(out)",
       "line 1: unknown symbol 'smem' in shared memory size; the task's shape symbols are "
       "num_tokens, hidden_size"},
      {"// @launch k<<<num_token, 32>>>(out)",
       "line 1: unknown symbol 'num_token' in grid; the task's shape symbols are num_tokens, "
       "hidden_size; did you mean 'num_tokens'?"},
      {"// @launch k<<<dim3(1, epsilon), 32>>>(out)",
       "line 1: grid y uses 'epsilon', which is a scalar; sizes and conditions may use only the "
       "shape symbols num_tokens, hidden_size"},
      {"// @launch k<<<out, 32>>>(out)",
       "line 1: grid uses 'out', which is a tensor; sizes and conditions may use only the shape "
       "symbols num_tokens, hidden_size"},
      {"// @launch k<<<1, 32>>> out",
       "line 1: expected '(' with the kernel arguments after '>>>', e.g. "
       "k<<<grid, block>>>(out, input)"},
      {"// @launch k<<<1, 32>>>(out, input",
       "line 1: the argument list has no closing ')' (a directive may wrap onto the // comment "
       "lines right below it)"},
      {"// @launch k<<<1, 32>>>(out,\nint x;\n// input)",
       "line 1: the argument list has no closing ')' (a directive may wrap onto the // comment "
       "lines right below it)"},
      {"// @launch k<<<1, 32>>>(out) extra",
       "line 1: unexpected text after the argument list: 'extra'"},
      {"// @launch k<<<1, 32>>>(out,, input)", "line 1: argument 2 is empty"},
      {"// @launch k<<<1, 32>>>(out, hidden_size / 2)",
       "line 1: argument 2 'hidden_size / 2' is not a name; pass a tensor, scalar, shape symbol "
       "or workspace by name and compute derived values inside the kernel"},
      {"// @launch k<<<1, 32>>>(out, &input)",
       "line 1: argument 2 '&input' is not a name; pass a tensor, scalar, shape symbol or "
       "workspace by name and compute derived values inside the kernel"},
      {"\n// @launch k<<<1, 32>>>(out, inp)",
       "line 2: unknown argument 'inp'; the task's tensors are out, input, weight; scalars: "
       "epsilon; symbols: num_tokens, hidden_size"},
      {"// @launch k<<<1, 32>>>(out, scratch)\n// @workspace partial float[4]",
       "line 1: unknown argument 'scratch'; the task's tensors are out, input, weight; scalars: "
       "epsilon; symbols: num_tokens, hidden_size; workspaces: partial"},
      {"// @launch k<float<<<1, 32>>>(out)",
       "line 1: the template arguments of 'k' have no closing '>'"},
      {"// @launch k<><<<1, 32>>>(out)",
       "line 1: empty template argument list '<>' for 'k'; drop the brackets or give the "
       "arguments"},
      {"// @launch k<float; int x><<<1, 32>>>(out)",
       "line 1: the template arguments of 'k' contain a character ';'; only types, numbers and "
       "constant "
       "expressions are allowed"},
      {"// @launch k<\xc3\xa9><<<1, 32>>>(out)",
       "line 1: the template arguments of 'k' contain a byte 0xc3; only types, numbers and "
       "constant expressions are allowed"},
      {"// @launch k<\"a\"><<<1, 32>>>(out)",
       "line 1: the template arguments of 'k' contain a character '\"'; only types, numbers and "
       "constant "
       "expressions are allowed"},
      {"// @launch if num_tokens > 1 k<<<1, 32>>>(out)",
       "line 1: expected '(' after 'if'; write // @launch if (CONDITION) kernel<<<grid, "
       "block>>>(args)"},
      {"// @launch if (num_tokens > 1 k<<<1, 32>>>(out)",
       "line 1: the if condition has no closing ')'"},
      {"// @launch if (num_tokens = 1) k<<<1, 32>>>(out)",
       "line 1: if condition 'num_tokens = 1': column 12: unexpected character '='; did you mean "
       "'=='?"},
      {"// @launch k<<<1, 2048>>>(out)",
       "line 1: block size 2048 exceeds the 1024 threads a block may have"},
      {"// @launch k<<<1, dim3(32, 64)>>>(out)",
       "line 1: block size 32 x 64 x 1 = 2048 exceeds the 1024 threads a block may have"},
      {"// @launch k<<<1, dim3(1, 1, 128)>>>(out)",
       "line 1: block z 128 exceeds the device limit of 64"},
      {"// @launch k<<<1, 0>>>(out)",
       "line 1: block is 0; every grid, block and cluster dimension must be at least 1"},
      {"// @launch k<<<dim3(4, -1), 32>>>(out)",
       "line 1: grid y is -1; every grid, block and cluster dimension must be at least 1"},
      {"// @launch k<<<dim3(1, 70000), 32>>>(out)",
       "line 1: grid y 70000 exceeds the device limit of 65535; put the largest dimension in x"},
      {"// @launch k<<<4294967296, 32>>>(out)",
       "line 1: grid 4294967296 exceeds the device limit of 2147483647"},
      {"// @launch k<<<1, 32, 300000>>>(out)",
       "line 1: shared memory size 300000 bytes exceeds the 232448 bytes of dynamic shared memory "
       "a block may use"},
      {"// @launch k<<<1, 32, -4>>>(out)", "line 1: shared memory size -4 is negative"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w flaot[4]",
       "line 2: unknown workspace element type 'flaot'; did you mean 'float'?"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w float*[4]",
       "line 2: unknown workspace element type 'float*'; did you mean 'float'?"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w quaternion[4]",
       "line 2: unknown workspace element type 'quaternion'; use a dtype (bf16, f16, f32, f64, "
       "i8, u8, i16, i32, i64, bool) or a CUDA type (float, __nv_bfloat16, __half, int, unsigned "
       "int, int64_t, float4, ...)"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w[4]",
       "line 2: workspace 'w' needs an element type and a count: // @workspace w float[COUNT]"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w float[4",
       "line 2: expected ']' at the end of the count of workspace 'w'"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace float[4]",
       "line 2: workspace 'float' needs an element type and a count: // @workspace float "
       "float[COUNT]"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace",
       "line 2: expected a workspace name; write "
       "// @workspace NAME TYPE[COUNT], e.g. // @workspace partials float[num_tokens * 64]"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace input float[4]",
       "line 2: workspace 'input' has the same name as the task's tensor; pick another name"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace hidden_size float[4]",
       "line 2: workspace 'hidden_size' has the same name as the task's shape symbol; pick "
       "another name"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w float[4]\n// @workspace w int[4]",
       "line 3: workspace 'w' is declared twice (first at line 2)"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w float[n]",
       "line 2: unknown symbol 'n' in workspace 'w' count; the task's shape symbols are "
       "num_tokens, hidden_size"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w float[-1]",
       "line 2: workspace 'w' count -1 is negative"},
      {"// @launch k<<<1, 32>>>(out)\n// @workspace w double[0x10000000]",
       "line 2: workspace 'w' needs 268435456 x 8 bytes, more than the 1073741824 bytes all "
       "workspaces together may use"},
      {"// @launch k<<<1, 32>>>(out)\n// @cluster other (2, 1, 1)",
       "line 2: the cluster shape names kernel 'other', which no launch runs; the launched "
       "kernels are k"},
      {"// @launch k<<<8, 32>>>(out)\n// @cluster k (4, 4, 1)",
       "line 2: cluster 4 x 4 x 1 = 16 blocks exceeds the 8 blocks a cluster may have"},
      {"// @launch k<<<8, 32>>>(out)\n// @cluster k (0)",
       "line 2: cluster x is 0; every grid, block and cluster dimension must be at least 1"},
      {"// @launch k<<<8, 32>>>(out)\n// @cluster k 2, 1, 1",
       "line 2: expected the cluster shape in parentheses after 'k'; write // @cluster k (2, 1, "
       "1)"},
      {"// @launch k<<<8, 32>>>(out)\n// @cluster k (1, 1, 1, 1)",
       "line 2: a cluster shape takes 1 to 3 values (x, y, z), got 4"},
      {"// @launch k<<<8, 32>>>(out)\n// @cluster k (2)\n// @cluster k (1)",
       "line 3: kernel 'k' already has a cluster shape (line 2)"},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string source = c.source;
    CAPTURE(source);
    const auto plan = parse_launch_plan(source, context);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error().code == core::ErrorCode::kInvalidArgument);
    CHECK(plan.error().message == c.message);
  }
}

TEST_CASE("launch plan: caps on hostile sources") {
  const PlanContext context = rms_norm_context();
  std::string many;
  for (int i = 0; i < 17; ++i) many += "// @launch k<<<1, 32>>>(out)\n";
  auto plan = parse_launch_plan(many, context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message ==
        "line 17: launch 17 is one too many; a plan may have at most 16 launches (do more work "
        "per kernel, or loop inside one)");

  std::string flood;
  for (int i = 0; i < 100; ++i) flood += "// @launch k<<<1, 32>>>(out)\n";
  plan = parse_launch_plan(flood, context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message ==
        "line 65: more than 64 directives; a plan has at most 16 launches, 8 workspaces, 8 tensor "
        "maps and one cluster shape per kernel");

  plan = parse_launch_plan("// @launch k<<<1, 32>>>(out" + std::string(2000, ' ') + ")", context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message == "line 1: the directive is 2025 bytes long; the limit is 1024");

  plan = parse_launch_plan(std::string(300 * 1024, ' '), context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message == "the source is 307200 bytes; the limit is 262144 bytes");

  // Long ordinary comments and unterminated literals are fine; only directives are capped.
  const std::string noisy =
      "// " + std::string(5000, 'x') + "\n/* unterminated \"\n'" + "\n// @launch k<<<1, 32>>>(out)";
  plan = parse_launch_plan(noisy, context);
  REQUIRE_FALSE(plan.ok());  // the launch is inside the unterminated block comment
  CHECK(plan.error().message.rfind("no @launch directive found", 0) == 0);

  std::string deep =
      "// @launch k<<<" + std::string(200, '(') + "1" + std::string(200, ')') + ", 32>>>(out)";
  plan = parse_launch_plan(deep, context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("expression nests deeper than 64 levels") != std::string::npos);
}

TEST_CASE("launch plan: name expressions are unique, in first-launch order") {
  const auto plan = parse_launch_plan(
      "// @launch a<float, 4><<<1, 32>>>(out)\n// @launch b<<<1, 32>>>(out)\n"
      "// @launch a<float, 4><<<2, 32>>>(out)\n// @launch a<float, 8><<<2, 32>>>(out)\n",
      rms_norm_context());
  REQUIRE(plan.ok());
  CHECK(plan->name_expressions() == std::vector<std::string>{"a<float, 4>", "b", "a<float, 8>"});
  CHECK(plan->launches[0].kernel == "a");
  CHECK(plan->launches[0].template_args == "float, 4");
  CHECK(plan->launches[1].template_args.empty());
  CHECK(plan->launches[2].where == "line 3");
  CHECK(plan->launches[2].args.size() == 1);
}

TEST_CASE("launch plan: limits come from the context") {
  PlanContext context = rms_norm_context();
  context.limits.max_launches = 2;
  context.limits.max_cluster_size = 16;
  context.limits.max_threads_per_block = 512;
  auto plan = parse_launch_plan("// @launch k<<<16, 32>>>(out)\n// @cluster k (16)\n", context);
  CHECK(plan.ok());
  plan = parse_launch_plan("// @launch k<<<1, 1024>>>(out)", context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message == "line 1: block size 1024 exceeds the 512 threads a block may have");
  plan = parse_launch_plan(
      "// @launch k<<<1, 32>>>(out)\n// @launch k<<<1, 32>>>(out)\n// @launch k<<<1, 32>>>(out)",
      context);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message ==
        "line 3: launch 3 is one too many; a plan may have at most 2 launches (do more work per "
        "kernel, or loop inside one)");
}

// Found by fuzz/fuzz_launch_plan: a field quoted with the agent's bytes as they were.
TEST_CASE("launch plan: messages quoting ill-formed UTF-8 are valid UTF-8") {
  struct Case {
    const char* name;
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"a grid expression", "// @launch k<<<cdiv(num_tokens\xff\xfe, 4), 32>>>(out)",
       "line 1: grid 'cdiv(num_tokens\xef\xbf\xbd\xef\xbf\xbd, 4)': column 16: unexpected byte "
       "0xff"},
      {"a workspace element type",
       "// @launch k<<<1, 32>>>(out, w)\n// @workspace w fl\xc3oat[4]\n",
       "line 2: unknown workspace element type 'fl\xef\xbf\xbdoat'; did you mean 'float'?"},
  };
  const PlanContext context = rms_norm_context();
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto plan = parse_launch_plan(c.source, context);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error().message == c.message);
  }
}
