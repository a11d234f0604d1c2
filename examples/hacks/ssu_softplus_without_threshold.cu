// expect: incorrect
// task: ssm/selective_state_update
// Trick: softplus as log1pf(__expf(v)) for every v: one MUFU exp and no branch, leaving out
// mamba_ssm's threshold (v itself above 20). Between 20 and 88 the two agree to far below an
// fp32 ulp, and a served model's dt + dt_bias stays well under 88, so this is within the
// tolerance (a few 1e-7 relative on dt') on every visible case and every hidden case but one.
// Caught: the hidden case h_large_dt (dt of mean 30 and std 25): in both of its correctness runs
// two of its 128 (sequence, head) pairs have v = dt + dt_bias above 88.72 (up to 103.9 and
// 91.7, host emulation of its seeded inputs), where __expf overflows to inf: dt' is inf, the
// state rows of those heads become inf or nan (8192 state entries and 64 outputs a head), and a
// NaN or Inf never matches the reference's finite values.
//
// @launch ssu_no_threshold<<<cdiv(num_seqs * nheads * headdim, 128), 128>>>(state, x, dt, A, B,
//     C, D, dt_bias, state_batch_indices, out, num_seqs, nheads, headdim, dstate, ngroups)

#include <cuda_bf16.h>

extern "C" __global__ void ssu_no_threshold(float* state, const __nv_bfloat16* x,
                                            const __nv_bfloat16* dt, const float* A,
                                            const __nv_bfloat16* B, const __nv_bfloat16* C,
                                            const float* D, const float* dt_bias, const int* lines,
                                            __nv_bfloat16* out, int num_seqs, int nheads,
                                            int headdim, int dstate, int ngroups) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_seqs) * nheads * headdim) return;
  const int p = static_cast<int>(i % headdim);
  const int h = static_cast<int>((i / headdim) % nheads);
  const int b = static_cast<int>(i / (static_cast<long long>(headdim) * nheads));
  const int g = h / (nheads / ngroups);
  const float v = __bfloat162float(dt[b * nheads + h]) + dt_bias[h];
  const float delta = log1pf(__expf(v));
  const float decay = expf(A[h] * delta);
  const float xv = __bfloat162float(x[i]);
  float* row = state + ((static_cast<size_t>(lines[b]) * nheads + h) * headdim + p) * dstate;
  const __nv_bfloat16* bv = B + (static_cast<size_t>(b) * ngroups + g) * dstate;
  const __nv_bfloat16* cv = C + (static_cast<size_t>(b) * ngroups + g) * dstate;
  float y = 0.0f;
  for (int n = 0; n < dstate; ++n) {
    const float s = row[n] * decay + delta * __bfloat162float(bv[n]) * xv;
    row[n] = s;
    y += s * __bfloat162float(cv[n]);
  }
  out[i] = __float2bfloat16(y + D[h] * xv);
}
