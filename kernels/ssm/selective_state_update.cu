// Reference for ssm/selective_state_update: the Mamba-2 decode step (mamba_ssm's
// selective_state_update as vLLM's MambaMixer2 calls it: per-head dt, A, D and dt_bias, grouped
// B and C, dt_softplus, state_batch_indices), fp32 state, bf16 activations.
//
// For every sequence b (state line s = state_batch_indices[b]), head h (group g = h / (nheads /
// ngroups)), head channel p and state index n:
//   dt' = softplus(dt[b, h] + dt_bias[h])          (softplus(v) = v above 20, as mamba_ssm)
//   state[s, h, p, n] = state[s, h, p, n] * exp(A[h] * dt') + dt' * B[b, g, n] * x[b, h, p]
//   out[b, h, p] = sum_n state[s, h, p, n] * C[b, g, n] + D[h] * x[b, h, p]
//
// @launch if (dstate <= 128)
//     ssu_kernel<1><<<dim3(cdiv(headdim, 16), nheads, num_seqs), 128>>>(state, x, dt, A, B, C,
//     D, dt_bias, state_batch_indices, out, nheads, headdim, dstate, ngroups)
// @launch if (dstate > 128)
//     ssu_kernel<2><<<dim3(cdiv(headdim, 16), nheads, num_seqs), 128>>>(state, x, dt, A, B, C,
//     D, dt_bias, state_batch_indices, out, nheads, headdim, dstate, ngroups)
//
// Design notes:
// - Memory bound: the state (headdim x dstate fp32 per head, 4 MiB per sequence for Codestral)
//   is read and written once; everything else is small. A warp owns 4 rows p of one head and
//   its lanes split the row's dstate in 16-byte float4 pieces (lane l: n = 4l .. 4l + 3, and
//   128 further on for dstate > 128), so a warp moves 512 contiguous bytes per row and each
//   thread has its 4 (or 8) state loads in flight at once, issued before any arithmetic.
// - out[b, h, p] is a dot product over n: one butterfly shuffle reduction per row, the four
//   rows' reductions interleaved.
// - dt', exp(A dt') and B, C are the same for every row of a head: each thread recomputes them
//   (a few instructions) instead of staging them in shared memory behind a barrier.
// - softplus and exp in accurate fp32 (log1pf, expf): the state carries the recurrence, so its
//   error is what a long decode accumulates.

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kRowsPerWarp * (kThreads / 32);  // 16: grid.x = cdiv(headdim, 16)

__device__ __forceinline__ float4 bf16x4_to_float4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  const float2 lo = __bfloat1622float2(pairs[0]);
  const float2 hi = __bfloat1622float2(pairs[1]);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

}  // namespace

template <int CHUNKS>
__global__ void __launch_bounds__(kThreads)
    ssu_kernel(float* __restrict__ state, const __nv_bfloat16* __restrict__ x,
               const __nv_bfloat16* __restrict__ dt, const float* __restrict__ A,
               const __nv_bfloat16* __restrict__ B, const __nv_bfloat16* __restrict__ C,
               const float* __restrict__ D, const float* __restrict__ dt_bias,
               const int* __restrict__ state_batch_indices, __nv_bfloat16* __restrict__ out,
               int nheads, int headdim, int dstate, int ngroups) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int p0 = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp;
  if (p0 >= headdim) return;
  const int g = h / (nheads / ngroups);
  const int line = state_batch_indices[b];

  float* head_state = state + (static_cast<size_t>(line) * nheads + h) * headdim * dstate;
  const __nv_bfloat16* b_row = B + (static_cast<size_t>(b) * ngroups + g) * dstate;
  const __nv_bfloat16* c_row = C + (static_cast<size_t>(b) * ngroups + g) * dstate;

  // Issue every state load first.
  float4 s[kRowsPerWarp][CHUNKS];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int n = lane * 4 + c * 128;
      if (p0 + r < headdim && n < dstate) {
        s[r][c] = *reinterpret_cast<const float4*>(head_state +
                                                   static_cast<size_t>(p0 + r) * dstate + n);
      }
    }
  }
  float4 bv[CHUNKS], cv[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int n = lane * 4 + c * 128;
    if (n < dstate) {
      bv[c] = bf16x4_to_float4(b_row + n);
      cv[c] = bf16x4_to_float4(c_row + n);
    } else {
      bv[c] = make_float4(0.f, 0.f, 0.f, 0.f);
      cv[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  float xv[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    xv[r] = p0 + r < headdim
                ? __bfloat162float(x[(static_cast<size_t>(b) * nheads + h) * headdim + p0 + r])
                : 0.0f;
  }
  const float v = __bfloat162float(dt[static_cast<size_t>(b) * nheads + h]) + dt_bias[h];
  const float delta = v <= 20.0f ? log1pf(expf(v)) : v;
  const float decay = expf(A[h] * delta);
  const float d_skip = D[h];

  float partial[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    partial[r] = 0.0f;
    const float scaled_x = delta * xv[r];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int n = lane * 4 + c * 128;
      if (p0 + r < headdim && n < dstate) {
        float4 next;
        next.x = fmaf(s[r][c].x, decay, scaled_x * bv[c].x);
        next.y = fmaf(s[r][c].y, decay, scaled_x * bv[c].y);
        next.z = fmaf(s[r][c].z, decay, scaled_x * bv[c].z);
        next.w = fmaf(s[r][c].w, decay, scaled_x * bv[c].w);
        *reinterpret_cast<float4*>(head_state + static_cast<size_t>(p0 + r) * dstate + n) = next;
        partial[r] += next.x * cv[c].x + next.y * cv[c].y + next.z * cv[c].z + next.w * cv[c].w;
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      partial[r] += __shfl_xor_sync(0xffffffffu, partial[r], offset);
    }
  }
  if (lane < kRowsPerWarp && p0 + lane < headdim) {
    float y = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (r == lane) y = partial[r] + d_skip * xv[r];
    }
    out[(static_cast<size_t>(b) * nheads + h) * headdim + p0 + lane] = __float2bfloat16_rn(y);
  }
}
