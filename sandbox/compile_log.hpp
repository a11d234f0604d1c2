// Pure helpers of the compile worker: sanitize the NVRTC log for the agent, and read per-kernel
// resources from ptxas's verbose output and from the cubin's .nv.info attributes.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sandbox/compile_job.hpp"

namespace crucible::sandbox {

inline constexpr std::size_t kDefaultMaxLogBytes = 16 * 1024;

// Makes a raw NVRTC log fit for an observation: drops ptxas verbose lines (reported as
// structured resources instead) and precompiled-header chatter, rewrites each `replacements`
// prefix (host paths such as the CUDA include dir) to its short form, replaces ill-formed
// UTF-8 with U+FFFD, and caps the result at max_bytes on a line boundary with a note saying how
// much was cut. Thread-safe, never throws on any input.
std::string sanitize_compile_log(
    std::string_view raw, const std::vector<std::pair<std::string, std::string>>& replacements,
    std::size_t max_bytes = kDefaultMaxLogBytes);

// Entry kernels named in ptxas `-v` output ("Compiling entry function '...'") with the figures
// of their "Function properties" and "Used N registers" lines. max_threads is left 0.
std::map<std::string, KernelResources> parse_ptxas_info(std::string_view raw);

// Completes `kernels` from the cubin: __launch_bounds__ (EIATTR_MAX_THREADS of each
// .nv.info.<kernel> section), then max_threads = min(1024, launch bound, register-file bound
// for 64 Ki registers per block). Bytes that are not a well-formed ELF64 are ignored.
void apply_cubin_attributes(std::string_view cubin,
                            std::map<std::string, KernelResources>* kernels);

// Largest block size a kernel using `registers` per thread can launch with (64 Ki registers
// per block, allocated per warp in units of 256).
int max_threads_for_registers(int registers);

}  // namespace crucible::sandbox
