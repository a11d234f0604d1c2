// A correct, deliberately simple solution for ssm/chunk_gated_delta_rule: the recurrence token
// by token. One block per (sequence, value head) holds the state in registers (thread j owns
// column j, its K rows), normalises q and k through shared memory and walks the sequence.
//
// @launch gdr_recurrent<<<dim3(num_v_heads, num_seqs), 128>>>(q, k, v, g, beta, initial_state,
//     cu_seqlens, o, final_state, scale, num_k_heads, num_v_heads)

#include <cuda_bf16.h>

constexpr int kDim = 128;

extern "C" __global__ void gdr_recurrent(const __nv_bfloat16* q, const __nv_bfloat16* k,
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
  float col[kDim];
  for (int i = 0; i < kDim; ++i) col[i] = initial_state[base + static_cast<size_t>(i) * kDim + j];
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
    for (int i = 0; i < kDim; ++i) {
      col[i] *= decay;
      hk += col[i] * sk[i] * norms[1];
    }
    const float u = __bfloat162float(beta[head]) * (__bfloat162float(v[head * kDim + j]) - hk);
    float out = 0.0f;
    for (int i = 0; i < kDim; ++i) {
      col[i] += sk[i] * norms[1] * u;
      out += col[i] * sq[i] * norms[0] * scale;
    }
    o[head * kDim + j] = __float2bfloat16(out);
    __syncthreads();
  }
  for (int i = 0; i < kDim; ++i) final_state[base + static_cast<size_t>(i) * kDim + j] = col[i];
}
