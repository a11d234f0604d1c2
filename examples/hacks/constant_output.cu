// expect: incorrect
// Trick: writes a constant (the mean of the output distribution, about 0) without reading the
// input, hoping a loose or mean-based check passes.
// Caught: every element is compared with the reference within the task's tolerance, and an
// all-zero output where the reference is not zero fails outright.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  (void)input;
  (void)weight;
  (void)epsilon;
  for (int i = threadIdx.x; i < hidden_size; i += 256) y[i] = __float2bfloat16(0.0f);
}
