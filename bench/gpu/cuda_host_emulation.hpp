// A host emulation of the CUDA features that the sampling kernel
// (llm/top_k_top_p_sampling_from_logits, one block a row) and the grouped_topk router use, so
// that their own source runs on a CPU (bench/gpu/sampling_state.py, grouped_topk_host_main.cpp):
// blocks run one after another, each CUDA thread is an OS thread, __syncthreads is a barrier of
// the block's threads, and every warp intrinsic (shuffles, ballots, redux, __syncwarp) is an
// exchange through a barrier of the warp's 32 threads. __shared__ variables are function statics
// (one block at a time shares them), shared atomics are std::atomic_ref, __expf is exp2 of the
// fp32 product as the GPU computes it (to the host's exp2f, not the GPU's approximation).
//
// It models the CUDA programming model, not a GPU: a kernel correct here and wrong on a GPU
// depends on something outside that model (the hardware, the compiler's code, or undefined
// behaviour the host compiler happened to spare); wrong here, its logic is wrong. Build with
// -fsanitize=thread to look for shared-memory races between barriers, -fsanitize=address for
// reads outside buffers.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static

struct alignas(16) float4 {
  float x, y, z, w;
};

namespace cuda_host {

struct Warp {
  std::unique_ptr<std::barrier<>> barrier;
  std::uint64_t slot[32] = {};
};

struct Block {
  std::unique_ptr<std::barrier<>> barrier;
  std::vector<Warp> warps;
};

inline Block* current = nullptr;
inline Warp& warp() { return current->warps[threadIdx.x / 32]; }
inline int lane() { return static_cast<int>(threadIdx.x % 32); }

template <class T>
std::uint64_t bits_of(T v) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <class T>
T value_of(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// Every lane of the warp publishes `v`; each returns what lane source(lane) published (its own
// value for a source outside the warp, as a shuffle out of range does).
template <class T, class Source>
T exchange(T v, Source source) {
  Warp& w = warp();
  w.slot[lane()] = bits_of(v);
  w.barrier->arrive_and_wait();
  const int from = source(lane());
  const T out = from >= 0 && from < 32 ? value_of<T>(w.slot[from]) : v;
  w.barrier->arrive_and_wait();
  return out;
}

// Every lane publishes `v`; each returns fold(every lane's value), lane 0 first.
template <class T, class Fold>
T reduce(T v, T initial, Fold fold) {
  Warp& w = warp();
  w.slot[lane()] = bits_of(v);
  w.barrier->arrive_and_wait();
  T out = initial;
  for (int i = 0; i < 32; ++i) out = fold(out, value_of<T>(w.slot[i]));
  w.barrier->arrive_and_wait();
  return out;
}

// Runs kernel() for `grid` blocks of `threads` threads (a multiple of 32), one block at a time.
template <class Kernel>
void launch(unsigned grid, unsigned threads, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {threads, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    Block block;
    block.barrier = std::make_unique<std::barrier<>>(threads);
    block.warps.resize(threads / 32);
    for (Warp& w : block.warps) w.barrier = std::make_unique<std::barrier<>>(32);
    current = &block;
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&kernel, t, b] {
        threadIdx = {t, 0, 0};
        blockIdx = {b, 0, 0};
        kernel();
      });
    }
    for (std::thread& t : pool) t.join();
    current = nullptr;
  }
}

}  // namespace cuda_host

inline void __syncthreads() { cuda_host::current->barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_host::warp().barrier->arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return cuda_host::exchange(v, [&](int l) { return l ^ mask; });
}
template <class T>
T __shfl_up_sync(unsigned, T v, int delta) {
  return cuda_host::exchange(v, [&](int l) { return l >= delta ? l - delta : l; });
}
template <class T>
T __shfl_sync(unsigned, T v, int source) {
  return cuda_host::exchange(v, [&](int) { return source; });
}
inline unsigned __ballot_sync(unsigned, bool predicate) {
  cuda_host::Warp& w = cuda_host::warp();
  w.slot[cuda_host::lane()] = predicate ? 1u : 0u;
  w.barrier->arrive_and_wait();
  unsigned out = 0;
  for (int i = 0; i < 32; ++i) out |= (w.slot[i] != 0 ? 1u : 0u) << i;
  w.barrier->arrive_and_wait();
  return out;
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return cuda_host::reduce(v, 0u, [](unsigned a, unsigned b) { return std::max(a, b); });
}
inline unsigned __reduce_min_sync(unsigned, unsigned v) {
  return cuda_host::reduce(v, UINT_MAX, [](unsigned a, unsigned b) { return std::min(a, b); });
}
inline int __reduce_max_sync(unsigned, int v) {
  return cuda_host::reduce(v, INT_MIN, [](int a, int b) { return std::max(a, b); });
}

inline int atomicAdd(int* address, int v) { return std::atomic_ref<int>(*address).fetch_add(v); }
inline float atomicAdd(float* address, float v) {
  return std::atomic_ref<float>(*address).fetch_add(v);
}

inline float __expf(float x) { return std::exp2f(x * 1.44269504088896341f); }
// Correctly rounded on the host: the GPU's is within 2 ulp.
inline float __fdividef(float x, float y) { return x / y; }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline float __uint_as_float(unsigned i) { return std::bit_cast<float>(i); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline int __ffs(unsigned x) { return x == 0 ? 0 : std::countr_zero(x) + 1; }
inline int __clz(unsigned x) { return std::countl_zero(x); }
// Named by a cluster form's helpers, which its one-block instance (kCluster = 1, the only one
// emulated) never calls.
inline std::size_t __cvta_generic_to_shared(const void*) { std::abort(); }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
using std::fmaxf;
