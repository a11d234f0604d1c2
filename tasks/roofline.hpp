// The roofline (speed-of-light) model: bytes and FLOPs of one call, and the time floor they set.
#pragma once

#include <cstdint>

#include "core/result.hpp"
#include "tasks/task.hpp"

namespace crucible::tasks {

// Work of one call of the production module on one case.
struct RooflineCost {
  std::int64_t bytes = 0;  // bytes that must move between HBM and the SM (each tensor once)
  std::int64_t flops = 0;  // floating-point operations
};

// Evaluates the task's formulas for `c`. Errors (kInvalidArgument): a symbol the case lacks
// or an overflow; never for a (Task, Case) pair from the registry, which checked both.
core::Result<RooflineCost> roofline_cost(const Task& task, const Case& c);

// Peak rates of one GPU. A floor must be optimistic, so use the highest figures the GPU can
// reach: HBM bandwidth and dense tensor-core throughput.
struct GpuPeak {
  double memory_bytes_per_s = 0.0;
  double flops_per_s = 0.0;
};
// H200 SXM: 4.8 TB/s HBM3e; 989 TFLOP/s dense bf16 tensor-core math.
inline constexpr GpuPeak kH200Peak{4.8e12, 989e12};

// Time no correct kernel can beat: max(bytes / bandwidth, flops / peak), in nanoseconds.
// A measured time below it is physically impossible (DESIGN.md section 4, plausibility).
double roofline_floor_ns(const RooflineCost& cost, const GpuPeak& peak);

}  // namespace crucible::tasks
