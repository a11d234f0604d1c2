// expect: incorrect
// Trick: quantises every element to fp8 (e4m3) before squaring, as if the task allowed fp8
// activations: a quarter of the bytes per element in a real kernel.
// Caught: e4m3 keeps 3 mantissa bits; the outputs carry that error (about 6 %), far beyond the
// bf16 tolerance (rtol 1.2e-2: three bf16 roundings), and the elementwise comparison fails.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ float partial[256];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    const float v = static_cast<float>(__nv_fp8_e4m3(__bfloat162float(x[i])));
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / hidden_size + epsilon);
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    const float v = static_cast<float>(__nv_fp8_e4m3(__bfloat162float(x[i])));
    y[i] = __float2bfloat16(v * inv_rms * __bfloat162float(weight[i]));
  }
}
