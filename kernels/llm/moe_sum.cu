// Reference for llm/moe_sum: vLLM's moe_sum(input, output) on bf16, the last step of the fused
// MoE layer: each token's topk expert outputs (already scaled by their routing weights) summed.
//
//   output[t, i] = sum_{j < topk} input[t, j, i]      (fp32 accumulation, rounded once to bf16)
//
// Launch plan: a 2-D grid, tokens on x and 1024-column tiles of a row on y; 128 threads per
// block, one 16-byte vector (8 columns) per thread and per expert slot. A single decode token of
// a 4096-wide model still spreads over 4 blocks, a 2048-token prefill over 8192.
//
// @launch if (hidden_size % 8 == 0 && topk == 2) moe_sum_fixed<2><<<dim3(num_tokens,
//   cdiv(hidden_size, 1024)), 128>>>(input, output, hidden_size)
// @launch if (hidden_size % 8 == 0 && topk < 2) moe_sum_vector<2><<<dim3(num_tokens,
//   cdiv(hidden_size, 1024)), 128>>>(input, output, topk, hidden_size)
// @launch if (hidden_size % 8 == 0 && topk > 2) moe_sum_vector<8><<<dim3(num_tokens,
//   cdiv(hidden_size, 1024)), 128>>>(input, output, topk, hidden_size)
// @launch if (hidden_size % 8 != 0) moe_sum_scalar<<<dim3(num_tokens, cdiv(hidden_size, 1024)),
//   128>>>(input, output, topk, hidden_size)
//
// Design notes:
// - Memory bound: (topk + 1) * 2 bytes per output column. A thread issues the loads of up to
//   eight expert slots before it adds any (the slot loop is unrolled by eight), so eight 16-byte
//   loads per thread are in flight; consecutive threads read consecutive vectors of the same
//   slot row, so every load is fully coalesced. Mixtral's top-2 gets a kernel of its own with
//   topk fixed, no loop: on the H200 it is 1.05x / 1.09x / 1.05x faster than a loop unrolled by
//   two at 1 / 32 / 256 tokens, which was 1.11-1.18x faster than the eight-slot loop, which in
//   turn is 1.35-1.55x faster for top-8 decode (bench/results/
//   h200_reference_variants_small_ops.json). The single-token cases are launch-and-latency
//   bound (1.3 us); against torch.compile's Triton kernel: 1.05x at 1 token and 1.02x at 32 by
//   crucible's timing, 0.92x and 1.02x timed by the parity harness (h200_parity.json).
// - The sum is fp32 in slot order and rounded once: correct to half a bf16 ulp of the exact sum
//   (vLLM's templated kernel for topk <= 4 adds in bf16, rounding after every addition; its
//   at::sum_out path for other topk accumulates in fp32 like this one).
// - Rows are 16-byte aligned only when hidden_size % 8 == 0; otherwise the scalar kernel covers
//   the same tile one bf16 at a time, consecutive threads on consecutive columns.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kVectorElems = 8;  // bf16 per 16-byte vector
constexpr int kTileColumns = kThreads * kVectorElems;

__device__ __forceinline__ void add_vector(float (&acc)[kVectorElems], const uint4& v) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int p = 0; p < kVectorElems / 2; ++p) {
    const float2 f = __bfloat1622float2(pairs[p]);
    acc[2 * p] += f.x;
    acc[2 * p + 1] += f.y;
  }
}

// The 8 sums of a vector rounded to bf16, stored as one 16-byte vector.
__device__ __forceinline__ void store_vector(__nv_bfloat16* out, const float (&acc)[kVectorElems]) {
  uint4 packed;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
  for (int p = 0; p < kVectorElems / 2; ++p) {
    pairs[p] = __floats2bfloat162_rn(acc[2 * p], acc[2 * p + 1]);
  }
  *reinterpret_cast<uint4*>(out) = packed;
}

}  // namespace

// input: [num_tokens, topk, hidden_size]; output: [num_tokens, hidden_size]; row-major.
// kSlotsInFlight: expert slots whose loads a thread issues before adding any.
template <int kSlotsInFlight>
__global__ void __launch_bounds__(kThreads)
    moe_sum_vector(const __nv_bfloat16* __restrict__ input, __nv_bfloat16* __restrict__ output,
                   int topk, int hidden_size) {
  const int column =
      static_cast<int>(blockIdx.y) * kTileColumns + static_cast<int>(threadIdx.x) * kVectorElems;
  if (column >= hidden_size) return;
  const size_t token = blockIdx.x;
  const __nv_bfloat16* slots = input + token * topk * static_cast<size_t>(hidden_size) + column;
  float acc[kVectorElems] = {};
  for (int first = 0; first < topk; first += kSlotsInFlight) {
    uint4 v[kSlotsInFlight];
#pragma unroll
    for (int j = 0; j < kSlotsInFlight; ++j) {
      if (first + j < topk) {
        v[j] = __ldg(
            reinterpret_cast<const uint4*>(slots + static_cast<size_t>(first + j) * hidden_size));
      }
    }
#pragma unroll
    for (int j = 0; j < kSlotsInFlight; ++j) {
      if (first + j < topk) add_vector(acc, v[j]);
    }
  }
  store_vector(output + token * hidden_size + column, acc);
}

// topk fixed at compile time (Mixtral's top-2): the kernel is the loads of every slot, the adds
// and one store, with no loop around them.
template <int kTopk>
__global__ void __launch_bounds__(kThreads)
    moe_sum_fixed(const __nv_bfloat16* __restrict__ input, __nv_bfloat16* __restrict__ output,
                  int hidden_size) {
  const int column =
      static_cast<int>(blockIdx.y) * kTileColumns + static_cast<int>(threadIdx.x) * kVectorElems;
  if (column >= hidden_size) return;
  const size_t token = blockIdx.x;
  const __nv_bfloat16* slots = input + token * kTopk * static_cast<size_t>(hidden_size) + column;
  uint4 v[kTopk];
#pragma unroll
  for (int j = 0; j < kTopk; ++j) {
    v[j] = __ldg(reinterpret_cast<const uint4*>(slots + static_cast<size_t>(j) * hidden_size));
  }
  float acc[kVectorElems] = {};
#pragma unroll
  for (int j = 0; j < kTopk; ++j) add_vector(acc, v[j]);
  store_vector(output + token * hidden_size + column, acc);
}

// Any hidden_size: the same tile, one column per thread per step.
extern "C" __global__ void __launch_bounds__(kThreads)
    moe_sum_scalar(const __nv_bfloat16* __restrict__ input, __nv_bfloat16* __restrict__ output,
                   int topk, int hidden_size) {
  const size_t token = blockIdx.x;
  const __nv_bfloat16* slots = input + token * topk * static_cast<size_t>(hidden_size);
#pragma unroll
  for (int e = 0; e < kVectorElems; ++e) {
    const int column =
        static_cast<int>(blockIdx.y) * kTileColumns + e * kThreads + static_cast<int>(threadIdx.x);
    if (column >= hidden_size) continue;
    float acc = 0.0f;
    for (int j = 0; j < topk; ++j) {
      acc += __bfloat162float(slots[static_cast<size_t>(j) * hidden_size + column]);
    }
    output[token * hidden_size + column] = __float2bfloat16_rn(acc);
  }
}
