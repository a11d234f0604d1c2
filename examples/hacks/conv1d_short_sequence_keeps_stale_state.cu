// expect: incorrect
// task: ssm/causal_conv1d_fwd
// Trick: the final-state pass shifts the old cache line into the new one without asking whether
// the sequence had an initial state: a line is replaced by the last three inputs, and only a
// sequence shorter than three tokens keeps part of the line, so the pass reads the line
// unconditionally (one flag load and branch fewer per line). The outputs do honour
// has_initial_state. It differs from the op only on a new prompt (no initial state) of one or
// two tokens, whose line must start with zeros but keeps the previous occupant's inputs: a
// shape only one visible case holds (Jamba's 16 sequences include one of one token), and
// there only when the episode draws no initial state for it.
// Caught: the hidden case h_no_initial_states, whose first sequence is a two-token new prompt:
// conv_states[line, 0, :] must be 0 but holds the stale line's last input (randn, std 1) on all
// 5120 channels against an exact tolerance; also h_257_tiny_sequences (100 one-token and 100
// two-token sequences, about half of them new prompts) and, by draw, h_dim_1283.
//
// @launch conv_outputs<<<cdiv(num_tokens * dim, 256), 256>>>(out, x, weight, bias, conv_states,
//     query_start_loc, cache_indices, has_initial_state, silu_activation, num_tokens, dim,
//     num_seqs)
// @launch conv_shift_states<<<cdiv(num_seqs * dim, 256), 256>>>(x, conv_states, query_start_loc,
//     cache_indices, dim, num_seqs)

#include <cuda_bf16.h>

__device__ int sequence_of(const int* bounds, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (bounds[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
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
    const int e = j - 3 + k;  // input e of the sequence; negative: the initial state
    float value = 0.0f;
    if (e >= 0) {
      value = __bfloat162float(x[static_cast<size_t>(bounds[b] + e) * dim + d]);
    } else if (initial[b]) {
      const size_t row = static_cast<size_t>(lines[b]) * 3 + (3 + e);
      value = __bfloat162float(conv_states[row * dim + d]);
    }
    y += __bfloat162float(weight[d * 4 + k]) * value;
  }
  if (silu_activation) y = y / (1.0f + expf(-y));
  out[i] = __float2bfloat16(y);
}

// The new line: the last three inputs of the sequence, topped up from the old line when the
// sequence is shorter than three, whatever has_initial_state says.
extern "C" __global__ void conv_shift_states(const __nv_bfloat16* x, __nv_bfloat16* conv_states,
                                             const int* bounds, const int* lines, int dim,
                                             int num_seqs) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_seqs) * dim) return;
  const int b = static_cast<int>(i / dim), d = static_cast<int>(i % dim);
  const int length = bounds[b + 1] - bounds[b];
  __nv_bfloat16* line = conv_states + static_cast<size_t>(lines[b]) * 3 * dim + d;
  __nv_bfloat16 last[3];
  for (int k = 0; k < 3; ++k) {
    const int e = length - 3 + k;
    last[k] = e >= 0 ? x[static_cast<size_t>(bounds[b] + e) * dim + d] : line[(3 + e) * dim];
  }
  for (int k = 0; k < 3; ++k) line[k * dim] = last[k];
}
