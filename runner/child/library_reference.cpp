// The cuBLASLt references (llm/linear, llm/fp8_scaled_linear): dlopen'ed entry points,
// descriptors of one GEMM, the per-shape algorithm search and the LibraryReference that launches
// the chosen algorithm.
#include "runner/child/library_reference.hpp"

#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"

namespace crucible::runner::child {
namespace {

// ---- cuBLASLt through dlopen -------------------------------------------------------------------

// The entry points used here, resolved once per process. Types come from cublasLt.h; nothing
// links against the library, so a machine without it still runs every other task.
struct CublasLt {
  void* library = nullptr;
  std::string path;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) algo_get = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtGetVersion) version = nullptr;
  cublasLtHandle_t handle = nullptr;
};

// Where cuBLASLt is looked for, in order: $CRUCIBLE_CUBLASLT, the loader's own search
// (LD_LIBRARY_PATH, ld.so.cache), the CUDA toolkit, and the wheel PyTorch installs.
std::vector<std::string> cublaslt_candidates() {
  std::vector<std::string> out;
  if (const char* explicit_path = std::getenv("CRUCIBLE_CUBLASLT")) out.emplace_back(explicit_path);
  out.emplace_back("libcublasLt.so.13");
  out.emplace_back("/usr/local/cuda/lib64/libcublasLt.so.13");
  out.emplace_back("/usr/local/cuda/targets/x86_64-linux/lib/libcublasLt.so.13");
  out.emplace_back("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcublasLt.so.13");
  out.emplace_back(
      "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13");
  out.emplace_back(
      "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.13");
  return out;
}

template <typename F>
void resolve(void* library, const char* name, F& slot) {
  slot = reinterpret_cast<F>(dlsym(library, name));
  if (slot == nullptr) throw std::runtime_error(std::string("cuBLASLt has no symbol ") + name);
}

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed with status " +
                             std::to_string(static_cast<int>(status)));
  }
}

CublasLt& cublaslt() {
  static std::once_flag once;
  static CublasLt lt;
  static std::string error;
  std::call_once(once, [] {
    std::string tried;
    for (const auto& candidate : cublaslt_candidates()) {
      lt.library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lt.library != nullptr) {
        lt.path = candidate;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + candidate;
    }
    if (lt.library == nullptr) {
      error = "cuBLASLt (libcublasLt.so.13) not found; tried " + tried +
              " (set CRUCIBLE_CUBLASLT to its path)";
      return;
    }
    try {
      resolve(lt.library, "cublasLtCreate", lt.create);
      resolve(lt.library, "cublasLtMatmulDescCreate", lt.desc_create);
      resolve(lt.library, "cublasLtMatmulDescDestroy", lt.desc_destroy);
      resolve(lt.library, "cublasLtMatmulDescSetAttribute", lt.desc_set);
      resolve(lt.library, "cublasLtMatrixLayoutCreate", lt.layout_create);
      resolve(lt.library, "cublasLtMatrixLayoutDestroy", lt.layout_destroy);
      resolve(lt.library, "cublasLtMatmulPreferenceCreate", lt.pref_create);
      resolve(lt.library, "cublasLtMatmulPreferenceDestroy", lt.pref_destroy);
      resolve(lt.library, "cublasLtMatmulPreferenceSetAttribute", lt.pref_set);
      resolve(lt.library, "cublasLtMatmulAlgoGetHeuristic", lt.heuristic);
      resolve(lt.library, "cublasLtMatmulAlgoConfigGetAttribute", lt.algo_get);
      resolve(lt.library, "cublasLtMatmul", lt.matmul);
      resolve(lt.library, "cublasLtGetVersion", lt.version);
      check_lt(lt.create(&lt.handle), "cublasLtCreate");
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw std::runtime_error(error);
  return lt;
}

// ---- the linear layers --------------------------------------------------------------------------

// Workspace offered to cuBLASLt (split-K reductions); 32 MiB is what PyTorch offers on Hopper.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
// Algorithms the heuristic proposes (at most); each is timed and the fastest kept.
constexpr int kCandidates = 32;
constexpr int kTimedCalls = 5;

// The two GEMMs: bf16 operands ("cublaslt"), or fp8 e4m3 operands with a scale per row of the
// input and per row of the weight, applied to the fp32 sum ("cublaslt_fp8_rowwise").
enum class GemmKind { kBf16, kFp8RowwiseScaled };

// OUTER_VEC_32F scales arrived in cuBLASLt 12.9 and are implemented for sm_90 only.
constexpr std::size_t kOuterVectorMinVersion = 120900;

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  GemmKind kind = GemmKind::kBf16;
  auto key() const { return std::make_tuple(m, n, k, static_cast<int>(kind)); }
  std::size_t operand_bytes() const { return kind == GemmKind::kBf16 ? 2 : 1; }
};

// The task tensors one call reads and writes, in manifest order: (out, input, weight) for
// kBf16, (out, a, b, a_scales, b_scales) for kFp8RowwiseScaled (a plays input, b weight).
struct GemmOperands {
  CUdeviceptr out = 0, input = 0, weight = 0, input_scales = 0, weight_scales = 0;
};

// Descriptors of one problem: out[M, N] = input[M, K] @ weight[N, K]^T in row-major terms is,
// column-major, out^T[N, M] = weight[K, N]^T @ input^T[K, M]: A = weight with op T, B = input
// with op N, both with leading dimension K; D = out with leading dimension N. (fp8 on Hopper
// takes only this "TN" arrangement, which is the one a [N, K] weight gives.) With fp8, cuBLASLt's
// M is the output features and its N the tokens, so its A-scale vector is the weight's
// per-channel scales and its B-scale vector the per-token ones.
class GemmDescriptors {
 public:
  explicit GemmDescriptors(const GemmShape& shape) {
    try {
      create(shape);
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~GemmDescriptors() { destroy(); }
  GemmDescriptors(const GemmDescriptors&) = delete;
  GemmDescriptors& operator=(const GemmDescriptors&) = delete;

  void run(const cublasLtMatmulAlgo_t& algo, const GemmOperands& operands, CUdeviceptr workspace,
           std::size_t workspace_bytes, CUstream stream) const {
    auto& lt = cublaslt();
    // The scale vectors are descriptor attributes: set for every call, since the runner rotates
    // its buffers between calls.
    bind_scales(operands);
    const float alpha = 1.0f, beta = 0.0f;
    auto* d = reinterpret_cast<void*>(operands.out);
    check_lt(lt.matmul(lt.handle, desc_, &alpha, reinterpret_cast<void*>(operands.weight), a_,
                       reinterpret_cast<void*>(operands.input), b_, &beta, d, d_, d, d_, &algo,
                       reinterpret_cast<void*>(workspace), workspace_bytes,
                       reinterpret_cast<cudaStream_t>(stream)),
             "cublasLtMatmul");
  }

  // Points the fp8 descriptor's scale attributes at the operands' scale vectors (nothing for
  // bf16).
  void bind_scales(const GemmOperands& operands) const {
    if (kind_ != GemmKind::kFp8RowwiseScaled) return;
    auto& lt = cublaslt();
    const void* a_scale = reinterpret_cast<const void*>(operands.weight_scales);
    const void* b_scale = reinterpret_cast<const void*>(operands.input_scales);
    check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale),
             "A_SCALE_POINTER");
    check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale),
             "B_SCALE_POINTER");
  }

  // Up to `count` algorithms in the heuristic's order of preference. Split-K reductions are
  // limited to fp32 (none, or in the compute type): a reduction in the output type would sum
  // partial products in bf16, and the reference is defined as fp32 accumulation rounded once.
  std::vector<cublasLtMatmulHeuristicResult_t> heuristics(int count) const {
    auto& lt = cublaslt();
    cublasLtMatmulPreference_t preference = nullptr;
    check_lt(lt.pref_create(&preference), "preference");
    const std::uint64_t workspace = kWorkspaceBytes;
    const std::uint32_t reductions =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasStatus_t status = lt.pref_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                        &workspace, sizeof workspace);
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = lt.pref_set(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                           sizeof reductions);
    }
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
    int returned = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = lt.heuristic(lt.handle, desc_, a_, b_, d_, d_, preference, count, results.data(),
                            &returned);
    }
    lt.pref_destroy(preference);
    const std::string what =
        kind_ == GemmKind::kBf16
            ? std::string("cublasLtMatmulAlgoGetHeuristic")
            : std::string(
                  "cublasLtMatmulAlgoGetHeuristic (fp8 e4m3 with OUTER_VEC_32F scales, "
                  "which cuBLASLt >= 12.9 implements on sm_90 only)");
    check_lt(status, what.c_str());
    results.resize(static_cast<std::size_t>(std::max(returned, 0)));
    std::erase_if(results, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
    if (results.empty()) throw std::runtime_error("cuBLASLt proposes no algorithm for this GEMM");
    return results;
  }

 private:
  void create(const GemmShape& shape) {
    auto& lt = cublaslt();
    kind_ = shape.kind;
    const bool fp8 = shape.kind == GemmKind::kFp8RowwiseScaled;
    const cudaDataType_t operand_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const cudaDataType_t out_type = CUDA_R_16BF;
    check_lt(lt.desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
             "TRANSA");
    check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none), "TRANSB");
    if (fp8) {
      if (lt.version() < kOuterVectorMinVersion) {
        throw std::runtime_error("cuBLASLt " + std::to_string(lt.version()) + " at " + lt.path +
                                 " has no per-row fp8 scales (OUTER_VEC_32F needs 12.9 or later)");
      }
      const std::int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof outer),
               "A_SCALE_MODE OUTER_VEC_32F");
      check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof outer),
               "B_SCALE_MODE OUTER_VEC_32F");
      // Fast accumulation off (the default, said explicitly): Hopper's fp8 tensor cores then
      // hand their partial sums to fp32 registers at short intervals, which is the fp32
      // accumulation the task defines. With it on, sums stay in the tensor core's narrower
      // accumulator for all of K.
      const std::int8_t fast_accumulation = 0;
      check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                           sizeof fast_accumulation),
               "FAST_ACCUM");
    }
    const auto m = static_cast<std::uint64_t>(shape.m), n = static_cast<std::uint64_t>(shape.n),
               k = static_cast<std::uint64_t>(shape.k);
    check_lt(lt.layout_create(&a_, operand_type, k, n, static_cast<std::int64_t>(k)), "A layout");
    check_lt(lt.layout_create(&b_, operand_type, k, m, static_cast<std::int64_t>(k)), "B layout");
    check_lt(lt.layout_create(&d_, out_type, n, m, static_cast<std::int64_t>(n)), "D layout");
  }
  void destroy() {
    auto& lt = cublaslt();
    if (a_ != nullptr) lt.layout_destroy(a_);
    if (b_ != nullptr) lt.layout_destroy(b_);
    if (d_ != nullptr) lt.layout_destroy(d_);
    if (desc_ != nullptr) lt.desc_destroy(desc_);
    a_ = b_ = d_ = nullptr;
    desc_ = nullptr;
  }

  GemmKind kind_ = GemmKind::kBf16;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

struct Choice {
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
  std::uint32_t kernels = 0;
  std::string text;
};

std::string algo_text(const cublasLtMatmulAlgo_t& algo) {
  auto& lt = cublaslt();
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute) {
    std::uint32_t value = 0;
    std::size_t written = 0;
    if (lt.algo_get(&algo, attribute, &value, sizeof value, &written) != CUBLAS_STATUS_SUCCESS) {
      return std::string("?");
    }
    return std::to_string(value);
  };
  return "cuBLASLt " + std::to_string(lt.version()) + " algo " + get(CUBLASLT_ALGO_CONFIG_ID) +
         " tile " + get(CUBLASLT_ALGO_CONFIG_TILE_ID) + " stages " +
         get(CUBLASLT_ALGO_CONFIG_STAGES_ID) + " split-k " + get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
}

// Two CUDA events, destroyed on scope exit.
struct EventPair {
  CUevent start = nullptr, end = nullptr;
  EventPair() {
    check(cuEventCreate(&start, CU_EVENT_DEFAULT), "event");
    check(cuEventCreate(&end, CU_EVENT_DEFAULT), "event");
  }
  ~EventPair() {
    if (context_abandoned()) return;
    if (start != nullptr) cuEventDestroy(start);
    if (end != nullptr) cuEventDestroy(end);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// A candidate within this share of the fastest median counts as tied with it; ties go to the
// heuristic's order. Medians of 5 calls of near-equal algorithms swap from process to process,
// and the reference time is the denominator of every reward: a runner that restarts, or a spare
// that takes over, should pick what the last one picked.
constexpr double kTieShare = 0.03;

// Times each candidate algorithm on constant inputs (each call after an L2 flush, CUDA events
// around the GEMM alone, 5 calls after a warm-up) and keeps the first in the heuristic's order
// within kTieShare of the fastest median. `search` false: the heuristic's first choice, untimed
// (hidden cases are only checked, never timed). Then counts the kernels of one call.
Choice choose(const GemmShape& shape, const GemmDescriptors& gemm, const LibraryHooks& hooks,
              bool search) {
  const CUstream stream = hooks.stream;
  const std::size_t esize = shape.operand_bytes();
  const auto elements = [](std::int64_t a, std::int64_t b) {
    return static_cast<std::size_t>(a) * static_cast<std::size_t>(b);
  };
  DeviceBuffer input(elements(shape.m, shape.k) * esize, false);
  DeviceBuffer weight(elements(shape.n, shape.k) * esize, false);
  DeviceBuffer out(elements(shape.m, shape.n) * 2, false);
  DeviceBuffer workspace(kWorkspaceBytes, false);
  if (shape.kind == GemmKind::kBf16) {
    // 0x3C00: 0.0078 in bf16; sums stay finite for any K.
    check(cuMemsetD16Async(input.data(), 0x3C00, elements(shape.m, shape.k), stream), "input");
    check(cuMemsetD16Async(weight.data(), 0x3C00, elements(shape.n, shape.k), stream), "weight");
  } else {
    // 0x30: 0.5 in e4m3; unit scales (0x3F800000 is 1.0f).
    check(cuMemsetD8Async(input.data(), 0x30, elements(shape.m, shape.k), stream), "input");
    check(cuMemsetD8Async(weight.data(), 0x30, elements(shape.n, shape.k), stream), "weight");
  }
  const bool scaled = shape.kind == GemmKind::kFp8RowwiseScaled;
  DeviceBuffer input_scales(scaled ? static_cast<std::size_t>(shape.m) * 4 : 0, false);
  DeviceBuffer weight_scales(scaled ? static_cast<std::size_t>(shape.n) * 4 : 0, false);
  if (scaled) {
    check(cuMemsetD32Async(input_scales.data(), 0x3F800000u, static_cast<std::size_t>(shape.m),
                           stream),
          "input scales");
    check(cuMemsetD32Async(weight_scales.data(), 0x3F800000u, static_cast<std::size_t>(shape.n),
                           stream),
          "weight scales");
  }
  const GemmOperands operands{out.data(), input.data(), weight.data(), input_scales.data(),
                              weight_scales.data()};
  // The heuristic sees the descriptor as the calls will (scale pointers set, not null).
  gemm.bind_scales(operands);
  const auto candidates = gemm.heuristics(search ? kCandidates : 1);
  std::vector<double> medians(candidates.size(), -1.0);
  if (search) {
    EventPair events;
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      std::vector<double> us;
      try {
        for (int call = 0; call <= kTimedCalls; ++call) {
          hooks.flush_l2();
          check(cuEventRecord(events.start, stream), "event record");
          gemm.run(candidates[c].algo, operands, workspace.data(), candidates[c].workspaceSize,
                   stream);
          check(cuEventRecord(events.end, stream), "event record");
          check(cuEventSynchronize(events.end), "search call");
          float ms = 0.0f;
          check(cuEventElapsedTime(&ms, events.start, events.end), "event time");
          if (call > 0) us.push_back(1000.0 * ms);  // the first call warms up
        }
      } catch (const CudaFailure&) {
        throw;
      } catch (const std::runtime_error&) {
        continue;  // an algorithm the heuristic offered that does not run: not a candidate
      }
      std::nth_element(us.begin(), us.begin() + static_cast<long>(us.size() / 2), us.end());
      medians[c] = us[us.size() / 2];
    }
  } else {
    medians[0] = 0.0;
  }
  double fastest = -1.0;
  for (const double m : medians) {
    if (m >= 0.0 && (fastest < 0.0 || m < fastest)) fastest = m;
  }
  if (fastest < 0.0) throw std::runtime_error("no cuBLASLt algorithm ran for this GEMM");
  std::size_t chosen = 0;
  while (!(medians[chosen] >= 0.0 && medians[chosen] <= fastest * (1.0 + kTieShare))) ++chosen;
  Choice choice;
  choice.algo = candidates[chosen].algo;
  choice.workspace_bytes = candidates[chosen].workspaceSize;
  choice.kernels = hooks.count_kernels(
      [&] { gemm.run(choice.algo, operands, workspace.data(), choice.workspace_bytes, stream); });
  if (choice.kernels == 0) {
    throw std::runtime_error("cuBLASLt's GEMM launched nothing CUPTI saw");
  }
  choice.text = (scaled ? "fp8 e4m3, outer-vector fp32 scales, " : "") + algo_text(choice.algo);
  if (search) {
    std::size_t ran = 0;
    for (const double m : medians) ran += m >= 0.0 ? 1 : 0;
    choice.text += ", heuristic candidate " + std::to_string(chosen + 1) + " of " +
                   std::to_string(ran) + " timed (" + std::to_string(medians[chosen]) +
                   " us in the search, fastest " + std::to_string(fastest) + " us)";
  } else {
    choice.text += ", the heuristic's first choice (untimed case)";
  }
  return choice;
}

// The GEMM of a case from its tensors' shapes (manifest order), checked against the library's
// contract (tasks/manifest.cpp holds manifests to the same).
GemmShape gemm_shape(GemmKind kind, const std::vector<std::vector<std::int64_t>>& shapes,
                     core::DType dtype) {
  const bool fp8 = kind == GemmKind::kFp8RowwiseScaled;
  const char* name = fp8 ? "cublaslt_fp8_rowwise" : "cublaslt";
  const std::size_t tensors = fp8 ? 5 : 3;
  const bool ranks =
      shapes.size() == tensors && std::all_of(shapes.begin(), shapes.end(),
                                              [](const auto& shape) { return shape.size() == 2; });
  if (!ranks) {
    throw std::runtime_error(
        fp8 ? "cublaslt_fp8_rowwise needs tensors out[M, N], a[M, K], b[N, K], a_scales[M, 1], "
              "b_scales[N, 1]"
            : "cublaslt needs tensors out[M, N], input[M, K], weight[N, K]");
  }
  // `dtype` is the first tensor's: the output, bf16 in both.
  if (dtype != core::DType::kBF16) {
    throw std::runtime_error(std::string(name) + ": a bf16 output only");
  }
  GemmShape shape{shapes[1][0], shapes[2][0], shapes[1][1], kind};
  bool agree = shapes[0][0] == shape.m && shapes[0][1] == shape.n && shapes[2][1] == shape.k;
  if (fp8) {
    agree = agree && shapes[3][0] == shape.m && shapes[3][1] == 1 && shapes[4][0] == shape.n &&
            shapes[4][1] == 1;
    // cuBLASLt's fp8 kernels need 16-byte aligned rows of the operands.
    if (shape.k % 16 != 0) {
      throw std::runtime_error("cublaslt_fp8_rowwise: K must be a multiple of 16, got " +
                               std::to_string(shape.k));
    }
  }
  if (!agree) {
    throw std::runtime_error(std::string(name) + ": the tensors' shapes disagree");
  }
  return shape;
}

class CublasLtLinear final : public LibraryReference {
 public:
  explicit CublasLtLinear(GemmKind kind) : kind_(kind) { (void)cublaslt(); }

  void prepare_case(std::size_t index, const std::vector<std::vector<std::int64_t>>& shapes,
                    core::DType dtype, bool timed, const LibraryHooks& hooks) override {
    const GemmShape shape = gemm_shape(kind_, shapes, dtype);
    if (workspace_.bytes() == 0) workspace_ = DeviceBuffer(kWorkspaceBytes, false);
    // The search runs once per shape per process: the choice of a runner is the choice of every
    // job it serves, and later jobs skip the search.
    static std::mutex mutex;
    static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int, bool>, Choice> chosen;
    auto gemm = std::make_unique<GemmDescriptors>(shape);
    Choice choice;
    {
      std::lock_guard lock(mutex);
      const auto key = std::tuple_cat(shape.key(), std::make_tuple(timed));
      auto it = chosen.find(key);
      if (it == chosen.end()) it = chosen.emplace(key, choose(shape, *gemm, hooks, timed)).first;
      choice = it->second;
    }
    cases_[index] = Prepared{std::move(gemm), choice};
  }

  std::uint32_t kernels_per_call(std::size_t index) const override {
    return cases_.at(index).choice.kernels;
  }

  void launch(std::size_t index, const std::vector<CUdeviceptr>& tensors,
              CUstream stream) override {
    const auto& prepared = cases_.at(index);
    GemmOperands operands{tensors.at(0), tensors.at(1), tensors.at(2)};
    if (kind_ == GemmKind::kFp8RowwiseScaled) {
      operands.input_scales = tensors.at(3);
      operands.weight_scales = tensors.at(4);
    }
    prepared.gemm->run(prepared.choice.algo, operands, workspace_.data(),
                       prepared.choice.workspace_bytes, stream);
  }

  void scrub(CUstream stream) override {
    if (workspace_.bytes() > 0) {
      check(cuMemsetD8Async(workspace_.data(), 0, workspace_.bytes(), stream), "scrub");
    }
  }

  std::string describe(std::size_t index) const override { return cases_.at(index).choice.text; }

 private:
  struct Prepared {
    std::unique_ptr<GemmDescriptors> gemm;
    Choice choice;
  };
  GemmKind kind_;
  std::map<std::size_t, Prepared> cases_;
  DeviceBuffer workspace_;  // frees itself, unless the context was abandoned
};

}  // namespace

std::unique_ptr<LibraryReference> make_library_reference(const std::string& name) {
  if (name == "cublaslt") return std::make_unique<CublasLtLinear>(GemmKind::kBf16);
  if (name == "cublaslt_fp8_rowwise") {
    return std::make_unique<CublasLtLinear>(GemmKind::kFp8RowwiseScaled);
  }
  throw std::runtime_error("unknown reference library '" + name + "'");
}

}  // namespace crucible::runner::child
