// Reference for diffusion/group_norm_silu: GroupNorm with per-channel weight and bias followed
// by SiLU, on NCHW fp16 feature maps with fp32 statistics (the norm + nonlinearity that opens
// both halves of every ResnetBlock2D of SDXL's UNet in diffusers).
//
// For every sample n and group g (channels g * C/G .. (g + 1) * C/G - 1, all their pixels):
//   mean, var = mean and biased variance of the group's C/G * H * W values
//   v = (x - mean) * rsqrt(var + epsilon) * weight[c] + bias[c],   out = v / (1 + exp(-v))
// rounded once to fp16.
//
// Launch plan: two kernels over the same grid, x = 8192-element chunks of a group, y = the
// batch * num_groups groups. The first writes each chunk's count-weighted statistics (mean and
// centred sum of squares) to a workspace; the second merges a group's chunks (Chan's parallel
// formula: exact, no E[x^2] - mean^2 cancellation) and writes the output.
//
// @workspace partials float2[batch * num_groups *
//                            cdiv(channels / num_groups * height * width, 8192)]
// @launch group_norm_stats<<<dim3(cdiv(channels / num_groups * height * width, 8192),
//                               batch * num_groups), 256>>>(input, partials, channels,
//                               num_groups, height, width)
// @launch group_norm_silu_apply<<<dim3(cdiv(channels / num_groups * height * width, 8192),
//                                   batch * num_groups), 256>>>(out, input, weight, bias,
//                                   partials, epsilon, channels, num_groups, height, width)
//
// Design notes:
// - Memory bound. A group of SDXL's highest-resolution level is 10 channels x 128 x 128 = 160k
//   values (320 KiB), and a batch has only 64 groups, so one block per group would leave half
//   the GPU idle: each group is split into chunks of 8192 values (4 16-byte vectors per thread,
//   all loads in flight at once), 1280 blocks for that level.
// - The second kernel re-reads its chunk. It walks the chunks in the reverse of the first
//   kernel's order, so the chunks read last by the statistics pass, still in L2, are consumed
//   first; a feature map under the L2 size (50 MiB) is read from HBM once. The chunk's loads
//   are issued before the group's statistics are merged, so their latency overlaps the merge.
// - In the 16-byte path a vector never straddles two channels (H * W % 8 == 0), so it takes one
//   weight and one bias. Other sizes take an element-wise path (uniform branch).

#include <cuda_fp16.h>

namespace {

constexpr int kThreads = 256;         // must equal the block size of the directives
constexpr int kVectorElems = 8;       // fp16 elements per 16-byte vector
constexpr int kVectorsPerThread = 4;  // a chunk is kThreads * 4 vectors
constexpr int kChunk = kThreads * kVectorsPerThread * kVectorElems;  // 8192, as in the directives

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sum over the block, returned to every thread; `scratch` holds 32 floats and is used once.
__device__ __forceinline__ float block_sum(float value, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  return warp_sum(lane < kThreads / 32 ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float vector_sum(uint4 v) {
  const __half2* pairs = reinterpret_cast<const __half2*>(&v);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 f = __half22float2(pairs[i]);
    sum += f.x + f.y;
  }
  return sum;
}

__device__ __forceinline__ float vector_centred_squares(uint4 v, float mean) {
  const __half2* pairs = reinterpret_cast<const __half2*>(&v);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 f = __half22float2(pairs[i]);
    const float a = f.x - mean;
    const float b = f.y - mean;
    sum += a * a + b * b;
  }
  return sum;
}

__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.0f + __expf(-v)); }

// The group's statistics merged from its chunks' (mean, centred sum of squares): returns the
// mean and writes rsqrt(var + epsilon). Every chunk holds kChunk values but the last.
__device__ __forceinline__ float merge_statistics(const float2* group_partials, int chunks,
                                                  int group_elems, float epsilon,
                                                  float* inv_std, float* scratch_mean,
                                                  float* scratch_var) {
  float weighted = 0.0f;
  for (int j = threadIdx.x; j < chunks; j += kThreads) {
    const int count = min(kChunk, group_elems - j * kChunk);
    weighted += static_cast<float>(count) * group_partials[j].x;
  }
  const float mean = block_sum(weighted, scratch_mean) / static_cast<float>(group_elems);
  float m2 = 0.0f;
  for (int j = threadIdx.x; j < chunks; j += kThreads) {
    const int count = min(kChunk, group_elems - j * kChunk);
    const float2 p = group_partials[j];
    const float d = p.x - mean;
    m2 += p.y + static_cast<float>(count) * d * d;
  }
  *inv_std = rsqrtf(block_sum(m2, scratch_var) / static_cast<float>(group_elems) + epsilon);
  return mean;
}

}  // namespace

// input: [batch, channels, height, width] fp16; partials: one (mean, M2) per chunk of a group.
extern "C" __global__ void __launch_bounds__(kThreads)
    group_norm_stats(const __half* __restrict__ input, float2* __restrict__ partials,
                     int channels, int num_groups, int height, int width) {
  __shared__ float scratch_mean[32];
  __shared__ float scratch_var[32];
  const int hw = height * width;
  const int group_elems = channels / num_groups * hw;
  const int chunk_start = static_cast<int>(blockIdx.x) * kChunk;
  const int count = min(kChunk, group_elems - chunk_start);
  const __half* x = input + static_cast<size_t>(blockIdx.y) * group_elems + chunk_start;

  float mean;
  float m2;
  if (hw % kVectorElems == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const int vectors = count / kVectorElems;
    uint4 cached[kVectorsPerThread];
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if (v < vectors) cached[i] = xv[v];
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      if (threadIdx.x + i * kThreads < vectors) sum += vector_sum(cached[i]);
    }
    mean = block_sum(sum, scratch_mean) / static_cast<float>(count);
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      if (threadIdx.x + i * kThreads < vectors) {
        squares += vector_centred_squares(cached[i], mean);
      }
    }
    m2 = block_sum(squares, scratch_var);
  } else {
    float sum = 0.0f;
    for (int e = threadIdx.x; e < count; e += kThreads) sum += __half2float(x[e]);
    mean = block_sum(sum, scratch_mean) / static_cast<float>(count);
    float squares = 0.0f;
    for (int e = threadIdx.x; e < count; e += kThreads) {
      const float d = __half2float(x[e]) - mean;
      squares += d * d;
    }
    m2 = block_sum(squares, scratch_var);
  }
  if (threadIdx.x == 0) partials[blockIdx.y * gridDim.x + blockIdx.x] = make_float2(mean, m2);
}

// out: like input; weight, bias: [channels] fp16.
extern "C" __global__ void __launch_bounds__(kThreads)
    group_norm_silu_apply(__half* __restrict__ out, const __half* __restrict__ input,
                          const __half* __restrict__ weight, const __half* __restrict__ bias,
                          const float2* __restrict__ partials, float epsilon, int channels,
                          int num_groups, int height, int width) {
  __shared__ float scratch_mean[32];
  __shared__ float scratch_var[32];
  // Reverse of the statistics kernel's block order (see the design notes).
  const unsigned blocks = gridDim.x * gridDim.y;
  const unsigned linear = blocks - 1 - (blockIdx.y * gridDim.x + blockIdx.x);
  const int chunk = static_cast<int>(linear % gridDim.x);
  const int group_index = static_cast<int>(linear / gridDim.x);  // n * num_groups + g

  const int hw = height * width;
  const int channels_per_group = channels / num_groups;
  const int group_elems = channels_per_group * hw;
  const int chunk_start = chunk * kChunk;
  const int count = min(kChunk, group_elems - chunk_start);
  const size_t offset = static_cast<size_t>(group_index) * group_elems + chunk_start;
  const int first_channel = (group_index % num_groups) * channels_per_group;

  if (hw % kVectorElems == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(input + offset);
    uint4* yv = reinterpret_cast<uint4*>(out + offset);
    const int vectors = count / kVectorElems;
    uint4 cached[kVectorsPerThread];
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if (v < vectors) cached[i] = xv[v];
    }
    float inv_std;
    const float mean =
        merge_statistics(partials + static_cast<size_t>(group_index) * gridDim.x, gridDim.x,
                         group_elems, epsilon, &inv_std, scratch_mean, scratch_var);
#pragma unroll
    for (int i = 0; i < kVectorsPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if (v >= vectors) continue;
      const int c = first_channel + (chunk_start + v * kVectorElems) / hw;
      const float scale = inv_std * __half2float(weight[c]);
      const float shift = __half2float(bias[c]) - mean * scale;
      const __half2* xp = reinterpret_cast<const __half2*>(&cached[i]);
      uint4 result;
      __half2* yp = reinterpret_cast<__half2*>(&result);
#pragma unroll
      for (int k = 0; k < kVectorElems / 2; ++k) {
        const float2 f = __half22float2(xp[k]);
        yp[k] = __floats2half2_rn(silu(f.x * scale + shift), silu(f.y * scale + shift));
      }
      yv[v] = result;
    }
    return;
  }

  const __half* x = input + offset;
  __half* y = out + offset;
  float inv_std;
  const float mean =
      merge_statistics(partials + static_cast<size_t>(group_index) * gridDim.x, gridDim.x,
                       group_elems, epsilon, &inv_std, scratch_mean, scratch_var);
  for (int e = threadIdx.x; e < count; e += kThreads) {
    const int c = first_channel + (chunk_start + e) / hw;
    const float v = (__half2float(x[e]) - mean) * inv_std * __half2float(weight[c]) +
                    __half2float(bias[c]);
    y[e] = __float2half_rn(silu(v));
  }
}
