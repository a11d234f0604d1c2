// Reference for recsys/embedding_bag: table-batched sum pooling of fp16 embedding rows into
// fp32, FBGEMM TBE's forward with fixed-size bags (DLRMv2's multi-hot features).
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions):
//
//   out[b, t * dim + d] = sum_{l < pooling} weights[t, indices[t, b, l], d]   (fp32 accumulation)
//
// Launch plan: a bag is (table t, sample b), numbered t * batch + b. A group of kLanes lanes
// sums one bag, each lane owning every kLanes-th vector of kVec fp16 values of the row: 16-byte
// vectors (kVec 8) when dim is a multiple of 8, 8-byte ones (kVec 4) otherwise (dim is always a
// multiple of 4). kLanes is the smallest of 4, 8, 16, 32 that covers a row in one vector per
// lane (32 past that: lanes loop), so a warp sums 32 / kLanes bags at once. 256-thread blocks.
// Bags of one id with 16-byte rows take their own kernel: a group of 16 lanes copies one row,
// every lane loading the id itself, the groups in out's order. On the H200 (Zipf ids,
// bench/results/h200_reference_variants_embedding_bag.json) the general kernel copies
// hot1_8_tables in 14.0 us and this one in 12.7 us in the ids' order; a group copying two to
// eight bags at once took 57-75 us (its 16-byte output stores compile to 4-byte ones).
//
// clang-format off
// @launch if (pooling == 1 && dim % 8 == 0) embedding_bag_single_kernel<16, 8><<<cdiv(num_tables * batch, 16), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim)
// @launch if (pooling != 1 && dim % 8 == 0 && dim <= 32) embedding_bag_kernel<4, 8><<<cdiv(num_tables * batch, 64), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// @launch if (pooling != 1 && dim % 8 == 0 && dim > 32 && dim <= 64) embedding_bag_kernel<8, 8><<<cdiv(num_tables * batch, 32), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// @launch if (pooling != 1 && dim % 8 == 0 && dim > 64 && dim <= 128) embedding_bag_kernel<16, 8><<<cdiv(num_tables * batch, 16), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// @launch if (pooling != 1 && dim % 8 == 0 && dim > 128) embedding_bag_kernel<32, 8><<<cdiv(num_tables * batch, 8), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// @launch if (dim % 8 != 0) embedding_bag_kernel<32, 4><<<cdiv(num_tables * batch, 8), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - Gather bound: every id fetches a 256-byte row (dim 128) from a table far beyond L2, so the
//   time is DRAM latency times the rows in flight. Two things keep many rows in flight: a
//   half-warp per 128-wide bag (two bags per warp, 16-byte loads), and four ids of a bag loaded
//   together before any is added (the loop below is unrolled by hand into independent loads).
// - A group reads its bag's ids cooperatively (lane i the i-th id of each run of kLanes) and
//   broadcasts them with shuffles: one coalesced id load per kLanes ids instead of one per id
//   per lane.
// - Rows are addressed in 64 bits: a table of 500K x 128 is 64M elements, and num_tables *
//   num_rows * dim can pass 2^31.
// - The output (fp32, twice the bytes of an fp16 row) is written once per bag as 16-byte
//   stores (two float4 per 8-value vector).

#include <cuda_fp16.h>

namespace {

template <int kVec>
struct Vec;

template <>
struct Vec<8> {
  using Bits = uint4;
};

template <>
struct Vec<4> {
  using Bits = uint2;
};

template <int kVec>
__device__ __forceinline__ void add_row(float (&acc)[kVec], const typename Vec<kVec>::Bits& bits) {
  const __half2* pairs = reinterpret_cast<const __half2*>(&bits);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const float2 f = __half22float2(pairs[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}

// A vector's kVec sums, stored to out as 16-byte float4s.
template <int kVec>
__device__ __forceinline__ void store_sums(float* dst, const float (&acc)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; i += 4) {
    *reinterpret_cast<float4*>(dst + i) = make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
  }
}

constexpr int kUnroll = 4;

}  // namespace

template <int kLanes, int kVec>
__global__ void __launch_bounds__(256)
    embedding_bag_kernel(float* __restrict__ out, const __half* __restrict__ weights,
                         const long long* __restrict__ indices, int batch, int num_tables,
                         int num_rows, int dim, int pooling) {
  using Bits = typename Vec<kVec>::Bits;
  const int lane = threadIdx.x % kLanes;
  const long long bag = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const long long bags = static_cast<long long>(num_tables) * batch;
  // Lanes of a group must stay together for the shuffles: a group past the end idles, the
  // shuffle mask covers the whole warp (every lane of it reaches each shuffle).
  const bool active = bag < bags;
  const int table = active ? static_cast<int>(bag / batch) : 0;
  const int sample = active ? static_cast<int>(bag - static_cast<long long>(table) * batch) : 0;
  const __half* table_rows = weights + static_cast<long long>(table) * num_rows * dim;
  const long long* ids = indices + (active ? bag : 0) * pooling;
  const int vectors = dim / kVec;
  const unsigned group_base = (threadIdx.x % 32) / kLanes * kLanes;

  for (int v0 = 0; v0 < vectors; v0 += kLanes) {
    const int v = v0 + lane;
    const bool mine = active && v < vectors;
    float acc[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
    for (int base = 0; base < pooling; base += kLanes) {
      const int run = min(kLanes, pooling - base);
      const long long my_id = active && lane < run ? ids[base + lane] : 0;
      int k = 0;
      for (; k + kUnroll <= run; k += kUnroll) {
        Bits rows[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const long long id = __shfl_sync(0xffffffffu, my_id, group_base + k + u);
          if (mine) rows[u] = reinterpret_cast<const Bits*>(table_rows + id * dim)[v];
        }
        if (mine) {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) add_row<kVec>(acc, rows[u]);
        }
      }
      for (; k < run; ++k) {
        const long long id = __shfl_sync(0xffffffffu, my_id, group_base + k);
        if (mine) add_row<kVec>(acc, reinterpret_cast<const Bits*>(table_rows + id * dim)[v]);
      }
    }
    if (mine) {
      store_sums<kVec>(out + (static_cast<long long>(sample) * num_tables + table) * dim + v * kVec,
                       acc);
    }
  }
}

// Bags of one id (pooling == 1, DLRMv2's single-hot features): a copy of one row per bag,
// widened to fp32, by a group of kLanes lanes (each lane loads the id itself: the group's lanes
// read the same 8 bytes, one transaction, and no lane waits for another's load). The groups take
// the bags in out's order (sample-major), so consecutive groups write consecutive rows of out.
template <int kLanes, int kVec>
__global__ void __launch_bounds__(256)
    embedding_bag_single_kernel(float* __restrict__ out, const __half* __restrict__ weights,
                                const long long* __restrict__ indices, int batch, int num_tables,
                                int num_rows, int dim) {
  using Bits = typename Vec<kVec>::Bits;
  const int lane = threadIdx.x % kLanes;
  const long long slot = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  if (slot >= static_cast<long long>(num_tables) * batch) return;
  const int sample = static_cast<int>(slot / num_tables);
  const int table = static_cast<int>(slot - static_cast<long long>(sample) * num_tables);
  const long long id = indices[static_cast<long long>(table) * batch + sample];
  const Bits* row = reinterpret_cast<const Bits*>(
      weights + (static_cast<long long>(table) * num_rows + id) * dim);
  float* dst = out + (static_cast<long long>(sample) * num_tables + table) * dim;
  for (int v = lane; v < dim / kVec; v += kLanes) {
    float acc[kVec] = {};
    add_row<kVec>(acc, __ldg(row + v));  // one 16- or 8-byte load (a plain read splits in four)
    store_sums<kVec>(dst + v * kVec, acc);
  }
}
