// KernelTimer: CUPTI activity buffers, the launch callback, and the join of records to calls.
#include "runner/child/kernel_timer.hpp"

#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "runner/child/cuda_check.hpp"

namespace crucible::runner::child {
namespace {

constexpr std::size_t kBufferBytes = 8u << 20;
constexpr std::size_t kAlign = 8;

struct KernelRecord {
  std::uint32_t correlation_id;
  std::uint64_t start;
  std::uint64_t end;
  bool memset;  // a memset a library call issued, not a kernel
};

std::mutex g_mutex;
std::vector<KernelRecord> g_records;  // filled by CUPTI's buffer-completed callback
std::uint64_t g_dropped = 0;
KernelTimer* g_timer = nullptr;
CUpti_SubscriberHandle g_subscriber = nullptr;

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer,
                               std::size_t /*size*/, std::size_t valid_size) {
  std::vector<KernelRecord> batch;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      batch.push_back({kernel->correlationId, kernel->start, kernel->end, false});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* memset = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      batch.push_back({memset->correlationId, memset->start, memset->end, true});
    }
  }
  std::size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped);
  std::free(buffer);
  std::lock_guard lock(g_mutex);
  g_records.insert(g_records.end(), batch.begin(), batch.end());
  g_dropped += dropped;
}

// Every API call that launches a kernel or sets memory asynchronously: the runner launches its
// own and agents' kernels with cuLaunchKernelEx; a vendor library (the cuBLASLt reference)
// launches, and may clear scratch memory, through its runtime, and that work is part of its
// call. When a runtime call enters the driver, both calls are tagged; the record names one of
// them and collect() drops the other. (The runner's own memsets are never tagged.)
constexpr CUpti_CallbackId kDriverLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz,
};
constexpr CUpti_CallbackId kRuntimeLaunches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_ptsz_v7000,
};

void CUPTIAPI on_callback(void* /*userdata*/, CUpti_CallbackDomain domain, CUpti_CallbackId /*id*/,
                          const void* data) {
  // Only the launch callbacks above are enabled.
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite == CUPTI_API_ENTER && g_timer != nullptr) {
    g_timer->on_launch(info->correlationId);
  }
}

std::string cupti_text(CUptiResult result, const char* what) {
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  return std::string(what) + " failed: " + (text != nullptr ? text : "unknown CUPTI error");
}

}  // namespace

std::string KernelTimer::start(KernelTimer** out) {
  *out = nullptr;
  if (g_timer != nullptr) return "a KernelTimer already exists in this process";
  CUptiResult rc = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (rc != CUPTI_SUCCESS) return cupti_text(rc, "cuptiActivityRegisterCallbacks");
  rc = cuptiSubscribe(&g_subscriber, on_callback, nullptr);
  if (rc != CUPTI_SUCCESS) return cupti_text(rc, "cuptiSubscribe");
  for (const auto id : kDriverLaunches) {
    rc = cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
    if (rc != CUPTI_SUCCESS) return cupti_text(rc, "cuptiEnableCallback(driver launch)");
  }
  for (const auto id : kRuntimeLaunches) {
    rc = cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    if (rc != CUPTI_SUCCESS) return cupti_text(rc, "cuptiEnableCallback(runtime launch)");
  }
  rc = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (rc != CUPTI_SUCCESS) return cupti_text(rc, "cuptiActivityEnable(CONCURRENT_KERNEL)");
  rc = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  if (rc != CUPTI_SUCCESS) return cupti_text(rc, "cuptiActivityEnable(MEMSET)");
  g_timer = new KernelTimer();
  *out = g_timer;
  return "";
}

KernelTimer::~KernelTimer() {
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  if (g_subscriber != nullptr) cuptiUnsubscribe(g_subscriber);
  g_subscriber = nullptr;
  g_timer = nullptr;
}

void KernelTimer::on_launch(std::uint32_t correlation_id) {
  if (tag_ != 0) correlation_to_tag_[correlation_id] = tag_;
}

std::unordered_map<std::uint64_t, CallSpan> KernelTimer::collect(
    std::unordered_map<std::uint64_t, std::vector<OperationSpan>>* operations) {
  cuptiActivityFlushAll(1);  // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
  std::vector<KernelRecord> records;
  {
    std::lock_guard lock(g_mutex);
    records.swap(g_records);
  }
  std::unordered_map<std::uint64_t, CallSpan> spans;
  // A graph launch is one API call: every kernel and memset of the graph carries its
  // correlation id, so ids stay in the map until the end.
  for (const auto& record : records) {
    const auto it = correlation_to_tag_.find(record.correlation_id);
    if (it == correlation_to_tag_.end()) continue;
    CallSpan& span = spans[it->second];
    const bool first = span.kernels + span.memsets == 0;
    if (first || record.start < span.start_ns) span.start_ns = record.start;
    if (first || record.end > span.end_ns) span.end_ns = record.end;
    ++(record.memset ? span.memsets : span.kernels);
    if (operations != nullptr) (*operations)[it->second].push_back({record.start, record.end});
  }
  if (operations != nullptr) {
    for (auto& [tag, list] : *operations) {
      std::sort(list.begin(), list.end(), [](const OperationSpan& a, const OperationSpan& b) {
        return a.start_ns < b.start_ns;
      });
    }
  }
  // Callers synchronise first, so every tagged launch has its record by now: what is left are
  // the second halves of runtime launches tagged twice (and launches that failed).
  correlation_to_tag_.clear();
  return spans;
}

std::uint32_t KernelTimer::count_operations(CUstream stream, std::uint64_t tag,
                                            const std::function<void()>& enqueue) {
  {
    const TagScope scope(*this, tag);
    enqueue();
  }
  check(cuStreamSynchronize(stream), "counted call");
  const auto spans = collect();
  const auto it = spans.find(tag);
  return it == spans.end() ? 0 : it->second.operations();
}

std::uint64_t KernelTimer::dropped_records() const {
  std::lock_guard lock(g_mutex);
  return g_dropped;
}

}  // namespace crucible::runner::child
