// Compile log sanitizing, ptxas verbose parsing, cubin attributes, cache keys, option checks,
// and the worker wire format: pure functions, no NVRTC.
#include <doctest/doctest.h>

#include <string>

#include "sandbox/compile_job.hpp"
#include "sandbox/compile_log.hpp"

using crucible::core::StepStatus;
using namespace crucible::sandbox;

TEST_CASE("compile log: host paths are rewritten, ptxas and PCH lines dropped") {
  const std::string raw =
      "\"kernel.cu\": using precompiled header file \"/tmp/crucible-pch/prelude-x-sm_90a.pch\"\n"
      "/usr/local/cuda-13.0/include/cccl/cuda/std/detail/x.h(12): error: bad\n"
      "/usr/local/cuda-13.0/include/cuda_bf16.hpp(3): note: here\n"
      "kernel.cu(7): error: expected a \";\"\n"
      "ptxas info    : Used 28 registers, used 1 barriers, 128 bytes smem\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas warning : Registers are spilled\n";
  const std::string log =
      sanitize_compile_log(raw, {{"/usr/local/cuda-13.0/include/", "<cuda>/"},
                                 {"/usr/local/cuda-13.0/include/cccl/", "<cccl>/"}});
  CHECK(log ==
        "<cccl>/cuda/std/detail/x.h(12): error: bad\n"
        "<cuda>/cuda_bf16.hpp(3): note: here\n"
        "kernel.cu(7): error: expected a \";\"\n"
        "ptxas warning : Registers are spilled\n");
}

TEST_CASE("compile log: capped on a line boundary with a note of what was cut") {
  std::string raw;
  for (int i = 0; i < 1000; ++i) raw += "kernel.cu(" + std::to_string(i) + "): error: something\n";
  const std::string log = sanitize_compile_log(raw, {}, 1024);
  CHECK(log.size() <= 1024);
  CHECK(log.find("[log truncated: ") != std::string::npos);
  CHECK(log.rfind("kernel.cu(0): error", 0) == 0);
  const auto note = log.find("[log truncated");
  CHECK(log[note - 1] == '\n');
}

TEST_CASE("compile log: invalid UTF-8 is replaced, valid UTF-8 kept") {
  const std::string raw = std::string("kernel.cu(1): error: \xff\xfe bad \xc3\xa9t\xc3\xa9\n");
  CHECK(sanitize_compile_log(raw, {}) ==
        "kernel.cu(1): error: \xef\xbf\xbd\xef\xbf\xbd bad \xc3\xa9t\xc3\xa9\n");
}

TEST_CASE("ptxas info: per-entry figures are parsed, device functions ignored") {
  const std::string raw =
      "ptxas info    : 610 bytes gmem\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kPf\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 2 barriers, 4096 bytes smem, 368 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'plain' for 'sm_90a'\n"
      "ptxas info    : Function properties for plain\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers\n";
  auto kernels = parse_ptxas_info(raw);
  REQUIRE(kernels.size() == 2);
  const auto& k = kernels.at("_Z1kPf");
  CHECK(k.registers == 255);
  CHECK(k.barriers == 2);
  CHECK(k.static_smem_bytes == 4096);
  CHECK(k.constant_bytes == 368);
  CHECK(k.local_bytes == 24);
  CHECK(k.spill_store_bytes == 8);
  CHECK(k.spill_load_bytes == 12);
  CHECK(kernels.at("plain").registers == 12);
  CHECK(kernels.at("plain").static_smem_bytes == 0);
  apply_cubin_attributes("not an elf", &kernels);
  CHECK(kernels.at("_Z1kPf").max_threads == 256);
  CHECK(kernels.at("plain").max_threads == 1024);
}

TEST_CASE("max threads: follows the 64 Ki register file with 256-register warp granules") {
  CHECK(max_threads_for_registers(0) == 1024);
  CHECK(max_threads_for_registers(32) == 1024);
  CHECK(max_threads_for_registers(64) == 1024);
  CHECK(max_threads_for_registers(65) == 896);
  CHECK(max_threads_for_registers(128) == 512);
  CHECK(max_threads_for_registers(255) == 256);
}

TEST_CASE("cache key: every input changes the key") {
  CompileJob job;
  job.source = "__global__ void k() {}";
  job.arch = "sm_90a";
  const auto base = compile_cache_key(job, "nvrtc-13.0");
  CHECK(base.size() == 64);
  CHECK(compile_cache_key(job, "nvrtc-13.0") == base);
  CHECK(compile_cache_key(job, "nvrtc-13.1") != base);
  CompileJob changed = job;
  changed.arch = "sm_80";
  CHECK(compile_cache_key(changed, "nvrtc-13.0") != base);
  changed = job;
  changed.name_expressions = {"k"};
  CHECK(compile_cache_key(changed, "nvrtc-13.0") != base);
  changed = job;
  changed.extra_options = {"-lineinfo"};
  CHECK(compile_cache_key(changed, "nvrtc-13.0") != base);
  changed = job;
  changed.source += " ";
  CHECK(compile_cache_key(changed, "nvrtc-13.0") != base);
  // Field boundaries are unambiguous.
  CompileJob a = job, b = job;
  a.name_expressions = {"ab", "c"};
  b.name_expressions = {"a", "bc"};
  CHECK(compile_cache_key(a, "t") != compile_cache_key(b, "t"));
}

TEST_CASE("extra options: only code-generation and macro flags are allowed") {
  CHECK_FALSE(
      disallowed_extra_option({"-lineinfo", "-DTILE=128", "--use_fast_math", "-maxrregcount=64"}));
  CHECK(disallowed_extra_option({"-I/etc"}) == "-I/etc");
  CHECK(disallowed_extra_option({"--include-path=/"}));
  CHECK(disallowed_extra_option({"--pre-include=/etc/passwd"}));
  CHECK(disallowed_extra_option({"-rdc=true"}));
  CHECK(disallowed_extra_option({"-default-device"}));
  CHECK(disallowed_extra_option({"--use-pch=/tmp/x"}));
  CHECK(disallowed_extra_option({"-D"}));
  CHECK(disallowed_extra_option({"-DX=1\n#include </etc/passwd>"}));
}

TEST_CASE("worker wire format: jobs and outputs round-trip") {
  CompileJob job;
  job.source = "src";
  job.name_expressions = {"k<1>", "k<2>"};
  job.arch = "sm_90a";
  job.extra_options = {"-lineinfo"};
  auto parsed = job_from_wire(job_to_wire(job));
  REQUIRE(parsed.ok());
  CHECK(parsed->source == "src");
  CHECK(parsed->name_expressions == job.name_expressions);
  CHECK(parsed->extra_options == job.extra_options);
  CHECK(parsed->test_fault.empty());

  CompileOutput out;
  out.status = StepStatus::kOk;
  out.log = "warning";
  out.cubin = std::string(
      "\x7f"
      "ELF\0\1\2",
      7);
  out.lowered_names = {{"k<1>", "_Z1kILi1EEvv"}};
  out.kernels["_Z1kILi1EEvv"].registers = 30;
  out.compile_ms = 12.5;
  auto back = output_from_wire(output_to_wire(out));
  REQUIRE(back.ok());
  CHECK(back->status == StepStatus::kOk);
  CHECK(back->cubin == out.cubin);
  CHECK(back->lowered_names == out.lowered_names);
  CHECK(back->kernels.at("_Z1kILi1EEvv").registers == 30);
  CHECK(back->compile_ms == doctest::Approx(12.5));

  CHECK_FALSE(job_from_wire(crucible::core::Value{{"source", 3}}).ok());
  CHECK_FALSE(output_from_wire(crucible::core::Value{{"status", "bogus"}}).ok());
}
