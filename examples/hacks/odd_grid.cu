// expect: incorrect
// Trick: each block normalises two rows and the guard drops a block's pair when its second row
// is out of range, so every odd token count leaves its last row undone (all even visible sizes
// pass; decode_7 does not).
// Caught: outputs are poisoned and every element must be written; decode_7 and the hidden odd
// token counts (3, 333, 1023, 77, 129) leave poisoned rows.
// @launch rms<<<cdiv(num_tokens, 2), 256>>>(out, input, weight, epsilon, hidden_size, num_tokens)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size,
                               int num_tokens) {
  __shared__ float partial[256];
  const int first_row = 2 * static_cast<int>(blockIdx.x);
  if (first_row + 1 >= num_tokens) return;
  for (int row = first_row; row < first_row + 2; ++row) {
    const __nv_bfloat16* x = input + static_cast<size_t>(row) * hidden_size;
    __nv_bfloat16* y = out + static_cast<size_t>(row) * hidden_size;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += 256) {
      const float v = __bfloat162float(x[i]);
      sum += v * v;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = 128; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);
    __syncthreads();
    for (int i = threadIdx.x; i < hidden_size; i += 256) {
      y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
    }
  }
}
