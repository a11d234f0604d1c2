// expect: incorrect
// Trick: in a serving engine the output buffer holds the previous call's answer; this kernel
// reads its output row first and skips the row when it already holds finite numbers (poison is
// NaN), on the theory that such a row was computed before.
// Caught: the second correctness run of every case starts from a plausible stale answer (the
// reference's output for the first run's other inputs), so the skipped rows keep last call's
// values and fail the comparison.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  const float first = __bfloat162float(y[0]);
  const float last = __bfloat162float(y[hidden_size - 1]);
  if (isfinite(first) && isfinite(last)) return;
  __shared__ float partial[256];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
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
  }
}
