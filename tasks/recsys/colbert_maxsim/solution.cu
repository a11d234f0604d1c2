// A correct, deliberately simple solution for recsys/colbert_maxsim: one thread per (passage,
// query token), scalar fp32 dot products, then a block sum per passage.
//
// Slower than the reference (no tensor cores, every query token re-reads the whole passage),
// but right on every shape.
//
// clang-format off
// @launch colbert_maxsim_simple<<<num_docs, 64>>>(scores, query, docs, doc_lens, query_len, num_docs, doc_maxlen, dim)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void colbert_maxsim_simple(float* scores, const __nv_bfloat16* query,
                                                 const __nv_bfloat16* docs, const int* doc_lens,
                                                 int query_len, int num_docs, int doc_maxlen,
                                                 int dim) {
  __shared__ float partial[64];
  const int doc = blockIdx.x;
  const __nv_bfloat16* passage = docs + static_cast<long long>(doc) * doc_maxlen * dim;
  float total = 0.0f;
  for (int i = threadIdx.x; i < query_len; i += 64) {
    float best = -3.0e38f;
    for (int j = 0; j < doc_lens[doc]; ++j) {
      float dot = 0.0f;
      for (int k = 0; k < dim; ++k) {
        dot += __bfloat162float(query[i * dim + k]) * __bfloat162float(passage[j * dim + k]);
      }
      best = fmaxf(best, dot);
    }
    total += best;
  }
  partial[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int i = 0; i < 64; ++i) sum += partial[i];
    scores[doc] = sum;
  }
}
