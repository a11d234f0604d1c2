// A correct, deliberately simple solution for ssm/causal_conv1d_fwd: one thread per (token,
// channel) that finds its sequence by binary search, then one thread per (sequence, channel)
// for the final states, in a second launch so no output reads a state already replaced.
//
// Scalar bf16 loads and a search per element: slower than the reference, right on every shape.
//
// @launch conv_outputs<<<cdiv(num_tokens * dim, 256), 256>>>(out, x, weight, bias, conv_states,
//     query_start_loc, cache_indices, has_initial_state, silu_activation, num_tokens, dim,
//     num_seqs)
// @launch conv_final_states<<<cdiv(num_seqs * dim, 256), 256>>>(x, conv_states, query_start_loc,
//     cache_indices, has_initial_state, dim, num_seqs)

#include <cuda_bf16.h>

__device__ int sequence_of(const int* bounds, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (bounds[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Input j of sequence b's extended inputs, j counted from the sequence's first token (negative
// j: the initial state, or zero).
__device__ float extended(const __nv_bfloat16* x, const __nv_bfloat16* conv_states,
                          const int* bounds, const int* lines, const bool* initial, int b, int j,
                          int d, int dim) {
  if (j >= 0) return __bfloat162float(x[static_cast<size_t>(bounds[b] + j) * dim + d]);
  if (!initial[b]) return 0.0f;
  return __bfloat162float(conv_states[(static_cast<size_t>(lines[b]) * 3 + (3 + j)) * dim + d]);
}

extern "C" __global__ void conv_outputs(__nv_bfloat16* out, const __nv_bfloat16* x,
                                        const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                        const __nv_bfloat16* conv_states, const int* bounds,
                                        const int* lines, const bool* initial, int silu_activation,
                                        int num_tokens, int dim, int num_seqs) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_tokens) * dim) return;
  const int t = static_cast<int>(i / dim), d = static_cast<int>(i % dim);
  const int b = sequence_of(bounds, num_seqs, t);
  const int j = t - bounds[b];
  float y = __bfloat162float(bias[d]);
  for (int k = 0; k < 4; ++k) {
    y += __bfloat162float(weight[d * 4 + k]) *
         extended(x, conv_states, bounds, lines, initial, b, j - 3 + k, d, dim);
  }
  if (silu_activation) y = y / (1.0f + expf(-y));
  out[i] = __float2bfloat16(y);
}

extern "C" __global__ void conv_final_states(const __nv_bfloat16* x, __nv_bfloat16* conv_states,
                                             const int* bounds, const int* lines,
                                             const bool* initial, int dim, int num_seqs) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_seqs) * dim) return;
  const int b = static_cast<int>(i / dim), d = static_cast<int>(i % dim);
  const int length = bounds[b + 1] - bounds[b];
  float last[3];
  for (int k = 0; k < 3; ++k) {
    last[k] = extended(x, conv_states, bounds, lines, initial, b, length - 3 + k, d, dim);
  }
  for (int k = 0; k < 3; ++k) {
    conv_states[(static_cast<size_t>(lines[b]) * 3 + k) * dim + d] = __float2bfloat16(last[k]);
  }
}
