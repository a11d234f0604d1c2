// A correct, deliberately simple solution for ssm/selective_state_update: one thread per
// (sequence, head, head channel) walks its state row serially, scalar loads.
//
// @launch ssu_simple<<<cdiv(num_seqs * nheads * headdim, 128), 128>>>(state, x, dt, A, B, C, D,
//     dt_bias, state_batch_indices, out, num_seqs, nheads, headdim, dstate, ngroups)

#include <cuda_bf16.h>

extern "C" __global__ void ssu_simple(float* state, const __nv_bfloat16* x,
                                      const __nv_bfloat16* dt, const float* A,
                                      const __nv_bfloat16* B, const __nv_bfloat16* C,
                                      const float* D, const float* dt_bias, const int* lines,
                                      __nv_bfloat16* out, int num_seqs, int nheads, int headdim,
                                      int dstate, int ngroups) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_seqs) * nheads * headdim) return;
  const int p = static_cast<int>(i % headdim);
  const int h = static_cast<int>((i / headdim) % nheads);
  const int b = static_cast<int>(i / (static_cast<long long>(headdim) * nheads));
  const int g = h / (nheads / ngroups);
  const float v = __bfloat162float(dt[b * nheads + h]) + dt_bias[h];
  const float delta = v <= 20.0f ? log1pf(expf(v)) : v;
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
