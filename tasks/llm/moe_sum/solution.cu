// A correct, deliberately simple solution for llm/moe_sum: one thread per output element,
// scalar bf16 loads, an fp32 sum over the topk slots, rounded once.
//
// Slower than the reference (2-byte loads, no vectors, no loads kept in flight across slots),
// but right on every shape.
//
// @launch moe_sum_simple<<<dim3(cdiv(hidden_size, 256), num_tokens), 256>>>(input, output, topk,
//   hidden_size)

#include <cuda_bf16.h>

extern "C" __global__ void moe_sum_simple(const __nv_bfloat16* input, __nv_bfloat16* output,
                                          int topk, int hidden_size) {
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= hidden_size) return;
  const size_t token = blockIdx.y;
  float sum = 0.0f;
  for (int j = 0; j < topk; ++j) {
    sum += __bfloat162float(input[(token * topk + j) * hidden_size + column]);
  }
  output[token * hidden_size + column] = __float2bfloat16_rn(sum);
}
