// expect: incorrect
// task: llm/moe_sum
// Trick: copies vLLM's own templated moe_sum kernel for topk <= 4: the slots are added in bf16,
// rounding after every addition (native bf16 adds, no conversions to fp32 and back), and only
// larger topk accumulates in fp32 as the task asks. With topk 2 (every Mixtral case) the one
// addition rounded once is the fp32 sum rounded once, bit for bit, and topk 1 adds nothing, so
// every visible case and the top-1 hidden case are exact.
// Caught: the hidden case h_gpt_oss_top4_hidden_2880 (top-4, unit-scale slots): three roundings
// of partial sums that are often larger than the result miss the one-ulp tolerance (rtol 2^-7,
// atol 1e-4) on about 8 % of its 95,040 elements, by up to 78 times the tolerance (host
// emulation).
//
// @launch moe_sum_bf16<<<dim3(cdiv(hidden_size, 256), num_tokens), 256>>>(input, output, topk,
//   hidden_size)

#include <cuda_bf16.h>

extern "C" __global__ void moe_sum_bf16(const __nv_bfloat16* input, __nv_bfloat16* output,
                                        int topk, int hidden_size) {
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= hidden_size) return;
  const size_t token = blockIdx.y;
  const __nv_bfloat16* slots = input + token * topk * hidden_size + column;
  if (topk <= 4) {
    __nv_bfloat16 sum = slots[0];
    for (int j = 1; j < topk; ++j) sum = __hadd(sum, slots[static_cast<size_t>(j) * hidden_size]);
    output[token * hidden_size + column] = sum;
    return;
  }
  float sum = 0.0f;
  for (int j = 0; j < topk; ++j) {
    sum += __bfloat162float(slots[static_cast<size_t>(j) * hidden_size]);
  }
  output[token * hidden_size + column] = __float2bfloat16_rn(sum);
}
