// expect: incorrect
// task: recsys/csr_spmm
// Trick: bounds the work of a row at 8,192 nonzeros, so a hub row cannot run far longer than
// the rest of the grid (the straggler the task's power-law degrees create): the loop walks
// [row_ptr[i], min(row_ptr[i + 1], row_ptr[i] + 8192)). The bound sits above the largest hub of
// every visible graph (rank-size skew 0.5: the top row holds total x C(1) / C(rows), 3,208 at
// Gowalla, 4,916 at Yelp2018 and 6,524 at Amazon-Book's size) and of the hidden graphs at that
// skew, so every one of those rows is summed in full.
// Caught: the hidden cases with heavier tails: h_hub_heavy (skew 1.2: rows of ~60,000, ~31,500
// and ~20,800 nonzeros) and h_mostly_empty (skew 3: a row of ~37,500 of its 50,000). The dropped
// terms of a 60,000-nonzero row sum to about 0.008 x sqrt(52,000) = 1.9 per column (values of
// mean 0.07 times embeddings of std 0.1), against a tolerance of 1e-5 + 1e-4 |out|.
// clang-format off
// @launch csr_spmm_capped<<<dim3(num_nodes, cdiv(dim, 64)), 64>>>(out, row_ptr, col_idx, values, emb, dim)
// clang-format on

constexpr int kMaxRowNonzeros = 8192;

extern "C" __global__ void csr_spmm_capped(float* out, const int* row_ptr, const int* col_idx,
                                           const float* values, const float* emb, int dim) {
  const int column = blockIdx.y * blockDim.x + threadIdx.x;
  const long long row = blockIdx.x;
  if (column >= dim) return;
  const int begin = row_ptr[row];
  const int end = min(row_ptr[row + 1], begin + kMaxRowNonzeros);
  float sum = 0.0f;
  for (int p = begin; p < end; ++p) {
    sum += values[p] * emb[static_cast<long long>(col_idx[p]) * dim + column];
  }
  out[row * dim + column] = sum;
}
