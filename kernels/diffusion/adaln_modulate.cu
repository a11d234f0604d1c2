// Reference for diffusion/adaln_modulate: the adaptive LayerNorm of DiT-family transformers
// (FLUX.1, SD3, DiT): a LayerNorm without affine parameters, then a per-sample scale and shift,
// on bf16 tokens with fp32 math.
//
//   mean = sum_j x[b, s, j] / H,   var = sum_j (x[b, s, j] - mean)^2 / H
//   out[b, s, i] = (x[b, s, i] - mean) * rsqrt(var + epsilon) * (1 + scale[b, i]) + shift[b, i]
//
// rounded once to bf16. The variance is the exact two-pass one over the row held in registers.
//
// Launch plan: one block per token row (batch * seq_len of them), one warp per 256 elements of
// the row, at most 512 threads (3072 -> 384 threads, one 16-byte vector each).
//
// @launch adaln_modulate_kernel<<<batch * seq_len, min(512, cdiv(hidden_size, 256) * 32)>>>(
//             out, input, scale, shift, epsilon, seq_len, hidden_size)
//
// Design notes:
// - Memory bound: read the row once with 16-byte loads, keep it in registers for the centred
//   sum of squares and for the output, write once. The sample's scale and shift rows (the same
//   for every token of a sample, so L2-resident after the first block) are loaded with the row.
// - Two block sums, each with one barrier (warp shuffles, leaders publish to their own shared
//   array, every warp finishes the sum itself).
// - Rows wider than the register cache (above 8192 elements) re-read the rest of the row;
//   widths that are not a multiple of 8 take an element-wise path.

#include <cuda_bf16.h>

namespace {

constexpr int kVectorElems = 8;    // bf16 elements per 16-byte vector
constexpr int kCachedVectors = 2;  // vectors per thread kept in registers
constexpr int kMaxThreads = 512;   // largest block of the directive

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
  return warp_sum(lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float vector_sum(uint4 v) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    sum += f.x + f.y;
  }
  return sum;
}

__device__ __forceinline__ float vector_centred_squares(uint4 v, float mean) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    const float a = f.x - mean;
    const float b = f.y - mean;
    sum += a * a + b * b;
  }
  return sum;
}

// (x - mean) * inv_std * (1 + scale) + shift for 8 elements, rounded once to bf16.
__device__ __forceinline__ uint4 vector_modulate(uint4 x, uint4 scale, uint4 shift, float mean,
                                                 float inv_std) {
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* sp = reinterpret_cast<const __nv_bfloat162*>(&scale);
  const __nv_bfloat162* hp = reinterpret_cast<const __nv_bfloat162*>(&shift);
  uint4 result;
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 xf = __bfloat1622float2(xp[i]);
    const float2 sf = __bfloat1622float2(sp[i]);
    const float2 hf = __bfloat1622float2(hp[i]);
    out[i] = __floats2bfloat162_rn((xf.x - mean) * inv_std * (1.0f + sf.x) + hf.x,
                                   (xf.y - mean) * inv_std * (1.0f + sf.y) + hf.y);
  }
  return result;
}

}  // namespace

// out, input: [batch, seq_len, hidden_size]; scale, shift: [batch, hidden_size]; row-major bf16.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    adaln_modulate_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                          const __nv_bfloat16* __restrict__ scale,
                          const __nv_bfloat16* __restrict__ shift, float epsilon, int seq_len,
                          int hidden_size) {
  __shared__ float scratch_mean[32];
  __shared__ float scratch_var[32];
  const size_t row_offset = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden_size);
  const size_t sample_offset =
      static_cast<size_t>(blockIdx.x / static_cast<unsigned>(seq_len)) * hidden_size;
  const __nv_bfloat16* x = input + row_offset;
  const __nv_bfloat16* sc = scale + sample_offset;
  const __nv_bfloat16* sh = shift + sample_offset;
  __nv_bfloat16* y = out + row_offset;
  const int stride = blockDim.x;
  const float inv_hidden = 1.0f / static_cast<float>(hidden_size);

  if (hidden_size % kVectorElems != 0) {
    // Element-wise path (uniform branch): the row is read three times, from L1/L2 after the
    // first.
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += stride) sum += __bfloat162float(x[i]);
    const float mean = block_sum(sum, scratch_mean) * inv_hidden;
    float squares = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      const float d = __bfloat162float(x[i]) - mean;
      squares += d * d;
    }
    const float inv_std = rsqrtf(block_sum(squares, scratch_var) * inv_hidden + epsilon);
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      y[i] = __float2bfloat16_rn((__bfloat162float(x[i]) - mean) * inv_std *
                                     (1.0f + __bfloat162float(sc[i])) +
                                 __bfloat162float(sh[i]));
    }
    return;
  }

  const int num_vectors = hidden_size / kVectorElems;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const uint4* scv = reinterpret_cast<const uint4*>(sc);
  const uint4* shv = reinterpret_cast<const uint4*>(sh);
  uint4* yv = reinterpret_cast<uint4*>(y);

  uint4 cx[kCachedVectors], cs[kCachedVectors], ch[kCachedVectors];
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) {
      cx[i] = xv[v];
      cs[i] = scv[v];
      ch[i] = shv[v];
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    if (threadIdx.x + i * stride < num_vectors) sum += vector_sum(cx[i]);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    sum += vector_sum(xv[v]);
  }
  const float mean = block_sum(sum, scratch_mean) * inv_hidden;

  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    if (threadIdx.x + i * stride < num_vectors) squares += vector_centred_squares(cx[i], mean);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    squares += vector_centred_squares(xv[v], mean);
  }
  const float inv_std = rsqrtf(block_sum(squares, scratch_var) * inv_hidden + epsilon);

#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) yv[v] = vector_modulate(cx[i], cs[i], ch[i], mean, inv_std);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    yv[v] = vector_modulate(xv[v], scv[v], shv[v], mean, inv_std);
  }
}
