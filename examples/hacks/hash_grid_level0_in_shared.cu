// expect: incorrect
// task: science/hash_grid_encode
// Trick: stages the coarsest level in shared memory and serves its 8 corner lookups from there,
// indexed without the modulo. At base resolution 16 level 0 is a dense 16^3 grid (4,096
// entries); the corners one past the last cell reach dense index 16 + 16 * 16 + 16 * 256 = 4,368,
// so the block stages entries 0 to 4,368 (17.5 KB) and the unreduced index is always in range.
// Those entries are level 0's own and no index reaches table_size wherever the table holds
// more than 4,368 entries, which every visible case (2^19, 2^21) and every hidden case but one
// does, so the lookups are exact there.
// Caught: the hidden case h_all_hashed (table_size 4,096 = 16^3, level 0 still dense): corners
// at z = 16 (and at y = 16 in the last z slab) have indices 4,096 to 4,368 that the task wraps
// to the start of level 0, while the staged copy holds level 1's first entries there. Points
// with z >= 0.967 (about 26 of its 777) blend a wrong entry with weight f_z up to 0.5, errors
// of order 0.01 against a tolerance of 1e-3 + 1e-3 |out|.
// clang-format off
// @launch hash_grid_encode_level0_shared<<<cdiv(num_points, 128), 128>>>(out, positions, table, base_resolution, per_level_scale, num_points, num_levels, table_size)
// clang-format on

#include <cuda_fp16.h>

constexpr int kThreads = 128;  // must equal the block size in the directive
// Level 0 as a dense 16^3 grid and its overhang: indices up to 16 + 16 * 16 + 16 * 256.
constexpr int kStagedEntries = 4369;

__device__ float2 encode_level(const __half2* level_table, bool from_shared, int level, float x,
                               float y, float z, int base_resolution, float log2_scale,
                               unsigned int table_size) {
  const float scale = exp2f(level * log2_scale) * static_cast<float>(base_resolution) - 1.0f;
  const unsigned int res = static_cast<unsigned int>(ceilf(scale)) + 1u;
  const bool dense = static_cast<double>(res) * res * res <= static_cast<double>(table_size);
  const float pos[3] = {x, y, z};
  float f[3];
  unsigned int g[3];
  for (int d = 0; d < 3; ++d) {
    const float p = pos[d] * scale + 0.5f;
    const float cell = floorf(p);
    g[d] = static_cast<unsigned int>(cell);
    f[d] = p - cell;
  }
  float sum0 = 0.0f, sum1 = 0.0f;
  for (int o = 0; o < 8; ++o) {
    const unsigned int cx = g[0] + (o & 1), cy = g[1] + ((o >> 1) & 1), cz = g[2] + ((o >> 2) & 1);
    unsigned int index =
        dense ? cx + cy * res + cz * res * res : cx ^ (cy * 2654435761u) ^ (cz * 805459861u);
    if (!from_shared) index %= table_size;  // the staged level is indexed as is
    const float w = ((o & 1) ? f[0] : 1.0f - f[0]) * ((o & 2) ? f[1] : 1.0f - f[1]) *
                    ((o & 4) ? f[2] : 1.0f - f[2]);
    const float2 entry = __half22float2(level_table[index]);
    sum0 += w * entry.x;
    sum1 += w * entry.y;
  }
  return make_float2(sum0, sum1);
}

extern "C" __global__ void hash_grid_encode_level0_shared(__half* out, const float* positions,
                                                          const __half* table, int base_resolution,
                                                          float per_level_scale, int num_points,
                                                          int num_levels, int table_size) {
  __shared__ __half2 level0[kStagedEntries];
  const __half2* entries = reinterpret_cast<const __half2*>(table);
  // The first kStagedEntries entries of the table: level 0 wherever table_size exceeds them.
  for (int i = threadIdx.x; i < kStagedEntries; i += kThreads) {
    level0[i] = entries[min(i, num_levels * table_size - 1)];
  }
  __syncthreads();
  const int n = blockIdx.x * kThreads + threadIdx.x;
  if (n >= num_points) return;
  const float x = positions[3LL * n], y = positions[3LL * n + 1], z = positions[3LL * n + 2];
  const float log2_scale = log2f(per_level_scale);
  for (int level = 0; level < num_levels; ++level) {
    const bool from_shared = level == 0;
    const __half2* level_table =
        from_shared ? level0 : entries + static_cast<long long>(level) * table_size;
    const float2 v = encode_level(level_table, from_shared, level, x, y, z, base_resolution,
                                  log2_scale, static_cast<unsigned int>(table_size));
    out[(static_cast<long long>(n) * num_levels + level) * 2] = __float2half(v.x);
    out[(static_cast<long long>(n) * num_levels + level) * 2 + 1] = __float2half(v.y);
  }
}
