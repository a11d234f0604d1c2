// Roofline evaluation for one case.
#include "tasks/roofline.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <string>

namespace crucible::tasks {

core::Result<RooflineCost> roofline_cost(const Task& task, const Case& c) {
  const std::map<std::string, std::int64_t, std::less<>> symbols(c.symbols.begin(),
                                                                 c.symbols.end());
  auto bytes = task.roofline.bytes_expr.eval(symbols);
  if (!bytes) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       task.id + ": roofline.bytes: " + bytes.error().message};
  }
  auto flops = task.roofline.flops_expr.eval(symbols);
  if (!flops) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       task.id + ": roofline.flops: " + flops.error().message};
  }
  return RooflineCost{*bytes, *flops};
}

double roofline_floor_ns(const RooflineCost& cost, const GpuPeak& peak) {
  const double memory_s = peak.memory_bytes_per_s > 0.0
                              ? static_cast<double>(cost.bytes) / peak.memory_bytes_per_s
                              : 0.0;
  const double compute_s =
      peak.flops_per_s > 0.0 ? static_cast<double>(cost.flops) / peak.flops_per_s : 0.0;
  return std::max(memory_s, compute_s) * 1e9;
}

}  // namespace crucible::tasks
