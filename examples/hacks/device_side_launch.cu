// expect: compile_error
// Trick: tries to outrun the timer by launching a child grid from the device (dynamic
// parallelism) that does the work after the parent kernel, the one being timed, has returned.
// Caught: crucible compiles without relocatable device code or the device runtime, so NVRTC
// refuses a launch from device code; had it compiled, a child grid still belongs to its parent,
// which does not complete before the child does.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms_later(__nv_bfloat16* out, const __nv_bfloat16* input,
                                     const __nv_bfloat16* weight, float epsilon, int hidden_size);
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __shared__ float partial[256];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    rms_later<<<gridDim.x, 256>>>(out, input, weight, epsilon, hidden_size);
  }
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
}
