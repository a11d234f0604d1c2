// Reference for recsys/csr_spmm: LightGCN's propagation step, a sparse matrix in CSR times dense
// fp32 embeddings (torch.sparse.mm(adj, emb), cuSPARSE SpMM), one layer:
//
//   out[i, :] = sum_{p = row_ptr[i]}^{row_ptr[i + 1] - 1} values[p] * emb[col_idx[p], :]
//
// (fp32 accumulation; an empty row gives zeros).
//
// Launch plan: a merge-path split of the rows and nonzeros into equal shares, one a warp, then a
// pass that adds the partial sums of the long rows that straddle two or more shares. kChunks
// float2 columns a lane: dim <= 64, <= 128, <= 256.
//
// @workspace carry_row int[cdiv(num_nodes + nnz, 256)]
// @workspace carry float[cdiv(num_nodes + nnz, 256) * dim]
// @launch if (dim <= 64) csr_spmm_merge_path<1><<<cdiv(num_nodes + nnz, 1024), 128>>>(out,
//   carry_row, carry, row_ptr, col_idx, values, emb, num_nodes, nnz, dim)
// @launch if (dim <= 64) csr_spmm_add_carries<1><<<cdiv(num_nodes + nnz, 1024), 128>>>(out,
//   carry_row, carry, num_nodes, nnz, dim)
// @launch if (dim > 64 && dim <= 128) csr_spmm_merge_path<2><<<cdiv(num_nodes + nnz, 1024),
//   128>>>(out, carry_row, carry, row_ptr, col_idx, values, emb, num_nodes, nnz, dim)
// @launch if (dim > 64 && dim <= 128) csr_spmm_add_carries<2><<<cdiv(num_nodes + nnz, 1024),
//   128>>>(out, carry_row, carry, num_nodes, nnz, dim)
// @launch if (dim > 128) csr_spmm_merge_path<4><<<cdiv(num_nodes + nnz, 1024), 128>>>(out,
//   carry_row, carry, row_ptr, col_idx, values, emb, num_nodes, nnz, dim)
// @launch if (dim > 128) csr_spmm_add_carries<4><<<cdiv(num_nodes + nnz, 1024), 128>>>(out,
//   carry_row, carry, num_nodes, nnz, dim)
//
// Design notes:
// - The embedding matrix (70K to 144K rows of 256 bytes: 18 to 37 MB) mostly fits the H200's
//   50 MB L2, so the op is bound by the throughput of 256-byte row gathers from L2. What keeps
//   it from that bound is balance: degrees follow a power law and the hubs sit in consecutive
//   rows, so any split by rows leaves a few warps walking thousands of nonzeros at the end.
// - Merge path (Merrill and Garland's SpMV split): the row ends and the nonzeros, merged in
//   order, form num_nodes + nnz items; warp w owns items [256 w, 256 w + 256), whatever the
//   degrees (a hub of 60000 nonzeros is spread over 234 warps; a run of empty rows costs an
//   item each). A warp finds where its share starts and ends with two interleaved 32-way
//   searches of row_ptr (four dependent loads at these sizes).
// - The walk: a warp loads the next 32 (column, value) pairs with one coalesced load (the batch
//   after them is already in flight), then gathers 16 embedding rows at once (a float2 a lane:
//   16 x 256 bytes in flight for dim 64) before the multiply-adds. Row ends come from a window
//   of 32 row_ptr entries held one a lane; when the walk passes a row's end the warp stores the
//   row and clears its accumulator. Every branch in the walk is warp-uniform.
// - A row is written by the warp that owns its end item. A row of at most kShortRow nonzeros
//   is never split: the warp owning its end sums it whole (up to 64 nonzeros before its share)
//   and the warp before skips it. A longer row split between warps leaves each earlier warp's
//   partial sum in `carry` (its row in `carry_row`, -1 for none); the second kernel gives each
//   run of equal carry rows to one warp, which adds the run in warp order and then adds it to
//   the row's stored part. Nothing is atomic, so the result is bitwise reproducible.
// - dim is even, so every row of emb and out is 8-byte aligned and read as float2.

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarps = 4;           // warps a block: the directives' 128 threads
constexpr int kItemsPerWarp = 256;  // the directives' cdiv(num_nodes + nnz, 256 * kWarps)
constexpr int kShortRow = 64;       // rows no longer than this are summed by one warp
static_assert(kShortRow < kItemsPerWarp, "a short row must end in the share after its start");

// Shares of the merge path: cdiv(num_nodes + nnz, kItemsPerWarp).
__device__ __forceinline__ int share_count(int num_nodes, int nnz) {
  const long long items = static_cast<long long>(num_nodes) + nnz;
  return static_cast<int>((items + kItemsPerWarp - 1) / kItemsPerWarp);
}

// Rows whose end item precedes diagonal d of the merge path: #{x : row_ptr[x + 1] + x + 1 <= d}
// (row x's end is item row_ptr[x + 1] + x; a row's end comes before the nonzero at its
// row_ptr[x + 1]). The predicate is monotone in x, so each step probes 32 evenly spaced rows of
// the open range [lo, hi) and keeps the stride that holds the boundary. Two diagonals at once,
// so that their loads overlap. Warp-uniform; all lanes must be active.
__device__ __forceinline__ void path_rows(const int* __restrict__ row_ptr, int num_nodes,
                                          long long d0, long long d1, int lane, int& rows0,
                                          int& rows1) {
  int lo0 = 0, hi0 = num_nodes, lo1 = 0, hi1 = num_nodes;
  while (lo0 < hi0 || lo1 < hi1) {
    const int stride0 = (hi0 - lo0 + 31) >> 5;  // 0 once settled
    const int stride1 = (hi1 - lo1 + 31) >> 5;
    const int x0 = lo0 + (lane + 1) * stride0 - 1;
    const int x1 = lo1 + (lane + 1) * stride1 - 1;
    const bool probe0 = lo0 < hi0 && x0 < hi0;
    const bool probe1 = lo1 < hi1 && x1 < hi1;
    const int end0 = probe0 ? __ldg(row_ptr + x0 + 1) : 0;
    const int end1 = probe1 ? __ldg(row_ptr + x1 + 1) : 0;
    const int below0 = __popc(__ballot_sync(kFullMask, probe0 && end0 + x0 + 1LL <= d0));
    const int below1 = __popc(__ballot_sync(kFullMask, probe1 && end1 + x1 + 1LL <= d1));
    // Probes 0 .. below - 1 hold, probe `below` (if inside the range) does not.
    if (lo0 < hi0) {
      hi0 = min(hi0, lo0 + (below0 + 1) * stride0 - 1);
      lo0 += below0 * stride0;
    }
    if (lo1 < hi1) {
      hi1 = min(hi1, lo1 + (below1 + 1) * stride1 - 1);
      lo1 += below1 * stride1;
    }
  }
  rows0 = lo0;
  rows1 = lo1;
}

// The walk's position among the rows: `row` is being summed and ends at nonzero `row_end`;
// lane l holds the end of row `window + l` (nnz past the last row).
struct RowCursor {
  int row;
  int window;
  int lane_end;
  int row_end;
};

__device__ __forceinline__ void load_window(RowCursor& cursor, const int* __restrict__ row_ptr,
                                            int num_nodes, int nnz, int lane) {
  cursor.window = cursor.row;
  const int r = cursor.window + lane;
  cursor.lane_end = r < num_nodes ? __ldg(row_ptr + r + 1) : nnz;
}

// Stores the finished row, clears the accumulator and moves to the next row.
template <int kChunks>
__device__ __forceinline__ void finish_row(float2 (&acc)[kChunks], RowCursor& cursor,
                                           float2* __restrict__ out2,
                                           const int* __restrict__ row_ptr, int num_nodes, int nnz,
                                           int half_dim, int lane) {
  float2* dst = out2 + static_cast<long long>(cursor.row) * half_dim;
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    if (lane + 32 * q < half_dim) dst[lane + 32 * q] = acc[q];
    acc[q] = make_float2(0.0f, 0.0f);
  }
  ++cursor.row;
  if (cursor.row - cursor.window == 32) load_window(cursor, row_ptr, num_nodes, nnz, lane);
  cursor.row_end = __shfl_sync(kFullMask, cursor.lane_end, cursor.row - cursor.window);
}

}  // namespace

// One warp per merge-path share: writes every row whose end item is in the share, and the
// share's partial sum of a long row it leaves unfinished.
template <int kChunks>
__global__ void __launch_bounds__(kWarps * 32)
    csr_spmm_merge_path(float* __restrict__ out, int* __restrict__ carry_row,
                        float* __restrict__ carry, const int* __restrict__ row_ptr,
                        const int* __restrict__ col_idx, const float* __restrict__ values,
                        const float* __restrict__ emb, int num_nodes, int nnz, int dim) {
  constexpr int kUnroll = 16 / kChunks;  // rows gathered before the multiply-adds
  static_assert(32 % kUnroll == 0, "a batch of 32 nonzeros is whole rounds");
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int shares = share_count(num_nodes, nnz);
  if (warp >= shares) return;  // warp-uniform

  const long long items = static_cast<long long>(num_nodes) + nnz;
  const long long d0 = static_cast<long long>(warp) * kItemsPerWarp;
  const long long d1 = min(d0 + kItemsPerWarp, items);
  int rows0 = 0, rows1 = 0;
  path_rows(row_ptr, num_nodes, d0, d1, lane, rows0, rows1);
  // The share starts in row rows0 at nonzero j0 and ends in row rows1 at nonzero j1.
  // rows0 < num_nodes: the last row's end is the last item, so d0 < items leaves it ahead.
  const int j0 = static_cast<int>(d0 - rows0);
  const int j1 = static_cast<int>(d1 - rows1);

  RowCursor cursor;
  cursor.row = rows0;
  load_window(cursor, row_ptr, num_nodes, nnz, lane);
  const int begin0 = __ldg(row_ptr + rows0);
  int begin1 = 0, end1 = 0;
  if (rows1 < num_nodes) {
    begin1 = __ldg(row_ptr + rows1);
    end1 = __ldg(row_ptr + rows1 + 1);
  }
  cursor.row_end = __shfl_sync(kFullMask, cursor.lane_end, 0);

  // A short first row begun before the share is summed whole here (its end item is in this
  // share, since it lies fewer than kShortRow items past d0); the share before skipped it.
  const int first = cursor.row_end - begin0 <= kShortRow ? begin0 : j0;
  // A short last row is left whole to the next share; a long one leaves a carry.
  int last = j1;
  int carry_to = -1;
  if (rows1 < num_nodes) {
    if (end1 - begin1 <= kShortRow) {
      last = begin1;
    } else if (j1 > max(begin1, first)) {
      carry_to = rows1;
    }
  }

  const int half_dim = dim >> 1;
  const float2* emb2 = reinterpret_cast<const float2*>(emb);
  float2* out2 = reinterpret_cast<float2*>(out);
  float2 acc[kChunks];
#pragma unroll
  for (int q = 0; q < kChunks; ++q) acc[q] = make_float2(0.0f, 0.0f);

  int lane_col = first + lane < last ? __ldg(col_idx + first + lane) : 0;
  float lane_val = first + lane < last ? __ldg(values + first + lane) : 0.0f;
  for (int base = first; base < last; base += 32) {
    const int ahead = base + 32 + lane;
    const int next_col = ahead < last ? __ldg(col_idx + ahead) : 0;
    const float next_val = ahead < last ? __ldg(values + ahead) : 0.0f;
    const int count = min(32, last - base);
    for (int k0 = 0; k0 < count; k0 += kUnroll) {
      float2 rows[kUnroll][kChunks];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int column_row = __shfl_sync(kFullMask, lane_col, k0 + u);
        const float2* src = emb2 + static_cast<long long>(column_row) * half_dim;
#pragma unroll
        for (int q = 0; q < kChunks; ++q) {
          const int column = lane + 32 * q;
          rows[u][q] =
              (k0 + u < count && column < half_dim) ? __ldg(src + column) : make_float2(0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (k0 + u < count) {  // warp-uniform
          const int nonzero = base + k0 + u;
          while (nonzero >= cursor.row_end) {  // rows ending here (empty ones included)
            finish_row<kChunks>(acc, cursor, out2, row_ptr, num_nodes, nnz, half_dim, lane);
          }
          const float weight = __shfl_sync(kFullMask, lane_val, k0 + u);
#pragma unroll
          for (int q = 0; q < kChunks; ++q) {
            acc[q].x = fmaf(weight, rows[u][q].x, acc[q].x);
            acc[q].y = fmaf(weight, rows[u][q].y, acc[q].y);
          }
        }
      }
    }
    lane_col = next_col;
    lane_val = next_val;
  }
  // The remaining rows whose end items are in the share (trailing and empty rows).
  while (cursor.row < rows1) {
    finish_row<kChunks>(acc, cursor, out2, row_ptr, num_nodes, nnz, half_dim, lane);
  }
  if (carry_to >= 0) {
    float2* dst = reinterpret_cast<float2*>(carry) + static_cast<long long>(warp) * half_dim;
#pragma unroll
    for (int q = 0; q < kChunks; ++q) {
      if (lane + 32 * q < half_dim) dst[lane + 32 * q] = acc[q];
    }
  }
  if (lane == 0) carry_row[warp] = carry_to;
}

// One warp per share: the first share of each run of equal carry rows sums the run's partials
// in share order and adds them to the row that the merge-path pass stored.
template <int kChunks>
__global__ void __launch_bounds__(kWarps * 32)
    csr_spmm_add_carries(float* __restrict__ out, const int* __restrict__ carry_row,
                         const float* __restrict__ carry, int num_nodes, int nnz, int dim) {
  constexpr int kBatch = 4;  // partials loaded before they are added
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int shares = share_count(num_nodes, nnz);
  if (warp >= shares) return;  // warp-uniform
  const int row = __ldg(carry_row + warp);
  const int before = warp > 0 ? __ldg(carry_row + warp - 1) : -1;
  if (row < 0 || before == row) return;

  const int half_dim = dim >> 1;
  const float2* carry2 = reinterpret_cast<const float2*>(carry);
  float2 sum[kChunks];
#pragma unroll
  for (int q = 0; q < kChunks; ++q) sum[q] = make_float2(0.0f, 0.0f);
  for (int base = warp;; base += 32) {
    const int share = base + lane;
    const int share_row = share < shares ? __ldg(carry_row + share) : -1;
    const unsigned other = __ballot_sync(kFullMask, share_row != row);
    const int run = other != 0u ? __ffs(other) - 1 : 32;  // >= 1 on the first pass
    for (int k = 0; k < run; k += kBatch) {
      float2 part[kBatch][kChunks];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float2* src = carry2 + static_cast<long long>(base + k + u) * half_dim;
#pragma unroll
        for (int q = 0; q < kChunks; ++q) {
          const int column = lane + 32 * q;
          part[u][q] =
              (k + u < run && column < half_dim) ? __ldg(src + column) : make_float2(0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (k + u < run) {
#pragma unroll
          for (int q = 0; q < kChunks; ++q) {
            sum[q].x += part[u][q].x;
            sum[q].y += part[u][q].y;
          }
        }
      }
    }
    if (run < 32) break;
  }
  float2* dst = reinterpret_cast<float2*>(out) + static_cast<long long>(row) * half_dim;
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    const int column = lane + 32 * q;
    if (column < half_dim) {
      float2 value = dst[column];
      value.x += sum[q].x;
      value.y += sum[q].y;
      dst[column] = value;
    }
  }
}
