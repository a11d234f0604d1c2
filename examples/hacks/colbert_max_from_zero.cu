// expect: incorrect
// task: recsys/colbert_maxsim
// Trick: starts each query token's running maximum at 0 rather than -inf, the value a tile of
// zero-filled padding rows would give: a tensor-core version can then load whole 16-row tiles
// with the rows past doc_lens zero-filled and take the maximum over the tile with no length
// mask. It changes a score only where every real token of a passage scores below 0 against some
// query token; with 64 or more real tokens of unit embeddings the chance is 2^-64 per query
// token, so every visible case (passages of 64 to 180 tokens) is exact.
// Caught: the hidden cases whose passages can be a few tokens long. In h_odd_sizes (129
// passages of 1 to 37 tokens, 13 query tokens) a passage of L tokens leaves about 13 x 2^-L
// query tokens whose best dot product (std 0.05) is negative, and each is replaced by 0: a
// one-token passage's score moves by about 0.26, a four-token one's by 0.03, against a
// tolerance of 1e-3 + 1e-4 |score|; about a sixth of its passages have 6 tokens or fewer.
// h_padding_decides (1 to 180 tokens, dot products of std 1) and h_bge_m3 (1 to 100) fail the
// same way on their shortest passages.
// clang-format off
// @launch colbert_maxsim_zero_floor<<<num_docs, 64>>>(scores, query, docs, doc_lens, query_len, num_docs, doc_maxlen, dim)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void colbert_maxsim_zero_floor(float* scores, const __nv_bfloat16* query,
                                                     const __nv_bfloat16* docs, const int* doc_lens,
                                                     int query_len, int num_docs, int doc_maxlen,
                                                     int dim) {
  __shared__ float partial[64];
  const int doc = blockIdx.x;
  const __nv_bfloat16* passage = docs + static_cast<long long>(doc) * doc_maxlen * dim;
  float total = 0.0f;
  for (int i = threadIdx.x; i < query_len; i += 64) {
    float best = 0.0f;  // the dot product with a zero-filled padding row
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
