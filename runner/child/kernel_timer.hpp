// CUPTI activity tracing of the runner's own kernel launches: exact GPU start/end per call.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace crucible::runner::child {

// GPU time span of one call (all kernels launched, and memsets issued, while the call's tag was
// set: a library call's scratch clearing is part of its time).
struct CallSpan {
  std::uint64_t start_ns = 0;  // first kernel or memset start
  std::uint64_t end_ns = 0;    // last kernel or memset end
  std::uint32_t kernels = 0;
  std::uint32_t memsets = 0;
  std::uint32_t operations() const { return kernels + memsets; }
  double duration_ns() const { return static_cast<double>(end_ns - start_ns); }
};

// One kernel or memset of a call.
struct OperationSpan {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
};

// One per process. Enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL and MEMSET records and
// callbacks on the kernel-launch and asynchronous-memset entry points of the driver and runtime
// APIs (the runner launches with
// cuLaunchKernelEx; a vendor library through its runtime), which report each launch's
// correlation id; the runner tags every launch with the call it belongs to, and collect() joins
// the records to calls.
// Kernels launched with tag 0 (input refreshes, L2 flushes) are left out. Not thread-safe:
// launches and collect() happen on the runner's one thread.
class KernelTimer {
 public:
  // Errors are returned as text: CUPTI not available, subscriber already taken, ...
  static std::string start(KernelTimer** out);
  ~KernelTimer();

  // Launches that follow belong to call `tag` (> 0); 0 stops tagging.
  void set_tag(std::uint64_t tag) { tag_ = tag; }
  // Flushes CUPTI's buffers (call after a stream synchronize) and returns the spans of every
  // tagged call whose kernels have all been recorded since the last collect(). With
  // `operations`, also each call's kernels and memsets, in order of their start (a CUDA graph
  // launched as one call runs its nodes in that order when they form a chain).
  std::unordered_map<std::uint64_t, CallSpan> collect(
      std::unordered_map<std::uint64_t, std::vector<OperationSpan>>* operations = nullptr);
  // Runs `enqueue` (which issues work on `stream`) as call `tag`, waits for the stream and
  // returns how many kernels and memsets it issued. Throws CudaFailure.
  std::uint32_t count_operations(CUstream stream, std::uint64_t tag,
                                 const std::function<void()>& enqueue);
  // Records CUPTI reported lost since start (buffer overflow): any > 0 voids the timing.
  std::uint64_t dropped_records() const;

  // Called from the CUPTI callback (internal).
  void on_launch(std::uint32_t correlation_id);

 private:
  KernelTimer() = default;
  std::uint64_t tag_ = 0;
  std::unordered_map<std::uint32_t, std::uint64_t> correlation_to_tag_;
};

// Launches made while one of these lives belong to call `tag`; the tag is cleared however the
// scope ends (a launch that throws must not leave later launches tagged).
class TagScope {
 public:
  TagScope(KernelTimer& timer, std::uint64_t tag) : timer_(timer) { timer_.set_tag(tag); }
  ~TagScope() { timer_.set_tag(0); }
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  KernelTimer& timer_;
};

}  // namespace crucible::runner::child
