// Reference for multimodal/layer_norm: torch.nn.functional.layer_norm with weight and bias on
// bf16 rows, fp32 math, as in the encoder blocks of SigLIP-2, DINOv3 and Qwen2-VL's vision tower.
//
//   mean = sum_j x[t, j] / H,   var = sum_j (x[t, j] - mean)^2 / H
//   out[t, i] = (x[t, i] - mean) * rsqrt(var + epsilon) * weight[i] + bias[i]
//
// for every token t, rounded once to bf16. The variance is the exact two-pass one over the row
// held in registers (not E[x^2] - mean^2, which cancels when the row's mean is large).
//
// Launch plan: one block per token, one warp per 256 elements of the row (at most 512
// threads): 768 -> 96 threads, 1152 -> 160, 4096 -> 512, so each thread holds one 16-byte
// vector and every load of the row is issued before the first reduction.
//
// @launch layer_norm_kernel<<<num_tokens, min(512, cdiv(hidden_size, 256) * 32)>>>(out, input,
//                                  weight, bias, epsilon, hidden_size)
//
// Design notes:
// - Memory bound (about 8 FLOPs per 4 bytes moved): read the row once with 16-byte loads, keep
//   it in registers for the second reduction and for the output, write once. The weight and
//   bias loads are issued with the row's, so their latency overlaps the reductions.
// - Two block sums (the mean, then the centred sum of squares), each with one barrier: warps
//   reduce with shuffles, leaders publish to their own shared array, every warp finishes the
//   reduction itself.
// - Rows wider than the register cache (more than 2 vectors per thread, above 8192 elements)
//   re-read the rest of the row; widths that are not a multiple of 8 take an element-wise path.

#include <cuda_bf16.h>

namespace {

constexpr int kVectorElems = 8;     // bf16 elements per 16-byte vector
constexpr int kCachedVectors = 2;   // vectors per thread kept in registers
constexpr int kMaxThreads = 512;    // largest block of the directive

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

__device__ __forceinline__ uint4 vector_normalize(uint4 x, uint4 w, uint4 b, float mean,
                                                  float inv_std) {
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* bp = reinterpret_cast<const __nv_bfloat162*>(&b);
  uint4 result;
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 xf = __bfloat1622float2(xp[i]);
    const float2 wf = __bfloat1622float2(wp[i]);
    const float2 bf = __bfloat1622float2(bp[i]);
    out[i] = __floats2bfloat162_rn((xf.x - mean) * inv_std * wf.x + bf.x,
                                   (xf.y - mean) * inv_std * wf.y + bf.y);
  }
  return result;
}

}  // namespace

// out, input: [num_tokens, hidden_size]; weight, bias: [hidden_size]; all row-major bf16.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    layer_norm_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                      const __nv_bfloat16* __restrict__ weight,
                      const __nv_bfloat16* __restrict__ bias, float epsilon, int hidden_size) {
  __shared__ float scratch_mean[32];
  __shared__ float scratch_var[32];
  const size_t row_offset = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden_size);
  const __nv_bfloat16* x = input + row_offset;
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
                                     __bfloat162float(weight[i]) +
                                 __bfloat162float(bias[i]));
    }
    return;
  }

  const int num_vectors = hidden_size / kVectorElems;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const uint4* wv = reinterpret_cast<const uint4*>(weight);
  const uint4* bv = reinterpret_cast<const uint4*>(bias);
  uint4* yv = reinterpret_cast<uint4*>(y);

  uint4 cx[kCachedVectors], cw[kCachedVectors], cb[kCachedVectors];
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) {
      cx[i] = xv[v];
      cw[i] = wv[v];
      cb[i] = bv[v];
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
    if (v < num_vectors) yv[v] = vector_normalize(cx[i], cw[i], cb[i], mean, inv_std);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    yv[v] = vector_normalize(xv[v], wv[v], bv[v], mean, inv_std);
  }
}
