// The cuBLASLt reference (llm/linear): dlopen'ed entry points, descriptors of one GEMM, the
// per-shape algorithm search and the LibraryReference that launches the chosen algorithm.
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

// ---- the linear layer
// ----------------------------------------------------------------------------

// Workspace offered to cuBLASLt (split-K reductions); 32 MiB is what PyTorch offers on Hopper.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
// Algorithms the heuristic proposes (at most); each is timed and the fastest kept.
constexpr int kCandidates = 32;
constexpr int kTimedCalls = 5;

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  core::DType dtype = core::DType::kBF16;
  auto key() const { return std::make_tuple(m, n, k, static_cast<int>(dtype)); }
};

// Descriptors of one problem: out[M, N] = input[M, K] @ weight[N, K]^T in row-major terms is,
// column-major, out^T[N, M] = weight[K, N]^T @ input^T[K, M]: A = weight with op T, B = input
// with op N, both with leading dimension K; D = out with leading dimension N.
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

  void run(const cublasLtMatmulAlgo_t& algo, CUdeviceptr out, CUdeviceptr input, CUdeviceptr weight,
           CUdeviceptr workspace, std::size_t workspace_bytes, CUstream stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    auto* d = reinterpret_cast<void*>(out);
    check_lt(cublaslt().matmul(cublaslt().handle, desc_, &alpha, reinterpret_cast<void*>(weight),
                               a_, reinterpret_cast<void*>(input), b_, &beta, d, d_, d, d_, &algo,
                               reinterpret_cast<void*>(workspace), workspace_bytes,
                               reinterpret_cast<cudaStream_t>(stream)),
             "cublasLtMatmul");
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
    check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
    results.resize(static_cast<std::size_t>(std::max(returned, 0)));
    std::erase_if(results, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
    if (results.empty()) throw std::runtime_error("cuBLASLt proposes no algorithm for this GEMM");
    return results;
  }

 private:
  void create(const GemmShape& shape) {
    auto& lt = cublaslt();
    const cudaDataType_t type = CUDA_R_16BF;
    (void)shape.dtype;  // bf16 only (checked by prepare_case)
    check_lt(lt.desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
             "TRANSA");
    check_lt(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none), "TRANSB");
    const auto m = static_cast<std::uint64_t>(shape.m), n = static_cast<std::uint64_t>(shape.n),
               k = static_cast<std::uint64_t>(shape.k);
    check_lt(lt.layout_create(&a_, type, k, n, static_cast<std::int64_t>(k)), "A layout");
    check_lt(lt.layout_create(&b_, type, k, m, static_cast<std::int64_t>(k)), "B layout");
    check_lt(lt.layout_create(&d_, type, n, m, static_cast<std::int64_t>(n)), "D layout");
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
  const auto candidates = gemm.heuristics(search ? kCandidates : 1);
  const CUstream stream = hooks.stream;
  const std::size_t esize = core::dtype_size(shape.dtype);
  const auto elements = [](std::int64_t a, std::int64_t b) {
    return static_cast<std::size_t>(a) * static_cast<std::size_t>(b);
  };
  DeviceBuffer input(elements(shape.m, shape.k) * esize, false);
  DeviceBuffer weight(elements(shape.n, shape.k) * esize, false);
  DeviceBuffer out(elements(shape.m, shape.n) * esize, false);
  DeviceBuffer workspace(kWorkspaceBytes, false);
  // 0x3C00: 0.0078 in bf16; sums stay finite for any K.
  check(cuMemsetD16Async(input.data(), 0x3C00, elements(shape.m, shape.k), stream), "input");
  check(cuMemsetD16Async(weight.data(), 0x3C00, elements(shape.n, shape.k), stream), "weight");
  std::vector<double> medians(candidates.size(), -1.0);
  if (search) {
    EventPair events;
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      std::vector<double> us;
      try {
        for (int call = 0; call <= kTimedCalls; ++call) {
          hooks.flush_l2();
          check(cuEventRecord(events.start, stream), "event record");
          gemm.run(candidates[c].algo, out.data(), input.data(), weight.data(), workspace.data(),
                   candidates[c].workspaceSize, stream);
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
  choice.kernels = hooks.count_kernels([&] {
    gemm.run(choice.algo, out.data(), input.data(), weight.data(), workspace.data(),
             choice.workspace_bytes, stream);
  });
  if (choice.kernels == 0) {
    throw std::runtime_error("cuBLASLt's GEMM launched nothing CUPTI saw");
  }
  choice.text = algo_text(choice.algo);
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

class CublasLtLinear final : public LibraryReference {
 public:
  CublasLtLinear() { (void)cublaslt(); }

  void prepare_case(std::size_t index, const std::vector<std::vector<std::int64_t>>& shapes,
                    core::DType dtype, bool timed, const LibraryHooks& hooks) override {
    if (shapes.size() != 3 || shapes[0].size() != 2 || shapes[1].size() != 2 ||
        shapes[2].size() != 2) {
      throw std::runtime_error("cublaslt needs tensors out[M, N], input[M, K], weight[N, K]");
    }
    if (dtype != core::DType::kBF16) throw std::runtime_error("cublaslt: bf16 tensors only");
    GemmShape shape{shapes[1][0], shapes[2][0], shapes[1][1], dtype};
    if (shapes[0][0] != shape.m || shapes[0][1] != shape.n || shapes[2][1] != shape.k) {
      throw std::runtime_error("cublaslt: shapes of out, input and weight disagree");
    }
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
    prepared.gemm->run(prepared.choice.algo, tensors.at(0), tensors.at(1), tensors.at(2),
                       workspace_.data(), prepared.choice.workspace_bytes, stream);
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
  std::map<std::size_t, Prepared> cases_;
  DeviceBuffer workspace_;  // frees itself, unless the context was abandoned
};

}  // namespace

std::unique_ptr<LibraryReference> make_library_reference(const std::string& name) {
  if (name == "cublaslt") return std::make_unique<CublasLtLinear>();
  throw std::runtime_error("unknown reference library '" + name + "'");
}

}  // namespace crucible::runner::child
