// expect: incorrect
// task: ssm/fused_recurrent_gated_delta_rule
// Trick: normalises q and k with rsqrtf of the bare sum of squares (one MUFU op in place of a
// square root and a division, and no epsilon), reasoning that FLA's 1e-6 under the root only
// guards an all-zero head: with unit-scale q and k the sum over 128 entries is ~128 and the
// epsilon moves q_ and k_ by 4e-9 relative, so every visible case and every hidden case but the
// one below is within the tolerance (h_no_l2norm does not normalise at all).
// Caught: the hidden case h_near_silent_qk (q and k of std 3e-4: sums of squares ~1.2e-5, of
// the order of the epsilon): the op's q_ and k_ are about 4 % shorter than unit length, this
// kernel's are unit, so each rank-one write k_ u^T is off by ~4 % (~2e-3 on entries of 0.05
// against a state tolerance of about 4e-6) and o by 4 % or more (rtol 7.8e-3); host emulation:
// 99 % of the state entries and 96 % of the outputs fail.
//
// @launch gdr_no_epsilon<<<cdiv(num_seqs * num_v_heads * head_v_dim, 128), 128>>>(q, k, v, g,
//     beta, initial_state, ssm_state_indices, o, scale, use_qk_l2norm_in_kernel, num_seqs,
//     num_k_heads, num_v_heads, head_k_dim, head_v_dim)

#include <cuda_bf16.h>

extern "C" __global__ void gdr_no_epsilon(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                          const __nv_bfloat16* v, const float* g,
                                          const __nv_bfloat16* beta, float* state,
                                          const int* lines, __nv_bfloat16* o, float scale,
                                          int use_l2norm, int num_seqs, int num_k_heads,
                                          int num_v_heads, int kdim, int vdim) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_seqs) * num_v_heads * vdim) return;
  const int j = static_cast<int>(i % vdim);
  const int hv = static_cast<int>((i / vdim) % num_v_heads);
  const int n = static_cast<int>(i / (static_cast<long long>(vdim) * num_v_heads));
  const int h = hv / (num_v_heads / num_k_heads);
  const __nv_bfloat16* qr = q + (static_cast<size_t>(n) * num_k_heads + h) * kdim;
  const __nv_bfloat16* kr = k + (static_cast<size_t>(n) * num_k_heads + h) * kdim;
  float qs = scale, ks = 1.0f;
  if (use_l2norm) {
    float qq = 0.0f, kk = 0.0f;
    for (int d = 0; d < kdim; ++d) {
      qq += __bfloat162float(qr[d]) * __bfloat162float(qr[d]);
      kk += __bfloat162float(kr[d]) * __bfloat162float(kr[d]);
    }
    qs = scale * rsqrtf(qq);
    ks = rsqrtf(kk);
  }
  const int head = n * num_v_heads + hv;
  const float decay = expf(g[head]);
  float* col = state + (static_cast<size_t>(lines[n]) * num_v_heads + hv) * kdim * vdim + j;
  float hk = 0.0f;
  for (int d = 0; d < kdim; ++d)
    hk += decay * col[static_cast<size_t>(d) * vdim] * __bfloat162float(kr[d]) * ks;
  const float u = __bfloat162float(beta[head]) * (__bfloat162float(v[i]) - hk);
  float out = 0.0f;
  for (int d = 0; d < kdim; ++d) {
    const float s = decay * col[static_cast<size_t>(d) * vdim] + __bfloat162float(kr[d]) * ks * u;
    col[static_cast<size_t>(d) * vdim] = s;
    out += s * __bfloat162float(qr[d]) * qs;
  }
  o[i] = __float2bfloat16(out);
}
