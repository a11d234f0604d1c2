// Reference for ssm/fused_recurrent_gated_delta_rule: the gated delta rule's decode step (FLA's
// fused_recurrent_gated_delta_rule as vLLM's Qwen3-Next layer calls it: one token a sequence,
// state indices, q/k L2-normalised in the kernel), fp32 state, bf16 activations.
//
// For sequence n (line l = ssm_state_indices[n]), value head hv (key head h = hv / (HV / H)):
//   q_ = q / |q|, k_ = k / |k| (norms with + 1e-6 under the root; optional), q_ *= scale
//   S = exp(g) S;  u = beta (v - S^T k_);  S += k_ u^T;  o = S^T q_
//
// @launch if (head_k_dim <= 128)
//     gdr_decode_kernel<8><<<dim3(cdiv(head_v_dim, 32), num_v_heads, num_seqs), 128>>>(q, k, v,
//     g, beta, initial_state, ssm_state_indices, o, scale, use_qk_l2norm_in_kernel, num_k_heads,
//     num_v_heads, head_k_dim, head_v_dim)
// @launch if (head_k_dim > 128)
//     gdr_decode_kernel<16><<<dim3(cdiv(head_v_dim, 32), num_v_heads, num_seqs), 128>>>(q, k, v,
//     g, beta, initial_state, ssm_state_indices, o, scale, use_qk_l2norm_in_kernel, num_k_heads,
//     num_v_heads, head_k_dim, head_v_dim)
//
// Design notes:
// - Memory bound: each named state (K x V fp32, 64 KiB for 128 x 128) is read and written once.
//   A block owns 32 value columns of one head's state; its 8 lanes of a row read the row's 32
//   columns as float4s (128 contiguous bytes), the 16 row groups of the block step down the K
//   rows, so each thread holds K / 16 float4s, all loads issued before any arithmetic.
// - One pass over the old state suffices: with a = S_old^T k_ and c = S_old^T q_ (both reduced
//   over K in the same pass),
//       u = beta (v - exp(g) a),   o = exp(g) c + (k_ . q_) u,   S_new = exp(g) S_old + k_ u^T,
//   which is the same algebra as FLA's three steps (decay, correct, read out the updated state).
// - The reductions over K: two butterfly steps across the row lanes of a warp, then the four
//   warps' partials through shared memory. q, k and their norms are shared by the block.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTileV = 32;        // value columns per block: 8 lanes x float4
constexpr int kRowsPerPass = 16;  // 4 row lanes-groups a warp x 4 warps
constexpr int kMaxK = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float4 fma4(float4 acc, float4 s, float w) {
  return make_float4(fmaf(s.x, w, acc.x), fmaf(s.y, w, acc.y), fmaf(s.z, w, acc.z),
                     fmaf(s.w, w, acc.w));
}

}  // namespace

template <int PASSES>
__global__ void __launch_bounds__(kThreads)
    gdr_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                      const __nv_bfloat16* __restrict__ v, const float* __restrict__ g,
                      const __nv_bfloat16* __restrict__ beta, float* __restrict__ state,
                      const int* __restrict__ ssm_state_indices, __nv_bfloat16* __restrict__ o,
                      float scale, int use_qk_l2norm, int num_k_heads, int num_v_heads,
                      int head_k_dim, int head_v_dim) {
  __shared__ float s_q[kMaxK];
  __shared__ float s_k[kMaxK];
  __shared__ float s_dots[3][kWarps];
  __shared__ float4 s_part[2][kWarps][kTileV / 4];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int hv = blockIdx.y;
  const int n = blockIdx.z;
  const int h = hv / (num_v_heads / num_k_heads);
  const int K = head_k_dim;
  const int V = head_v_dim;
  const int quad = lane & 7;                // float4 column group of this lane
  const int row0 = warp * 4 + (lane >> 3);  // first key row of this thread
  const int col = blockIdx.x * kTileV + quad * 4;
  const bool col_ok = col < V;  // V is a multiple of 4: a float4 is wholly in or out

  const int line = ssm_state_indices[n];
  float* head_state =
      state + (static_cast<size_t>(line) * num_v_heads + hv) * static_cast<size_t>(K) * V;

  // Issue every state load first.
  float4 s[PASSES];
#pragma unroll
  for (int r = 0; r < PASSES; ++r) {
    const int row = row0 + r * kRowsPerPass;
    if (col_ok && row < K) {
      s[r] = *reinterpret_cast<const float4*>(head_state + static_cast<size_t>(row) * V + col);
    } else {
      s[r] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }

  // q and k of the key head into shared memory, with |q|^2, |k|^2 and q . k.
  const __nv_bfloat16* q_row = q + (static_cast<size_t>(n) * num_k_heads + h) * K;
  const __nv_bfloat16* k_row = k + (static_cast<size_t>(n) * num_k_heads + h) * K;
  float qq = 0.f, kk = 0.f, qk = 0.f;
  for (int i = tid; i < K; i += kThreads) {
    const float a = __bfloat162float(q_row[i]);
    const float b = __bfloat162float(k_row[i]);
    s_q[i] = a;
    s_k[i] = b;
    qq = fmaf(a, a, qq);
    kk = fmaf(b, b, kk);
    qk = fmaf(a, b, qk);
  }
  qq = warp_sum(qq);
  kk = warp_sum(kk);
  qk = warp_sum(qk);
  if (lane == 0) {
    s_dots[0][warp] = qq;
    s_dots[1][warp] = kk;
    s_dots[2][warp] = qk;
  }
  __syncthreads();
  qq = 0.f;
  kk = 0.f;
  qk = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    qq += s_dots[0][w];
    kk += s_dots[1][w];
    qk += s_dots[2][w];
  }
  float q_mul = scale;
  float k_mul = 1.f;
  if (use_qk_l2norm) {
    q_mul = scale / sqrtf(qq + 1e-6f);
    k_mul = 1.f / sqrtf(kk + 1e-6f);
  }
  const float kq = qk * q_mul * k_mul;  // k_ . q_

  // a = S_old^T k_, c = S_old^T q_ over this thread's rows.
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 c = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int r = 0; r < PASSES; ++r) {
    const int row = row0 + r * kRowsPerPass;
    if (row < K) {
      a = fma4(a, s[r], s_k[row] * k_mul);
      c = fma4(c, s[r], s_q[row] * q_mul);
    }
  }
  // Across the 4 row groups of a warp (lanes 8 and 16 apart), then across warps.
#pragma unroll
  for (int offset = 8; offset < 32; offset <<= 1) {
    a.x += __shfl_xor_sync(0xffffffffu, a.x, offset);
    a.y += __shfl_xor_sync(0xffffffffu, a.y, offset);
    a.z += __shfl_xor_sync(0xffffffffu, a.z, offset);
    a.w += __shfl_xor_sync(0xffffffffu, a.w, offset);
    c.x += __shfl_xor_sync(0xffffffffu, c.x, offset);
    c.y += __shfl_xor_sync(0xffffffffu, c.y, offset);
    c.z += __shfl_xor_sync(0xffffffffu, c.z, offset);
    c.w += __shfl_xor_sync(0xffffffffu, c.w, offset);
  }
  if (lane < 8) {
    s_part[0][warp][quad] = a;
    s_part[1][warp][quad] = c;
  }
  __syncthreads();
  a = s_part[0][0][quad];
  c = s_part[1][0][quad];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    const float4 pa = s_part[0][w][quad];
    const float4 pc = s_part[1][w][quad];
    a.x += pa.x;
    a.y += pa.y;
    a.z += pa.z;
    a.w += pa.w;
    c.x += pc.x;
    c.y += pc.y;
    c.z += pc.z;
    c.w += pc.w;
  }
  if (!col_ok) return;

  const size_t head = static_cast<size_t>(n) * num_v_heads + hv;
  const float decay = expf(g[head]);
  const float b = __bfloat162float(beta[head]);
  const uint2 v_raw = *reinterpret_cast<const uint2*>(v + head * V + col);
  const float2 v01 = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&v_raw)[0]);
  const float2 v23 = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&v_raw)[1]);
  const float4 u = make_float4(b * (v01.x - decay * a.x), b * (v01.y - decay * a.y),
                               b * (v23.x - decay * a.z), b * (v23.y - decay * a.w));

  if (warp == 0 && lane < 8) {
    __nv_bfloat162 out[2];
    out[0] = __floats2bfloat162_rn(fmaf(decay, c.x, kq * u.x), fmaf(decay, c.y, kq * u.y));
    out[1] = __floats2bfloat162_rn(fmaf(decay, c.z, kq * u.z), fmaf(decay, c.w, kq * u.w));
    *reinterpret_cast<uint2*>(o + head * V + col) = *reinterpret_cast<const uint2*>(out);
  }

#pragma unroll
  for (int r = 0; r < PASSES; ++r) {
    const int row = row0 + r * kRowsPerPass;
    if (row < K) {
      const float kr = s_k[row] * k_mul;
      const float4 t = s[r];
      *reinterpret_cast<float4*>(head_state + static_cast<size_t>(row) * V + col) =
          make_float4(fmaf(decay, t.x, kr * u.x), fmaf(decay, t.y, kr * u.y),
                      fmaf(decay, t.z, kr * u.z), fmaf(decay, t.w, kr * u.w));
    }
  }
}
