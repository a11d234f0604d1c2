// A correct, deliberately simple solution for diffusion/qk_rmsnorm_rope: one block of 64
// threads per head row, the query rows first, then the key rows; a shared-memory tree sum for
// the mean square, scalar loads and stores.
//
// Slower than the reference (2-byte accesses, a barrier per reduction step, one row per block),
// but right on every shape.
//
// @launch qk_norm_rope_simple<<<dim3(batch * seq_len * num_heads, 2), 64>>>(query, key,
//             q_weight, k_weight, cos_sin, epsilon, seq_len, num_heads, head_dim)

#include <cuda_bf16.h>

constexpr int kThreads = 64;  // must equal the block size in the directive

extern "C" __global__ void qk_norm_rope_simple(__nv_bfloat16* query, __nv_bfloat16* key,
                                               const __nv_bfloat16* q_weight,
                                               const __nv_bfloat16* k_weight,
                                               const float* cos_sin, float epsilon, int seq_len,
                                               int num_heads, int head_dim) {
  __shared__ float partial[kThreads];
  const size_t row = blockIdx.x;
  __nv_bfloat16* x = (blockIdx.y == 0 ? query : key) + row * head_dim;
  const __nv_bfloat16* w = blockIdx.y == 0 ? q_weight : k_weight;
  const float* table = cos_sin + ((row / num_heads) % seq_len) * head_dim;
  const int half = head_dim / 2;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < head_dim; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / head_dim + epsilon);

  // Each thread owns whole pairs, so reading and writing them in place is race-free.
  for (int k = threadIdx.x; k < half; k += kThreads) {
    const float a = __bfloat162float(x[2 * k]) * inv_rms * __bfloat162float(w[2 * k]);
    const float b = __bfloat162float(x[2 * k + 1]) * inv_rms * __bfloat162float(w[2 * k + 1]);
    const float c = table[k];
    const float t = table[half + k];
    x[2 * k] = __float2bfloat16(a * c - b * t);
    x[2 * k + 1] = __float2bfloat16(b * c + a * t);
  }
}
