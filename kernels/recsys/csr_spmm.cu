// Reference for recsys/csr_spmm: LightGCN's propagation step, a sparse matrix in CSR times dense
// fp32 embeddings (torch.sparse.mm(adj, emb), cuSPARSE SpMM), one layer:
//
//   out[i, :] = sum_{p = row_ptr[i]}^{row_ptr[i + 1] - 1} values[p] * emb[col_idx[p], :]
//
// (fp32 accumulation; an empty row gives zeros).
//
// Launch plan: a block of 8 warps owns 8 consecutive rows. A warp sums a row of at most
// kShortRow nonzeros on its own; longer rows (the power-law hubs) are summed afterwards by all 8
// warps of the block together and reduced through shared memory. kChunks float2 columns a lane:
// dim <= 64, <= 128, <= 256.
//
// @launch if (dim <= 64) csr_spmm_rows<1><<<cdiv(num_nodes, 8), 256>>>(out, row_ptr, col_idx,
//   values, emb, num_nodes, dim)
// @launch if (dim > 64 && dim <= 128) csr_spmm_rows<2><<<cdiv(num_nodes, 8), 256>>>(out,
//   row_ptr, col_idx, values, emb, num_nodes, dim)
// @launch if (dim > 128) csr_spmm_rows<4><<<cdiv(num_nodes, 8), 256>>>(out, row_ptr, col_idx,
//   values, emb, num_nodes, dim)
//
// Design notes:
// - The embedding matrix (70K to 144K rows of 256 bytes: 18 to 37 MB) fits the H200's 50 MB L2,
//   so the gathers are L2 hits and the op is bound by L2 latency times the gathers in flight. A
//   warp reads 32 (column, value) pairs with one coalesced load, broadcasts them by shuffles and
//   issues eight 256-byte row gathers before the first multiply-add.
// - Degrees follow a power law (hubs of 1500+ neighbours beside rows of 10): a warp per row
//   would leave one warp walking a hub long after the rest of the GPU is idle, so rows above
//   kShortRow are split over the whole block (8x the gathers in flight).
// - dim is even, so every row of emb and out is 8-byte aligned and read as float2.

namespace {

constexpr int kWarps = 8;  // the directives launch 256 threads and cdiv(num_nodes, 8) blocks
constexpr int kShortRow = 128;
constexpr int kUnroll = 8;

// Adds values[p] * emb[col_idx[p], :] for p in [begin, end), taking batches of 32 nonzeros
// starting at begin + 32 * first_batch and stepping `batch_step` batches. Lane `lane` owns the
// float2 columns (lane + 32 q) * 2, q < kChunks.
template <int kChunks>
__device__ __forceinline__ void accumulate(float2 (&acc)[kChunks], const int* __restrict__ col_idx,
                                           const float* __restrict__ values,
                                           const float2* __restrict__ emb2, int begin, int end,
                                           int first_batch, int batch_step, int half_dim,
                                           int lane) {
  for (int base = begin + 32 * first_batch; base < end; base += 32 * batch_step) {
    const int p = base + lane;
    const int my_col = p < end ? __ldg(col_idx + p) : 0;
    const float my_val = p < end ? __ldg(values + p) : 0.0f;
    const int count = min(32, end - base);
    for (int j = 0; j < count; j += kUnroll) {
      float2 rows[kUnroll][kChunks];
      float weight[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = __shfl_sync(0xffffffffu, my_col, (j + u) & 31);
        weight[u] = __shfl_sync(0xffffffffu, my_val, (j + u) & 31);
        const float2* row = emb2 + static_cast<long long>(c) * half_dim;
#pragma unroll
        for (int q = 0; q < kChunks; ++q) {
          const int column = lane + 32 * q;
          rows[u][q] = (j + u < count && column < half_dim) ? __ldg(row + column)
                                                            : make_float2(0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int q = 0; q < kChunks; ++q) {
          acc[q].x = fmaf(weight[u], rows[u][q].x, acc[q].x);
          acc[q].y = fmaf(weight[u], rows[u][q].y, acc[q].y);
        }
      }
    }
  }
}

}  // namespace

template <int kChunks>
__global__ void __launch_bounds__(kWarps * 32)
    csr_spmm_rows(float* __restrict__ out, const int* __restrict__ row_ptr,
                  const int* __restrict__ col_idx, const float* __restrict__ values,
                  const float* __restrict__ emb, int num_nodes, int dim) {
  __shared__ float2 partial[kWarps][kChunks * 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int half_dim = dim >> 1;
  const float2* emb2 = reinterpret_cast<const float2*>(emb);
  float2* out2 = reinterpret_cast<float2*>(out);
  const int first_row = blockIdx.x * kWarps;

  // Short rows: a warp each.
  const int row = first_row + warp;
  if (row < num_nodes) {
    const int begin = __ldg(row_ptr + row);
    const int end = __ldg(row_ptr + row + 1);
    if (end - begin <= kShortRow) {
      float2 acc[kChunks];
#pragma unroll
      for (int q = 0; q < kChunks; ++q) acc[q] = make_float2(0.0f, 0.0f);
      accumulate<kChunks>(acc, col_idx, values, emb2, begin, end, 0, 1, half_dim, lane);
      float2* dst = out2 + static_cast<long long>(row) * half_dim;
#pragma unroll
      for (int q = 0; q < kChunks; ++q) {
        if (lane + 32 * q < half_dim) dst[lane + 32 * q] = acc[q];
      }
    }
  }

  // Long rows of the block: every warp takes every kWarps-th batch, then a shared reduction.
  const int rows_here = min(kWarps, num_nodes - first_row);
  for (int r = 0; r < rows_here; ++r) {
    const int long_row = first_row + r;
    const int begin = __ldg(row_ptr + long_row);
    const int end = __ldg(row_ptr + long_row + 1);
    if (end - begin <= kShortRow) continue;  // block-uniform
    float2 acc[kChunks];
#pragma unroll
    for (int q = 0; q < kChunks; ++q) acc[q] = make_float2(0.0f, 0.0f);
    accumulate<kChunks>(acc, col_idx, values, emb2, begin, end, warp, kWarps, half_dim, lane);
#pragma unroll
    for (int q = 0; q < kChunks; ++q) partial[warp][lane + 32 * q] = acc[q];
    __syncthreads();
    for (int column = threadIdx.x; column < half_dim; column += kWarps * 32) {
      float2 sum = partial[0][column];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) {
        sum.x += partial[w][column].x;
        sum.y += partial[w][column].y;
      }
      out2[static_cast<long long>(long_row) * half_dim + column] = sum;
    }
    __syncthreads();
  }
}
