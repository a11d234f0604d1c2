// Reference for ssm/causal_conv1d_fwd: vLLM's causal_conv1d_fn over a varlen prefill batch,
// channel-last bf16, fp32 math, conv states read as initial states and replaced by final ones.
//
// For every sequence b (tokens s = query_start_loc[b] .. e = query_start_loc[b + 1] - 1, cache
// line c = cache_indices[b]) and channel d, with the sequence's inputs extended on the left by
// the width - 1 = 3 inputs of its cache line (zeros when has_initial_state[b] is false):
//   out[t, d] = act(bias[d] + sum_k weight[d, k] * ext[t - (width - 1) + k, d])
//   conv_states[c, k, d] = ext[e + 1 - (width - 1) + k, d]     (the last width - 1 inputs)
//
// @launch if (dim % 8 == 0)
//     conv1d_fwd_kernel<4, 8><<<dim3(cdiv(dim, 8 * 128), cdiv(num_tokens, 16)), 128>>>(out, x,
//     weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state,
//     silu_activation, num_tokens, dim, num_seqs)
// @launch if (dim % 8 != 0)
//     conv1d_fwd_kernel<4, 1><<<dim3(cdiv(dim, 128), cdiv(num_tokens, 16)), 128>>>(out, x,
//     weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state,
//     silu_activation, num_tokens, dim, num_seqs)
//
// The kernel is written for any width W >= 2 (the template's first argument); every model
// this task covers uses width 4 (d_conv = 4), so width 4 is what is launched. 8 channels per
// thread when rows are whole 16-byte vectors, one otherwise.
//
// Design notes:
// - Memory bound (2 * width FLOPs per 4 bytes): each thread owns 8 channels (one 16-byte
//   vector, so a warp reads 512 contiguous bytes of a token row) and a chunk of 16 tokens,
//   keeping the previous width - 1 inputs in registers as it slides along the chunk. Inputs
//   are loaded four tokens ahead of their use, so a thread keeps several loads in flight.
// - Chunks are global token ranges, not sequence-aligned ones, so a chunk can start a few
//   tokens into a sequence. A cache line is both the initial state (read) and the final state
//   (written) of its sequence, and another block must never read it after it is overwritten:
//   every token whose window reaches back before its sequence's start belongs to the chunk
//   that holds the start (that chunk runs up to width - 2 tokens past its end and the next one
//   starts later). So one thread reads a cache line's vector and then writes it; nobody else
//   touches it.
// - The final state is the last width - 1 inputs of the extended sequence: read from x (or,
//   for sequences shorter than width - 1, partly from the initial state in registers) by the
//   thread that owns the start, right after it has read the initial state.
// - query_start_loc is staged in shared memory (one coalesced load) when it fits, so the
//   binary searches at a chunk's ends do not chase global memory.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 16;        // tokens per chunk: must match the grid's cdiv(num_tokens, 16)
constexpr int kLookahead = 4;     // tokens loaded ahead of use
constexpr int kStagedBounds = 2048;  // query_start_loc entries staged in shared memory
// Blocks per SM the register budget must allow (at most 128 registers a thread): 512 threads
// with four 16-byte loads each in flight, 32 KiB per SM, enough to cover HBM latency.
constexpr int kMinBlocks = 4;

// VEC consecutive bf16 channels, kept packed (16 bytes for 8 channels) between load and use:
// the window and the loads in flight then cost half the registers of floats.
template <int VEC>
struct alignas(2 * VEC) Packed {
  __nv_bfloat16 v[VEC];
};

template <int VEC>
__device__ __forceinline__ Packed<VEC> load_packed(const __nv_bfloat16* p) {
  return *reinterpret_cast<const Packed<VEC>*>(p);
}

template <int VEC>
__device__ __forceinline__ Packed<VEC> zero_packed() {
  Packed<VEC> r;
#pragma unroll
  for (int i = 0; i < VEC; ++i) r.v[i] = __float2bfloat16_rn(0.0f);
  return r;
}

// The sequence holding token t: the largest b with bounds[b] <= t (bounds has num_seqs + 1
// entries, bounds[0] = 0 <= t < bounds[num_seqs]).
__device__ __forceinline__ int sequence_of(const int* bounds, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (bounds[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

template <int W, int VEC>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    conv1d_fwd_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ x,
                      const __nv_bfloat16* __restrict__ weight,
                      const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* conv_states,
                      const int* __restrict__ query_start_loc,
                      const int* __restrict__ cache_indices,
                      const bool* __restrict__ has_initial_state, int silu_activation,
                      int num_tokens, int dim, int num_seqs) {
  __shared__ int staged[kStagedBounds];
  const int* bounds = query_start_loc;
  if (num_seqs + 1 <= kStagedBounds) {
    for (int i = threadIdx.x; i <= num_seqs; i += kThreads) staged[i] = query_start_loc[i];
    __syncthreads();
    bounds = staged;
  }

  const int d0 = (blockIdx.x * kThreads + threadIdx.x) * VEC;
  if (d0 >= dim) return;
  const int t0 = blockIdx.y * kChunk;

  // This chunk's tokens [t_begin, t_end): see the design notes.
  int b = sequence_of(bounds, num_seqs, t0);
  int t_begin = t0;
  if (t0 > bounds[b] && t0 - bounds[b] < W - 1) t_begin = min(bounds[b] + W - 1, bounds[b + 1]);
  int t_end = min(t0 + kChunk, num_tokens);
  if (t_end < num_tokens) {
    const int next = sequence_of(bounds, num_seqs, t_end);
    if (t_end > bounds[next] && t_end - bounds[next] < W - 1) {
      t_end = min(bounds[next] + W - 1, bounds[next + 1]);
    }
  }
  if (t_begin >= t_end) return;

  float w[W][VEC];
  float acc0[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    // weight is [dim, W]: a channel's taps are contiguous.
#pragma unroll
    for (int k = 0; k < W; ++k) w[k][i] = __bfloat162float(weight[(d0 + i) * W + k]);
    acc0[i] = __bfloat162float(bias[d0 + i]);
  }

  // window[k] holds the input at t - (W - 1) + k for the next token t.
  Packed<VEC> window[W - 1];
  b = sequence_of(bounds, num_seqs, t_begin);
  if (t_begin != bounds[b]) {
#pragma unroll
    for (int k = 0; k < W - 1; ++k) {
      window[k] = load_packed<VEC>(x + static_cast<size_t>(t_begin - (W - 1) + k) * dim + d0);
    }
  }

  Packed<VEC> ahead[kLookahead];
  for (int base = t_begin; base < t_end; base += kLookahead) {
#pragma unroll
    for (int j = 0; j < kLookahead; ++j) {
      if (base + j < t_end) {
        ahead[j] = load_packed<VEC>(x + static_cast<size_t>(base + j) * dim + d0);
      }
    }
#pragma unroll
    for (int j = 0; j < kLookahead; ++j) {
      const int t = base + j;
      if (t < t_end) {
        while (t >= bounds[b + 1]) ++b;
        if (t == bounds[b]) {
          // A sequence starts here: its window is its cache line (or zeros), read before the
          // same line is overwritten with the sequence's final state.
          const int line = cache_indices[b];
          __nv_bfloat16* state = conv_states + static_cast<size_t>(line) * (W - 1) * dim + d0;
          const bool initial = has_initial_state[b];
#pragma unroll
          for (int k = 0; k < W - 1; ++k) {
            window[k] = initial ? load_packed<VEC>(state + static_cast<size_t>(k) * dim)
                                : zero_packed<VEC>();
          }
          // The final state: the sequence's last W - 1 inputs; a sequence shorter than that
          // keeps the newest part of its initial state, slid along by its tokens (constant
          // indices throughout, so the window stays in registers).
          const int start = bounds[b], length = bounds[b + 1] - start;
          Packed<VEC> last[W - 1];
          if (length >= W - 1) {
#pragma unroll
            for (int k = 0; k < W - 1; ++k) {
              const int src = start + length - (W - 1) + k;
              last[k] = load_packed<VEC>(x + static_cast<size_t>(src) * dim + d0);
            }
          } else {
#pragma unroll
            for (int k = 0; k < W - 1; ++k) last[k] = window[k];
#pragma unroll
            for (int i = 0; i < W - 2; ++i) {
              if (i < length) {
#pragma unroll
                for (int k = 0; k < W - 2; ++k) last[k] = last[k + 1];
                last[W - 2] = load_packed<VEC>(x + static_cast<size_t>(start + i) * dim + d0);
              }
            }
          }
#pragma unroll
          for (int k = 0; k < W - 1; ++k) {
            *reinterpret_cast<Packed<VEC>*>(state + static_cast<size_t>(k) * dim) = last[k];
          }
        }
        Packed<VEC> result;
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          float acc = acc0[i];
#pragma unroll
          for (int k = 0; k < W - 1; ++k) {
            acc = fmaf(w[k][i], __bfloat162float(window[k].v[i]), acc);
          }
          acc = fmaf(w[W - 1][i], __bfloat162float(ahead[j].v[i]), acc);
          if (silu_activation) acc = acc / (1.0f + __expf(-acc));
          result.v[i] = __float2bfloat16_rn(acc);
        }
        *reinterpret_cast<Packed<VEC>*>(out + static_cast<size_t>(t) * dim + d0) = result;
#pragma unroll
        for (int k = 0; k < W - 2; ++k) window[k] = window[k + 1];
        window[W - 2] = ahead[j];
      }
    }
  }
}
