// Reference for ssm/causal_conv1d_update: vLLM's causal_conv1d_update for one decode token per
// sequence, channel-last bf16, fp32 math, the conv-state cache line shifted in place.
//
// For every sequence b with cache line c = conv_state_indices[b] (-1: a padding entry of a
// CUDA-graph batch, whose out row is x's row and whose state is not touched) and channel d:
//   out[b, d] = act(bias[d] + sum_{k<3} weight[d, k] * conv_states[c, k, d]
//                   + weight[d, 3] * x[b, d])
//   conv_states[c, :, d] = (conv_states[c, 1, d], conv_states[c, 2, d], x[b, d])
//
// @launch if (dim % 8 == 0)
//     conv1d_update_kernel<8><<<dim3(cdiv(dim, 8 * 128), num_seqs), 128>>>(out, x, weight, bias,
//     conv_states, conv_state_indices, silu_activation, dim)
// @launch if (dim % 8 != 0)
//     conv1d_update_kernel<1><<<dim3(cdiv(dim, 128), num_seqs), 128>>>(out, x, weight, bias,
//     conv_states, conv_state_indices, silu_activation, dim)
//
// Design notes:
// - Pure data movement: per channel three state values and one input in, one output and three
//   state values out. Each thread owns 8 channels of one sequence (16-byte vectors: a warp
//   moves 512 contiguous bytes of each state row), so all its loads (three state rows, x, the
//   bias and the four taps) are independent and issued before any use.
// - The taps are [dim, 4]: a thread's 8 channels are 64 contiguous bytes, four 16-byte loads.
// - Small batches are latency bound (a decode step of one sequence is 10 to 20 KB): one block
//   per (sequence, 1024 channels) keeps the grid as wide as the data allows.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 128;

template <int VEC>
struct Lanes {
  float v[VEC];
};

template <int VEC>
__device__ __forceinline__ Lanes<VEC> load_lanes(const __nv_bfloat16* p) {
  Lanes<VEC> r;
  if constexpr (VEC == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      r.v[2 * i] = f.x;
      r.v[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) r.v[i] = __bfloat162float(p[i]);
  }
  return r;
}

template <int VEC>
__device__ __forceinline__ void store_lanes(__nv_bfloat16* p, const Lanes<VEC>& r) {
  if constexpr (VEC == 8) {
    uint4 raw;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(r.v[2 * i], r.v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = __float2bfloat16_rn(r.v[i]);
  }
}

}  // namespace

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    conv1d_update_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ x,
                         const __nv_bfloat16* __restrict__ weight,
                         const __nv_bfloat16* __restrict__ bias,
                         __nv_bfloat16* __restrict__ conv_states,
                         const int* __restrict__ conv_state_indices, int silu_activation,
                         int dim) {
  const int d0 = (blockIdx.x * kThreads + threadIdx.x) * VEC;
  if (d0 >= dim) return;
  const int b = blockIdx.y;
  const size_t row = static_cast<size_t>(b) * dim + d0;
  const int line = conv_state_indices[b];
  if (line < 0) {
    // Padding entry: vLLM updates x in place and skips it, so its row stays x.
    store_lanes<VEC>(out + row, load_lanes<VEC>(x + row));
    return;
  }
  __nv_bfloat16* state = conv_states + static_cast<size_t>(line) * 3 * dim + d0;
  const Lanes<VEC> s1 = load_lanes<VEC>(state + dim);
  const Lanes<VEC> s2 = load_lanes<VEC>(state + 2 * static_cast<size_t>(dim));
  const Lanes<VEC> s0 = load_lanes<VEC>(state);
  const Lanes<VEC> current = load_lanes<VEC>(x + row);
  const Lanes<VEC> bias_lanes = load_lanes<VEC>(bias + d0);
  float w[VEC][4];
  if constexpr (VEC == 8) {
    const uint4* taps = reinterpret_cast<const uint4*>(weight + static_cast<size_t>(d0) * 4);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 raw = taps[q];
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
      // 16 bytes = channels 2q and 2q + 1, four taps each.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(pairs[i]);
        w[2 * q + i / 2][2 * (i % 2)] = f.x;
        w[2 * q + i / 2][2 * (i % 2) + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[i][k] = __bfloat162float(weight[static_cast<size_t>(d0 + i) * 4 + k]);
      }
    }
  }
  // The shifted state: rows 1 and 2 move up, the new input becomes row 2.
  store_lanes<VEC>(state, s1);
  store_lanes<VEC>(state + dim, s2);
  store_lanes<VEC>(state + 2 * static_cast<size_t>(dim), current);
  Lanes<VEC> result;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    float y = bias_lanes.v[i];
    y = fmaf(w[i][0], s0.v[i], y);
    y = fmaf(w[i][1], s1.v[i], y);
    y = fmaf(w[i][2], s2.v[i], y);
    y = fmaf(w[i][3], current.v[i], y);
    if (silu_activation) y = y / (1.0f + __expf(-y));
    result.v[i] = y;
  }
  store_lanes<VEC>(out + row, result);
}
