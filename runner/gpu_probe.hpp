// Finds the CUDA devices of this machine without linking the driver (CI has no libcuda.so.1).
#pragma once

#include <string>
#include <vector>

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

}  // namespace crucible::runner
