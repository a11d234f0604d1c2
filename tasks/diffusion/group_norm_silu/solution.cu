// A correct, deliberately simple solution for diffusion/group_norm_silu: one block per group
// of a sample, scalar loads, the group read three times (sum, centred squares, output).
//
// Slower than the reference (2-byte loads, 64 blocks for SDXL's batch of 2 x 32 groups, most
// of the GPU idle), but right on every shape.
//
// @launch group_norm_silu_simple<<<batch * num_groups, 1024>>>(out, input, weight, bias, epsilon,
//                                    channels, num_groups, height, width)

#include <cuda_fp16.h>

constexpr int kThreads = 1024;  // must equal the block size in the directive

__device__ float block_tree_sum(float value, float* partial) {
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();  // partial is reused by the next sum
  return total;
}

extern "C" __global__ void group_norm_silu_simple(__half* out, const __half* input,
                                                  const __half* weight, const __half* bias,
                                                  float epsilon, int channels, int num_groups,
                                                  int height, int width) {
  __shared__ float partial[kThreads];
  const int hw = height * width;
  const int per_group = channels / num_groups;
  const int count = per_group * hw;
  const size_t start = static_cast<size_t>(blockIdx.x) * count;
  const int first_channel = (blockIdx.x % num_groups) * per_group;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < count; i += kThreads) sum += __half2float(input[start + i]);
  const float mean = block_tree_sum(sum, partial) / count;

  float squares = 0.0f;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float d = __half2float(input[start + i]) - mean;
    squares += d * d;
  }
  const float inv_std = rsqrtf(block_tree_sum(squares, partial) / count + epsilon);

  for (int i = threadIdx.x; i < count; i += kThreads) {
    const int c = first_channel + i / hw;
    const float v = (__half2float(input[start + i]) - mean) * inv_std * __half2float(weight[c]) +
                    __half2float(bias[c]);
    out[start + i] = __float2half(v / (1.0f + expf(-v)));
  }
}
