// A correct, deliberately simple solution for science/hash_grid_encode: one thread per point
// and level, each corner fetched and blended in turn.
//
// Slower than the reference (one 2-byte load per feature, corners loaded one after the other,
// a point's output written as scattered 2-byte stores), but right on every shape.
//
// clang-format off
// @launch hash_grid_encode_simple<<<cdiv(num_points * num_levels, 256), 256>>>(out, positions, table, base_resolution, per_level_scale, num_points, num_levels, table_size)
// clang-format on

#include <cuda_fp16.h>

extern "C" __global__ void hash_grid_encode_simple(__half* out, const float* positions,
                                                   const __half* table, int base_resolution,
                                                   float per_level_scale, int num_points,
                                                   int num_levels, int table_size) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(num_points) * num_levels) return;
  const long long n = i / num_levels;
  const int level = static_cast<int>(i % num_levels);
  const float scale = exp2f(level * log2f(per_level_scale)) * base_resolution - 1.0f;
  const unsigned int res = static_cast<unsigned int>(ceilf(scale)) + 1u;
  const bool dense = static_cast<double>(res) * res * res <= static_cast<double>(table_size);
  float p[3];
  unsigned int g[3];
  for (int d = 0; d < 3; ++d) {
    p[d] = positions[n * 3 + d] * scale + 0.5f;
    g[d] = static_cast<unsigned int>(floorf(p[d]));
    p[d] -= floorf(p[d]);
  }
  float sum0 = 0.0f, sum1 = 0.0f;
  for (int o = 0; o < 8; ++o) {
    const unsigned int x = g[0] + (o & 1), y = g[1] + ((o >> 1) & 1), z = g[2] + ((o >> 2) & 1);
    const unsigned int index =
        dense ? x + y * res + z * res * res : x ^ (y * 2654435761u) ^ (z * 805459861u);
    const long long entry =
        static_cast<long long>(level) * table_size + index % static_cast<unsigned int>(table_size);
    const float w = ((o & 1) ? p[0] : 1.0f - p[0]) * ((o & 2) ? p[1] : 1.0f - p[1]) *
                    ((o & 4) ? p[2] : 1.0f - p[2]);
    sum0 += w * __half2float(table[entry * 2]);
    sum1 += w * __half2float(table[entry * 2 + 1]);
  }
  out[i * 2] = __float2half(sum0);
  out[i * 2 + 1] = __float2half(sum1);
}
