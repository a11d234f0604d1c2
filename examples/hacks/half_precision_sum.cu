// expect: incorrect
// Trick: accumulates the sum of squares in half precision (cheaper registers, packed math).
// Caught: half keeps 11 significant bits and tops out at 65504; the hidden large-value case
// (std 30, width 8192: a sum of squares near 7e6) overflows to inf, so whole rows come out 0,
// and the elementwise comparison against the fp32-accumulating reference fails.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ __half partial[256];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  __half sum = __float2half(0.0f);
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    const __half v = __float2half(__bfloat162float(x[i]));
    sum = __hfma(v, v, sum);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] = __hadd(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  const float inv_rms = rsqrtf(__half2float(partial[0]) / hidden_size + epsilon);
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
