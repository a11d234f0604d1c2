// References computed by a vendor library instead of an NVRTC kernel (`[reference] library` in a
// task manifest). The library is loaded with dlopen when a job first needs it, so the runner
// starts, and every other task runs, where the library is missing.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.hpp"

namespace crucible::runner::child {

// The library names a manifest may give (tasks::known_reference_libraries has the same list).
//   "cublaslt": out[M, N] = input[M, K] @ weight[N, K]^T, bf16 with fp32 accumulation (split-K
//               reductions in fp32 only); the task's tensors are (out, input, weight) in that
//               order.
//   "cublaslt_fp8_rowwise": out[M, N] = a_scales[M] * b_scales[N] * (a[M, K] @ b[N, K]^T), a and b
//               fp8 e4m3, scales fp32, out bf16, fp32 accumulation (fast accumulation off), the
//               scales applied to the fp32 sum by cuBLASLt's outer-vector scale mode (cuBLASLt
//               12.9 or later, sm_90); the task's tensors are (out, a, b, a_scales, b_scales).
// One instance per job, used from the runner's one thread; the per-shape algorithm choices are
// process-wide and guarded by a mutex.
// What the runner lends a library while it readies a case.
struct LibraryHooks {
  CUstream stream = nullptr;
  std::function<void()> flush_l2;  // enqueues an L2 flush on the stream
  // Runs `launch` (which enqueues work on the stream), waits, and returns how many kernels and
  // memsets it issued (CUPTI): the runner's timing joins exactly that many into one call.
  std::function<std::uint32_t(const std::function<void()>& launch)> count_kernels;
};

class LibraryReference {
 public:
  virtual ~LibraryReference() = default;

  // Readies case `index` of the job. `shapes` are the task tensors' shapes in manifest order,
  // `dtype` the first tensor's (the output's) element type, `timed` whether the case is timed
  // (visible): only those get an algorithm search (once per shape per process); others take the
  // library's first choice.
  // Throws CudaFailure or std::runtime_error with a message saying what is missing or
  // unsupported.
  virtual void prepare_case(std::size_t index, const std::vector<std::vector<std::int64_t>>& shapes,
                            core::DType dtype, bool timed, const LibraryHooks& hooks) = 0;
  // Kernels and memsets one call of case `index` issues (known after prepare_case).
  virtual std::uint32_t kernels_per_call(std::size_t index) const = 0;
  // Enqueues case `index` on `stream` over the task tensors' device pointers (manifest order).
  virtual void launch(std::size_t index, const std::vector<CUdeviceptr>& tensors,
                      CUstream stream) = 0;
  // Zeroes the library's own scratch memory (split-K partial sums of the last call), so nothing
  // of the reference's answer stays on the device while candidate code runs.
  virtual void scrub(CUstream stream) = 0;
  // What was chosen for case `index`, for the report ("cuBLASLt ... algo 66 tile 13 ...").
  virtual std::string describe(std::size_t index) const = 0;
};

// A new instance for `name`. Throws std::runtime_error for an unknown name or a library that
// cannot be loaded (the message lists where it looked).
std::unique_ptr<LibraryReference> make_library_reference(const std::string& name);

}  // namespace crucible::runner::child
