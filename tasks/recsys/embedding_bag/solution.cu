// A correct, deliberately simple solution for recsys/embedding_bag: one thread per output
// element, walking its bag's ids.
//
// Slower than the reference (2-byte loads, every lane re-reading the bag's ids, no loads in
// flight across ids), but right on every shape.
//
// clang-format off
// @launch embedding_bag_simple<<<cdiv(batch * num_tables * dim, 256), 256>>>(out, weights, indices, batch, num_tables, num_rows, dim, pooling)
// clang-format on

#include <cuda_fp16.h>

extern "C" __global__ void embedding_bag_simple(float* out, const __half* weights,
                                                const long long* indices, int batch, int num_tables,
                                                int num_rows, int dim, int pooling) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * num_tables * dim) return;
  const int d = static_cast<int>(i % dim);
  const long long bt = i / dim;  // sample * num_tables + table
  const int table = static_cast<int>(bt % num_tables);
  const long long sample = bt / num_tables;
  const long long* ids = indices + (static_cast<long long>(table) * batch + sample) * pooling;
  const __half* rows = weights + static_cast<long long>(table) * num_rows * dim;
  float sum = 0.0f;
  for (int l = 0; l < pooling; ++l) sum += __half2float(rows[ids[l] * dim + d]);
  out[i] = sum;
}
