// A correct, deliberately simple solution for multimodal/gelu_tanh_and_mul: one thread per
// output, scalar loads, tanhf from the math library.
//
// Slower than the reference (2-byte loads and stores, a full-precision tanh), but right on
// every shape.
//
// @launch gelu_tanh_and_mul_simple<<<dim3(cdiv(d, 256), num_tokens), 256>>>(out, input, d)

#include <cuda_bf16.h>

extern "C" __global__ void gelu_tanh_and_mul_simple(__nv_bfloat16* out,
                                                    const __nv_bfloat16* input, int d) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  const size_t row = blockIdx.y;
  const float g = __bfloat162float(input[row * 2 * d + col]);
  const float u = __bfloat162float(input[row * 2 * d + d + col]);
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  out[row * d + col] = __float2bfloat16(0.5f * g * (1.0f + tanhf(inner)) * u);
}
