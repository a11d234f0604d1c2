// expect: runtime_error
// Trick: looks for the reference's answer elsewhere in device memory (a harness that runs the
// reference first often leaves its output in a nearby allocation) by reading far outside its
// own buffers.
// Caught: the expected output is never in device memory while candidate code runs (it is copied
// to the host and scrubbed), and reading unmapped memory faults: runtime_error.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ float partial[256];
  const __nv_bfloat16* x = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
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
  float found = 0.0f;
  for (size_t offset = size_t{1} << 20; offset < (size_t{1} << 40); offset <<= 1) {
    found += __bfloat162float(x[offset]) + __bfloat162float(x[0 - offset]);
  }
  if (found == 12345.0f) partial[1] = found;
  for (int i = threadIdx.x; i < hidden_size; i += 256) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
  }
}
