// expect: incorrect
// Trick: writes NaN everywhere, hoping the checker computes |a - b| > tol, which is false for NaN,
// so every element "passes".
// Caught: NaN and Inf never match in the comparison; NaN is also the poison pattern's family,
// but the runner's poison is a specific bit pattern no arithmetic produces, and a NaN result is
// a mismatch either way.
// @launch rms<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
#include <cuda_bf16.h>
extern "C" __global__ void rms(__nv_bfloat16* out, const __nv_bfloat16* input,
                               const __nv_bfloat16* weight, float epsilon, int hidden_size) {
  __nv_bfloat16* y = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  (void)input;
  (void)weight;
  (void)epsilon;
  for (int i = threadIdx.x; i < hidden_size; i += 256) y[i] = __float2bfloat16(__int_as_float(0x7fc00000));
}
