// Compile job and result types shared by the compile pool (server side) and the compile
// worker (child side), their wire form between the two, and the cache key.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "core/step_status.hpp"
#include "core/value.hpp"

namespace crucible::sandbox {

// One NVRTC compilation. Options are the server's: -arch, -std=c++17, -I for the CUDA and
// CCCL headers and the prelude are fixed by the worker; `extra_options` carries further
// server-chosen flags (e.g. "-lineinfo", "-DTILE=128") and must never contain agent text.
struct CompileJob {
  std::string source;                         // the agent's CUDA C++ text
  std::vector<std::string> name_expressions;  // registered with nvrtcAddNameExpression
  std::string arch;                           // "sm_90a"; empty: the pool's default
  std::vector<std::string> extra_options;     // see above; checked against an allow-list
  // Test hook: "abort" makes the worker crash, "hang" makes it spin. Honoured only by workers
  // started with test faults enabled (CompilePoolOptions::allow_test_faults).
  std::string test_fault;
};

// Per-kernel figures from ptxas (`--ptxas-options=-v`) and the cubin's .nv.info attributes.
struct KernelResources {
  int registers = 0;          // per thread
  int spill_store_bytes = 0;  // per thread
  int spill_load_bytes = 0;   // per thread
  int static_smem_bytes = 0;  // per block, static __shared__ only
  int local_bytes = 0;        // per thread stack frame (local memory)
  int constant_bytes = 0;     // cmem[0] kernel parameters + constants used
  int max_threads = 0;        // per block: min(1024, register-file bound, __launch_bounds__)
  int barriers = 0;           // named barriers used
  core::Value to_value() const;
  static core::Result<KernelResources> from_value(const core::Value& value);
};

struct CompileOutput {
  core::StepStatus status = core::StepStatus::kInfraError;  // kOk, kCompileError,
                                                            // kInvalidAction, kInfraError
  std::string log;                                          // sanitized, capped, agent line numbers
  std::string cubin;                                        // ELF bytes; empty unless kOk
  std::map<std::string, std::string> lowered_names;         // name expression -> mangled name
  std::map<std::string, KernelResources> kernels;           // mangled entry name -> resources
  double compile_ms = 0;                                    // worker-side NVRTC time
  bool cache_hit = false;  // served from the cache or from an identical in-flight job
  // The observation's view: everything but the cubin (its size is reported instead).
  core::Value to_value() const;
};

// The worker protocol (frames of sandbox/frame_pipe.hpp). Errors: kBadRequest on a frame
// that does not have the expected shape.
core::Value job_to_wire(const CompileJob& job);
core::Result<CompileJob> job_from_wire(const core::Value& value);
core::Value output_to_wire(const CompileOutput& output);  // with the cubin
core::Result<CompileOutput> output_from_wire(const core::Value& value);

// The log line of a compile that ran out of the worker's memory cap (the worker adds it when
// NVRTC says so; the pool when the compiler's log shows it).
inline constexpr std::string_view kCompileOutOfMemory =
    "compilation ran out of memory (the compile worker's memory cap)\n";

// The header text every job is compiled with (pre-included, so it adds no lines to the
// agent's file), and a short hash of it that versions cache entries and PCH files.
const std::string& compile_prelude();
const std::string& compile_prelude_version();

// Content key of a job whose arch is already resolved: sha256 over the prelude version, the
// toolchain version, arch, extra options, name expressions and source, each length-prefixed.
std::string compile_cache_key(const CompileJob& job, std::string_view toolchain);

// Extra options a job may carry; anything touching include paths, PCH, relocatable code,
// the default execution space or output kinds is refused. Returns the first offender.
std::optional<std::string> disallowed_extra_option(const std::vector<std::string>& options);

}  // namespace crucible::sandbox
