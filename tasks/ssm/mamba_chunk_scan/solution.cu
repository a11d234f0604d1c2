// A correct, deliberately simple solution for ssm/mamba_chunk_scan: one thread per output
// element (batch, token, head, channel) sums the state read-out and its chunk's earlier tokens
// serially in fp32, scalar loads.
//
// @launch chunk_scan_simple<<<cdiv(batch * seqlen * nheads * headdim, 128), 128>>>(cb, x, dt,
//     dA_cumsum, C, states, D, out, batch, seqlen, nchunks, chunk_size, nheads, headdim,
//     ngroups, dstate)

#include <cuda_bf16.h>

extern "C" __global__ void chunk_scan_simple(const float* cb, const __nv_bfloat16* x,
                                             const float* dt, const float* dA_cumsum,
                                             const __nv_bfloat16* C, const __nv_bfloat16* states,
                                             const float* D, __nv_bfloat16* out, int batch,
                                             int seqlen, int nchunks, int chunk_size, int nheads,
                                             int headdim, int ngroups, int dstate) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * seqlen * nheads * headdim) return;
  const int p = static_cast<int>(i % headdim);
  const int h = static_cast<int>((i / headdim) % nheads);
  const long long bl = i / (static_cast<long long>(headdim) * nheads);  // b * seqlen + l
  const int l = static_cast<int>(bl % seqlen);
  const int b = static_cast<int>(bl / seqlen);
  const int g = h / (nheads / ngroups);
  const int c = l / chunk_size;
  const int t = l % chunk_size;
  const long long row = ((static_cast<long long>(b) * nheads + h) * nchunks + c) * chunk_size;
  const float da_t = dA_cumsum[row + t];

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
  const long long first = bl - t;  // b * seqlen + the chunk's first token
  float mix = 0.0f;
  for (int s = 0; s <= t; ++s) {
    const float w = cb_row[s] * expf(da_t - dA_cumsum[row + s]) * dt[row + s];
    mix += w * __bfloat162float(x[((first + s) * nheads + h) * headdim + p]);
  }
  out[i] = __float2bfloat16(expf(da_t) * read + mix + D[h] * __bfloat162float(x[i]));
}
