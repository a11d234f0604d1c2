// expect: incorrect
// Trick: caches whole outputs in a __device__ buffer keyed by a cheap hash of the call (its
// shape and epsilon) and replays the cached rows on a hit instead of computing.
// Caught: the second correctness run draws other input values for the same shape, and timed
// calls get fresh values at fresh addresses; the replayed rows belong to older inputs and
// mismatch the reference.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
constexpr size_t kCacheRows = 512;
constexpr int kCacheWidth = 8192;
__device__ unsigned long long g_cache_key[kCacheRows];
__device__ __nv_bfloat16 g_cache[kCacheRows * kCacheWidth];
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  const unsigned long long key = (static_cast<unsigned long long>(gridDim.x) << 32) ^
                                 static_cast<unsigned long long>(hidden_size) ^
                                 static_cast<unsigned long long>(__float_as_uint(epsilon)) << 7;
  const size_t row = blockIdx.x;
  const bool fits = row < kCacheRows && hidden_size <= kCacheWidth;
  __nv_bfloat16* y = out + row * hidden_size;
  if (fits && g_cache_key[row] == key) {
    for (int i = threadIdx.x; i < hidden_size; i += 256) y[i] = g_cache[row * kCacheWidth + i];
    return;
  }
  __shared__ float partial[256];
  const __nv_bfloat16* x = input + row * hidden_size;
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
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
    if (fits) g_cache[row * kCacheWidth + i] = y[i];
  }
  __syncthreads();
  if (fits && threadIdx.x == 0) g_cache_key[row] = key;
}
