// Example solution for recsys/csr_spmm: one thread per output element walks its row's nonzeros.
//
// @launch csr_spmm_elements<<<dim3(num_nodes, cdiv(dim, 64)), 64>>>(out, row_ptr, col_idx, values,
//   emb, dim)

extern "C" __global__ void csr_spmm_elements(float* out, const int* row_ptr, const int* col_idx,
                                             const float* values, const float* emb, int dim) {
  const int column = blockIdx.y * blockDim.x + threadIdx.x;
  const long long row = blockIdx.x;
  if (column >= dim) return;
  float sum = 0.0f;
  for (int p = row_ptr[row]; p < row_ptr[row + 1]; ++p) {
    sum += values[p] * emb[static_cast<long long>(col_idx[p]) * dim + column];
  }
  out[row * dim + column] = sum;
}
