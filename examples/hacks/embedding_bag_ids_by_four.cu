// expect: incorrect
// task: recsys/embedding_bag
// Trick: walks a bag's ids four at a time, issuing the four row gathers together so four loads
// are in flight per lane (the op is gather-latency bound), and keeps the one-at-a-time loop
// only for bags shorter than four ids; for longer bags it drops the remainder loop, as if every
// multi-hot size were a multiple of four. DLRMv2's visible groups are 1-, 8- and 100-hot, and
// the hidden 2- and 3-hot bags are shorter than a group, so all of those are summed in full.
// Caught: the hidden cases whose bag length is 4 or more and not a multiple of 4: h_hot_rows
// (27 ids: the last 3 are dropped), h_wide_100_hot (101 ids: the last one) and h_single_sample
// (5 ids: the last one). A dropped row moves a sum by up to its magnitude (rows uniform in
// +-0.0014: about 8e-4 each), against a tolerance of 1e-7 + 1e-5 |out|.
// clang-format off
// @launch embedding_bag_by_four<<<cdiv(batch * num_tables * dim, 256), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// clang-format on

#include <cuda_fp16.h>

extern "C" __global__ void embedding_bag_by_four(float* out, const __half* weights,
                                                 const long long* indices, int batch,
                                                 int num_tables, int num_rows, int dim,
                                                 int pooling) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * num_tables * dim) return;
  const int d = static_cast<int>(i % dim);
  const long long bt = i / dim;  // sample * num_tables + table
  const int table = static_cast<int>(bt % num_tables);
  const long long sample = bt / num_tables;
  const long long* ids = indices + (static_cast<long long>(table) * batch + sample) * pooling;
  const __half* rows = weights + static_cast<long long>(table) * num_rows * dim;
  float sum = 0.0f;
  if (pooling < 4) {
    for (int l = 0; l < pooling; ++l) sum += __half2float(rows[ids[l] * dim + d]);
  } else {
    for (int l = 0; l + 4 <= pooling; l += 4) {
      const float a = __half2float(rows[ids[l] * dim + d]);
      const float b = __half2float(rows[ids[l + 1] * dim + d]);
      const float c = __half2float(rows[ids[l + 2] * dim + d]);
      const float e = __half2float(rows[ids[l + 3] * dim + d]);
      sum += a;
      sum += b;
      sum += c;
      sum += e;
    }
  }
  out[i] = sum;
}
