// A correct, deliberately simple solution for ssm/causal_conv1d_update: one thread per
// (sequence, channel), scalar bf16 loads and stores.
//
// @launch conv_update_simple<<<cdiv(num_seqs * dim, 256), 256>>>(out, x, weight, bias,
//     conv_states, conv_state_indices, silu_activation, num_seqs, dim)

#include <cuda_bf16.h>

extern "C" __global__ void conv_update_simple(__nv_bfloat16* out, const __nv_bfloat16* x,
                                              const __nv_bfloat16* weight,
                                              const __nv_bfloat16* bias,
                                              __nv_bfloat16* conv_states, const int* lines,
                                              int silu_activation, int num_seqs, int dim) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_seqs) * dim) return;
  const int b = static_cast<int>(i / dim), d = static_cast<int>(i % dim);
  const int line = lines[b];
  if (line < 0) {
    out[i] = x[i];
    return;
  }
  __nv_bfloat16* state = conv_states + static_cast<size_t>(line) * 3 * dim + d;
  const __nv_bfloat16 window[4] = {state[0], state[dim], state[2 * dim], x[i]};
  float y = __bfloat162float(bias[d]);
  for (int k = 0; k < 4; ++k) {
    y += __bfloat162float(weight[d * 4 + k]) * __bfloat162float(window[k]);
  }
  if (silu_activation) y = y / (1.0f + expf(-y));
  out[i] = __float2bfloat16(y);
  for (int k = 0; k < 3; ++k) state[k * dim] = window[k + 1];
}
