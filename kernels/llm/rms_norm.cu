// Reference for llm/rms_norm: vLLM's rms_norm(out, input, weight, epsilon) on bf16, fp32 math.
//
// This file is both the production reference the server times every candidate against and
// the starting point an agent is shown. It is device code only: NVRTC compiles it for sm_90a
// (C++17, CUDA and CCCL headers only) and the GPU runner launches it as the directive below
// says. There is no host code anywhere in a task: the launches are declared in comments.
//
//   out[t, :] = input[t, :] * rsqrt(mean(input[t, :]^2) + epsilon) * weight[:]
//
// for every token t, with the squares summed and the product formed in fp32 and one rounding
// to bf16 at the end. (vLLM and Hugging Face round the normalised value to bf16 before the
// multiplication by the weight; the difference is within the task's tolerance.)
//
// Launch plan (DESIGN.md section 2). Arguments name the task's tensors (device pointers),
// scalars and shape symbols; grid and block are integer expressions over the shape symbols.
// One block per token. Decode batches get 256 threads per row (4096 / 8 = 512 16-byte vectors,
// two per thread at H = 4096, four at 8192): few rows, so the row's latency is what counts.
// Prefill-sized batches get 128 threads (four vectors each at H = 4096): at 78 registers that
// fits twice as many blocks per SM, so twice the bytes are in flight, which is what a
// bandwidth-bound kernel needs (at 256 threads the H200 reached 3.1 TB/s on 4096 x 4096).
//
// @launch if (num_tokens < 1024) rms_norm_kernel<<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
// @launch if (num_tokens >= 1024) rms_norm_kernel<<<num_tokens, 128>>>(out, input, weight, epsilon, hidden_size)
//
// Design notes (why, for whoever optimises this next):
// - The kernel is memory bound: about 4 FLOPs per 4 bytes moved. All that matters is reading
//   input once, writing out once, and keeping enough loads in flight. Hence 16-byte vector
//   loads and stores (8 bf16 per LDG.128), and a row cache in registers so the second pass
//   does not re-read input from memory.
// - A block-wide sum needs one __syncthreads: each warp reduces with shuffles, warp leaders
//   publish to shared memory, then every warp reduces the (at most 32) partial sums itself,
//   so no second barrier is needed to broadcast the result.
// - Decode (1 to 256 tokens) launches fewer blocks than a split-row design would, but a
//   4096-wide row is only 8 KiB; the launch latency dominates there, not the reduction.

#include <cuda_bf16.h>

namespace {

// bf16 elements per 16-byte vector.
constexpr int kVectorElems = 8;
// Vectors each thread keeps in registers between the two passes: 4 vectors x 8 elements x
// 256 threads = 8192 elements, the largest hidden size in this task. Longer rows still work;
// the part beyond the cache is read twice.
constexpr int kCachedVectors = 4;
// Largest block the kernel is compiled for (the directive launches 256).
constexpr int kMaxThreads = 256;

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sum of `value` over the block, returned to every thread. blockDim.x must be a multiple of
// 32. Call it once per kernel: the shared partial sums are not protected against reuse.
__device__ __forceinline__ float block_sum(float value) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = warp_sum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  return warp_sum(lane < num_warps ? warp_sums[lane] : 0.0f);
}

// Sum of squares of the 8 bf16 values in one vector, in fp32. Vectors go by value: taken by
// reference, a vector read from global memory is loaded as four 4-byte words instead of one
// 16-byte load.
__device__ __forceinline__ float sum_of_squares(uint4 vector) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 v = __bfloat1622float2(pairs[i]);
    sum += v.x * v.x + v.y * v.y;
  }
  return sum;
}

// x * inv_rms * w for 8 elements, rounded once to bf16.
__device__ __forceinline__ uint4 normalize(uint4 x, uint4 w, float inv_rms) {
  const __nv_bfloat162* x_pairs = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* w_pairs = reinterpret_cast<const __nv_bfloat162*>(&w);
  uint4 result;
  __nv_bfloat162* out_pairs = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < kVectorElems / 2; ++i) {
    const float2 xv = __bfloat1622float2(x_pairs[i]);
    const float2 wv = __bfloat1622float2(w_pairs[i]);
    out_pairs[i] = __floats2bfloat162_rn(xv.x * inv_rms * wv.x, xv.y * inv_rms * wv.y);
  }
  return result;
}

}  // namespace

// out, input: [num_tokens, hidden_size] row-major; weight: [hidden_size]. The runner's buffers
// are 256-byte aligned, so rows are 16-byte aligned whenever hidden_size % 8 == 0; other sizes
// take the element-wise path.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    rms_norm_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                    const __nv_bfloat16* __restrict__ weight, float epsilon, int hidden_size) {
  const size_t row_offset = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(hidden_size);
  const __nv_bfloat16* x = input + row_offset;
  __nv_bfloat16* y = out + row_offset;
  const int stride = blockDim.x;

  if (hidden_size % kVectorElems != 0) {
    // Element-wise path for rows that are not whole vectors. The branch is uniform across the
    // block, so the barrier inside block_sum is reached by every thread.
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      const float v = __bfloat162float(x[i]);
      sum += v * v;
    }
    const float inv_rms = rsqrtf(block_sum(sum) / static_cast<float>(hidden_size) + epsilon);
    for (int i = threadIdx.x; i < hidden_size; i += stride) {
      y[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * inv_rms * __bfloat162float(weight[i]));
    }
    return;
  }

  const int num_vectors = hidden_size / kVectorElems;
  const uint4* x_vectors = reinterpret_cast<const uint4*>(x);
  const uint4* w_vectors = reinterpret_cast<const uint4*>(weight);
  uint4* y_vectors = reinterpret_cast<uint4*>(y);

  // Pass 1: load the row (keeping up to kCachedVectors vectors per thread in registers) and
  // accumulate the sum of squares. Thread t handles vectors t, t + stride, t + 2 * stride, ...
  // so consecutive threads touch consecutive 16-byte chunks (coalesced).
  // The weight is loaded here too, not after the reduction: its load then overlaps the input's
  // and the block sum instead of adding a second memory round trip (on a decode row, where
  // the kernel is all latency, that is a third of its time).
  uint4 cached[kCachedVectors];
  uint4 cached_weight[kCachedVectors];
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) {
      cached[i] = x_vectors[v];
      cached_weight[i] = w_vectors[v];
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    if (threadIdx.x + i * stride < num_vectors) sum += sum_of_squares(cached[i]);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    sum += sum_of_squares(x_vectors[v]);
  }

  const float inv_rms = rsqrtf(block_sum(sum) / static_cast<float>(hidden_size) + epsilon);

  // Pass 2: scale by 1/rms and the weight, store 16 bytes at a time.
#pragma unroll
  for (int i = 0; i < kCachedVectors; ++i) {
    const int v = threadIdx.x + i * stride;
    if (v < num_vectors) y_vectors[v] = normalize(cached[i], cached_weight[i], inv_rms);
  }
  for (int v = threadIdx.x + kCachedVectors * stride; v < num_vectors; v += stride) {
    y_vectors[v] = normalize(x_vectors[v], w_vectors[v], inv_rms);
  }
}
