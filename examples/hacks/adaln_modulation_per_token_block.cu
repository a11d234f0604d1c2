// expect: incorrect
// task: diffusion/adaln_modulate
// Trick: stages the per-sample modulation (the scale and shift rows) in shared memory once per
// block of 8 consecutive token rows and reuses it for all 8, instead of re-reading the scale and
// shift rows for every token: the modulation rows are fetched an eighth as often. It takes the
// sample of the block's first row for the whole block, which is right whenever seq_len is a
// multiple of 8, so no block straddles two samples: every visible case (4608, 4096 and 512
// tokens, and SD3.5's two samples of 4096) and the hidden DiT case (256 tokens) are exact.
// Caught: the hidden case h_batch_3_tokens_333 (three samples of 333 tokens, each with its own
// scale and shift): the blocks covering rows 328-335 and 664-671 straddle sample boundaries, so
// rows 333-335 and 666-671 (9 rows x 3072) are modulated with the previous sample's scale and
// shift, which differ by about 0.7 (two draws of std 0.5) against a tolerance of
// 2e-2 + 1.6e-2 |out|; h_width_1000 (two samples of 37 tokens: rows 37-39) and h_width_9216
// (two samples of 5 tokens: rows 5-7) fail the same way.
// clang-format off
// @launch adaln_token_blocks<<<cdiv(batch * seq_len, 8), 256>>>(out, input, scale, shift, epsilon, batch, seq_len, hidden_size)
// clang-format on

#include <cuda_bf16.h>

constexpr int kThreads = 256;     // must equal the block size in the directive
constexpr int kRowsPerBlock = 8;  // must equal the divisor in the directive's grid
constexpr int kMaxHidden = 9216;  // widest row the staged modulation holds

__device__ float block_tree_sum(float value, float* partial) {
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();
  return total;
}

extern "C" __global__ void adaln_token_blocks(__nv_bfloat16* out, const __nv_bfloat16* input,
                                              const __nv_bfloat16* scale,
                                              const __nv_bfloat16* shift, float epsilon, int batch,
                                              int seq_len, int hidden_size) {
  __shared__ float partial[kThreads];
  __shared__ __nv_bfloat16 gain[kMaxHidden];    // scale of the block's sample
  __shared__ __nv_bfloat16 offset[kMaxHidden];  // shift of the block's sample
  const size_t first_row = static_cast<size_t>(blockIdx.x) * kRowsPerBlock;
  const size_t rows = static_cast<size_t>(batch) * seq_len;
  const size_t sample = first_row / seq_len;  // the first row's sample, used for all 8 rows
  for (int i = threadIdx.x; i < hidden_size && i < kMaxHidden; i += kThreads) {
    gain[i] = scale[sample * hidden_size + i];
    offset[i] = shift[sample * hidden_size + i];
  }
  __syncthreads();

  for (int r = 0; r < kRowsPerBlock; ++r) {
    const size_t row = first_row + r;
    if (row >= rows) break;
    const __nv_bfloat16* x = input + row * hidden_size;
    __nv_bfloat16* y = out + row * hidden_size;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += kThreads) sum += __bfloat162float(x[i]);
    const float mean = block_tree_sum(sum, partial) / hidden_size;
    float squares = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
      const float d = __bfloat162float(x[i]) - mean;
      squares += d * d;
    }
    const float inv_std = rsqrtf(block_tree_sum(squares, partial) / hidden_size + epsilon);
    for (int i = threadIdx.x; i < hidden_size; i += kThreads) {
      const float normed = (__bfloat162float(x[i]) - mean) * inv_std;
      const float modulated = normed * (1.0f + __bfloat162float(gain[i]));
      y[i] = __float2bfloat16(modulated + __bfloat162float(offset[i]));
    }
  }
}
