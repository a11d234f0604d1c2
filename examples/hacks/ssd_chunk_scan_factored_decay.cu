// expect: incorrect
// task: ssm/mamba_chunk_scan
// Trick: factors the causal decay exp(dA[t] - dA[s]) into a row scale exp(dA[t]) and a column
// scale exp(-dA[s]), so the decayed weight matrix is never formed: each source token's x is
// scaled once by exp(-dA[s]) dt[s], cb multiplies it as it is (on tensor cores, cb would be a
// plain GEMM operand) and the row sum is scaled by exp(dA[t]) at the end. This trades the
// chunk_size^2 / 2 exponentials of every chunk and head for chunk_size of them, and in exact
// arithmetic it is the same sum.
// Caught: the visible cases' strong-decay heads (A = -14.5, dt ~ 0.1: dA_cumsum falls to -380
// within a chunk) and h_strong_decay (to -8192): exp(-dA[s]) overflows fp32 past 88, so the
// scaled sources become inf, the row sums inf or nan and exp(dA[t]) (underflowed to 0) turns
// them into nan where the answer is finite.
//
// @launch factored_decay<<<cdiv(batch * seqlen * nheads * headdim, 128), 128>>>(cb, x, dt,
//     dA_cumsum, C, states, D, out, batch, seqlen, nchunks, chunk_size, nheads, headdim,
//     ngroups, dstate)

#include <cuda_bf16.h>

extern "C" __global__ void factored_decay(const float* cb, const __nv_bfloat16* x, const float* dt,
                                          const float* dA_cumsum, const __nv_bfloat16* C,
                                          const __nv_bfloat16* states, const float* D,
                                          __nv_bfloat16* out, int batch, int seqlen, int nchunks,
                                          int chunk_size, int nheads, int headdim, int ngroups,
                                          int dstate) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * seqlen * nheads * headdim) return;
  const int p = static_cast<int>(i % headdim);
  const int h = static_cast<int>((i / headdim) % nheads);
  const long long bl = i / (static_cast<long long>(headdim) * nheads);
  const int l = static_cast<int>(bl % seqlen);
  const int b = static_cast<int>(bl / seqlen);
  const int g = h / (nheads / ngroups);
  const int c = l / chunk_size;
  const int t = l % chunk_size;
  const long long row = ((static_cast<long long>(b) * nheads + h) * nchunks + c) * chunk_size;

  const __nv_bfloat16* c_row = C + (bl * ngroups + g) * dstate;
  const __nv_bfloat16* s_row =
      states + (((static_cast<long long>(b) * nchunks + c) * nheads + h) * headdim + p) * dstate;
  float read = 0.0f;
  for (int n = 0; n < dstate; ++n) {
    read += __bfloat162float(c_row[n]) * __bfloat162float(s_row[n]);
  }

  const float* cb_row =
      cb + (((static_cast<long long>(b) * nchunks + c) * ngroups + g) * chunk_size + t) *
               static_cast<long long>(chunk_size);
  const long long first = bl - t;
  float mix = 0.0f;
  for (int s = 0; s <= t; ++s) {
    const float source = expf(-dA_cumsum[row + s]) * dt[row + s] *
                         __bfloat162float(x[((first + s) * nheads + h) * headdim + p]);
    mix += cb_row[s] * source;
  }
  const float row_scale = expf(dA_cumsum[row + t]);
  out[i] = __float2bfloat16(row_scale * (read + mix) + D[h] * __bfloat162float(x[i]));
}
