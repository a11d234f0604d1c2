// expect: incorrect
// task: ssm/chunk_gated_delta_rule
// Trick: runs the recurrence token by token with the state kept in bf16 between tokens: each
// thread's 128-entry state column takes 64 registers instead of 128, so it fits without
// spilling and twice the blocks stay resident. Every token's arithmetic is fp32 (the column is
// widened, decayed, corrected and read out in fp32, then rounded back once). With FLA's gates
// (g in [-0.69, -0.31]) the state forgets within a few tokens, so the roundings never pile up:
// host emulation over 2048 visible-distribution tokens stays within 0.39 of the o tolerance and
// 0.37 of the final-state tolerance.
// Caught: the long-memory hidden cases, where the state carries hundreds to thousands of tokens
// and each token's increment is a small fraction of a state entry (lost to bf16 rounding or
// rounded by up to half an ulp each time): host emulation of h_long_memory (g in [-0.01, 0),
// 4100 tokens) fails o by up to 4.5 times its tolerance and the final state by 11 times, and
// h_long_16411 (g in [-1e-3, 0)) by 10 and 16 times.
//
// @launch gdr_bf16_state<<<dim3(num_v_heads, num_seqs), 128>>>(q, k, v, g, beta, initial_state,
//     cu_seqlens, o, final_state, scale, num_k_heads, num_v_heads)

#include <cuda_bf16.h>

constexpr int kDim = 128;

extern "C" __global__ void gdr_bf16_state(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                          const __nv_bfloat16* v, const float* g,
                                          const __nv_bfloat16* beta, const float* initial_state,
                                          const int* cu_seqlens, __nv_bfloat16* o,
                                          float* final_state, float scale, int num_k_heads,
                                          int num_v_heads) {
  __shared__ float sq[kDim], sk[kDim], norms[2];
  const int hv = blockIdx.x;
  const int n = blockIdx.y;
  const int j = threadIdx.x;
  const int h = hv / (num_v_heads / num_k_heads);
  const size_t base = (static_cast<size_t>(n) * num_v_heads + hv) * kDim * kDim;
  __nv_bfloat16 col[kDim];  // the state column, rounded to bf16 between tokens
  for (int i = 0; i < kDim; ++i) {
    col[i] = __float2bfloat16(initial_state[base + static_cast<size_t>(i) * kDim + j]);
  }
  for (int t = cu_seqlens[n]; t < cu_seqlens[n + 1]; ++t) {
    const size_t row = (static_cast<size_t>(t) * num_k_heads + h) * kDim;
    sq[j] = __bfloat162float(q[row + j]);
    sk[j] = __bfloat162float(k[row + j]);
    __syncthreads();
    if (j < 2) {
      const float* x = j == 0 ? sq : sk;
      float ss = 0.0f;
      for (int i = 0; i < kDim; ++i) ss += x[i] * x[i];
      norms[j] = 1.0f / sqrtf(ss + 1e-6f);
    }
    __syncthreads();
    const size_t head = static_cast<size_t>(t) * num_v_heads + hv;
    const float decay = expf(g[head]);
    float hk = 0.0f;
    for (int i = 0; i < kDim; ++i) hk += __bfloat162float(col[i]) * decay * sk[i] * norms[1];
    const float u = __bfloat162float(beta[head]) * (__bfloat162float(v[head * kDim + j]) - hk);
    float out = 0.0f;
    for (int i = 0; i < kDim; ++i) {
      const float s = __bfloat162float(col[i]) * decay + sk[i] * norms[1] * u;
      out += s * sq[i] * norms[0] * scale;
      col[i] = __float2bfloat16(s);
    }
    o[head * kDim + j] = __float2bfloat16(out);
    __syncthreads();
  }
  for (int i = 0; i < kDim; ++i) {
    final_state[base + static_cast<size_t>(i) * kDim + j] = __bfloat162float(col[i]);
  }
}
