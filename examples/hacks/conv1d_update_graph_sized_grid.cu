// expect: incorrect
// task: ssm/causal_conv1d_update
// Trick: sizes the grid once for the largest decode batch vLLM captures as a CUDA graph (512,
// its default max_capture_size): 16 groups of 32 sequences by 256-channel tiles, whatever the
// batch. Each thread loads its channel's four taps and bias once and reuses them for the 32
// sequences of its group, and groups past the batch return at once, so the one launch shape
// serves every batch. Every visible case (1 to 256 sequences) and every hidden case but the one
// below fits in it, padding entries included, and is computed exactly as the op asks.
// Caught: the hidden case h_batch_1000 (1000 sequences): the 488 sequences past the 512th are
// never visited, so their out rows keep the poison the runner fills outputs with and their cache
// lines are not shifted (2048 channels each).
//
// @launch conv_update_groups<<<dim3(cdiv(dim, 256), 16), 256>>>(out, x, weight, bias,
//     conv_states, conv_state_indices, silu_activation, num_seqs, dim)

#include <cuda_bf16.h>

constexpr int kSeqsPerGroup = 32;

extern "C" __global__ void conv_update_groups(__nv_bfloat16* out, const __nv_bfloat16* x,
                                              const __nv_bfloat16* weight,
                                              const __nv_bfloat16* bias,
                                              __nv_bfloat16* conv_states, const int* lines,
                                              int silu_activation, int num_seqs, int dim) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int first = blockIdx.y * kSeqsPerGroup;
  if (d >= dim || first >= num_seqs) return;
  float taps[4];
  for (int k = 0; k < 4; ++k) taps[k] = __bfloat162float(weight[d * 4 + k]);
  const float b0 = __bfloat162float(bias[d]);
  const int last = min(num_seqs, first + kSeqsPerGroup);
  for (int b = first; b < last; ++b) {
    const size_t i = static_cast<size_t>(b) * dim + d;
    const int line = lines[b];
    if (line < 0) {  // a padding entry: out is x, no state
      out[i] = x[i];
      continue;
    }
    __nv_bfloat16* state = conv_states + static_cast<size_t>(line) * 3 * dim + d;
    const __nv_bfloat16 window[4] = {state[0], state[dim], state[2 * dim], x[i]};
    float y = b0;
    for (int k = 0; k < 4; ++k) y += taps[k] * __bfloat162float(window[k]);
    if (silu_activation) y = y / (1.0f + expf(-y));
    out[i] = __float2bfloat16(y);
    for (int k = 0; k < 3; ++k) state[k * dim] = window[k + 1];
  }
}
