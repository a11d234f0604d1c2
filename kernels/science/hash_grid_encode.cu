// Reference for science/hash_grid_encode: InstantNGP's multiresolution hash encoding forward
// (tiny-cuda-nn HashGrid, trilinear), fp32 positions, fp16 tables and output.
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directive below says (see
// kernels/llm/rms_norm.cu for the conventions). For point n and level l:
//
//   scale = base_resolution * per_level_scale^l - 1, R = ceil(scale) + 1
//   p = x * scale + 0.5, g = floor(p), f = p - g; the 8 corners g + o blended with weights
//   prod_d (o_d ? f_d : 1 - f_d); a corner's entry is its dense index (x + y R + z R^2) when
//   R^3 <= table_size, else its hash (x ^ y * 2654435761 ^ z * 805459861), mod table_size.
//
// Launch plan: one thread per point and group of four levels (one level where num_levels is not a
// multiple of four); the grid's y dimension walks the level groups; 128-thread blocks.
//
// clang-format off
// @launch if (num_levels % 4 == 0) hash_grid_encode_kernel<4><<<dim3(cdiv(num_points, 128), num_levels / 4), 128>>>(out, positions, table, base_resolution, per_level_scale, num_points, num_levels, table_size)
// @launch if (num_levels % 4 != 0) hash_grid_encode_kernel<1><<<dim3(cdiv(num_points, 128), num_levels), 128>>>(out, positions, table, base_resolution, per_level_scale, num_points, num_levels, table_size)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - The op is 8 independent 4-byte gathers per level: all that matters is having many in
//   flight. A thread issues the 8 corner loads of a level together (both features of a corner
//   are one __half2), and levels are taken four at a time (two in the fallback): 32 loads out.
// - Coarse levels (dense, a few thousand cells) live in L1; fine levels are hashed over a
//   2 MiB-per-level table that L2 (50 MiB on the H200) holds for 2^19 entries, so DRAM sees
//   little beyond positions and out. Blocks run in grid order, x (points) fastest, so the
//   points of one level group run together and only its four tables are in use at a time; a
//   thread writes its point's four levels as one 16-byte vector. On the H200 (surface points,
//   bench/results/h200_reference_variants_hash_grid.json) every level in one thread is 0.925x
//   as fast overall (1.17x slower on the 2^21 table), eight levels 0.956x, two 0.896x and one
//   (tiny-cuda-nn's split, 4-byte stores) 0.973x; 256-thread blocks change nothing.
// - scale_l = exp2f(l * log2f(per_level_scale)) * base - 1, as tiny-cuda-nn forms it: exact
//   for a power-of-two per_level_scale, so R_l = ceil(scale_l) + 1 does not flip there.

#include <cuda_fp16.h>

namespace {

constexpr unsigned int kPrimeY = 2654435761u;
constexpr unsigned int kPrimeZ = 805459861u;

// The blended features of one level at position (x, y, z).
__device__ __forceinline__ float2 encode_level(const __half2* __restrict__ level_table, int level,
                                               float x, float y, float z, int base_resolution,
                                               float log2_scale, unsigned int table_size) {
  const float scale = exp2f(level * log2_scale) * static_cast<float>(base_resolution) - 1.0f;
  const unsigned int resolution = static_cast<unsigned int>(ceilf(scale)) + 1u;
  const bool dense = static_cast<unsigned long long>(resolution) * resolution * resolution <=
                     static_cast<unsigned long long>(table_size);
  const unsigned int mask = table_size - 1u;
  const float px = fmaf(x, scale, 0.5f);
  const float py = fmaf(y, scale, 0.5f);
  const float pz = fmaf(z, scale, 0.5f);
  const float gx = floorf(px), gy = floorf(py), gz = floorf(pz);
  const float fx = px - gx, fy = py - gy, fz = pz - gz;
  const unsigned int cx = static_cast<unsigned int>(gx);
  const unsigned int cy = static_cast<unsigned int>(gy);
  const unsigned int cz = static_cast<unsigned int>(gz);

  __half2 corner[8];
#pragma unroll
  for (int o = 0; o < 8; ++o) {
    const unsigned int ix = cx + (o & 1u);
    const unsigned int iy = cy + ((o >> 1) & 1u);
    const unsigned int iz = cz + ((o >> 2) & 1u);
    const unsigned int index = dense ? ix + iy * resolution + iz * resolution * resolution
                                     : ix ^ (iy * kPrimeY) ^ (iz * kPrimeZ);
    corner[o] = level_table[index & mask];
  }
  float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int o = 0; o < 8; ++o) {
    const float w =
        ((o & 1) ? fx : 1.0f - fx) * ((o & 2) ? fy : 1.0f - fy) * ((o & 4) ? fz : 1.0f - fz);
    const float2 v = __half22float2(corner[o]);
    sum.x = fmaf(w, v.x, sum.x);
    sum.y = fmaf(w, v.y, sum.y);
  }
  return sum;
}

}  // namespace

// Levels [blockIdx.y * kLevels, + kLevels) of one point per thread, written 4 levels (16 bytes)
// at a time where num_levels allows, else one level (4 bytes) at a time.
template <int kLevels>
__global__ void __launch_bounds__(128)
    hash_grid_encode_kernel(__half* __restrict__ out, const float* __restrict__ positions,
                            const __half* __restrict__ table, int base_resolution,
                            float per_level_scale, int num_points, int num_levels, int table_size) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= num_points) return;
  const float x = positions[3LL * n];
  const float y = positions[3LL * n + 1];
  const float z = positions[3LL * n + 2];
  const float log2_scale = log2f(per_level_scale);
  const __half2* levels = reinterpret_cast<const __half2*>(table);
  __half2* dst = reinterpret_cast<__half2*>(out) + static_cast<long long>(n) * num_levels;
  const unsigned int size = static_cast<unsigned int>(table_size);
  const int first = static_cast<int>(blockIdx.y) * kLevels;
  const int last = min(first + kLevels, num_levels);

  if (num_levels % 4 == 0 && kLevels % 4 == 0) {
    for (int l = first; l < last; l += 4) {
      uint4 bits;
      __half2* four = reinterpret_cast<__half2*>(&bits);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 v = encode_level(levels + static_cast<long long>(l + k) * table_size, l + k, x,
                                      y, z, base_resolution, log2_scale, size);
        four[k] = __floats2half2_rn(v.x, v.y);
      }
      *reinterpret_cast<uint4*>(dst + l) = bits;
    }
  } else {
#pragma unroll 2
    for (int l = first; l < last; ++l) {
      const float2 v = encode_level(levels + static_cast<long long>(l) * table_size, l, x, y, z,
                                    base_resolution, log2_scale, size);
      dst[l] = __floats2half2_rn(v.x, v.y);
    }
  }
}
