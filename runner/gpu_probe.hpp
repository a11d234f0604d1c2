// Finds the CUDA devices of this machine without linking the driver (CI has no libcuda.so.1).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::runner {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
};

struct GpuProbe {
  std::vector<GpuInfo> gpus;
  // Why there is no usable GPU, when `gpus` is empty: "libcuda.so.1 not found", "cuInit failed
  // with error 100 (no CUDA-capable device)", ...
  std::string reason;
  core::Value to_value() const;
};

// Loads the driver with dlopen, initialises it and lists the devices. Call it in a child or
// before any fork that must not inherit a CUDA context: cuInit in the server process is cheap
// and creates no context. Never throws.
GpuProbe probe_gpus();

// The GPUs named by `list`, a comma list of CUDA ordinals such as "0,2" (the operator's --gpus),
// in the list's order. Errors (kInvalidArgument, the message naming the GPUs that exist): an
// empty list or entry, an entry that is not a non-negative integer, a duplicate, or an ordinal
// the probe did not find. Pure; never throws.
core::Result<GpuProbe> select_gpus(const GpuProbe& probe, std::string_view list);

}  // namespace crucible::runner
