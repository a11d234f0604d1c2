// expect: incorrect
// task: diffusion/group_norm_silu
// Trick: the output pass handles a group two values at a time (a half2's worth) and looks up
// the channel, with its weight and bias, once per pair: one integer division per two outputs
// instead of one per output. A pair never straddles two channels when height * width is even,
// which holds for every visible case (128 x 128, 64 x 64, 32 x 32) and for every hidden map
// but one, so it is as exact as the example solution there.
// Caught: the hidden case h_odd_spatial_33x47 (H * W = 1551, odd): in each group of 10
// channels the channel borders at odd offsets (1551, 4653, 7755, 10857, 13959) fall inside a
// pair, so the first value of 5 channels a group (160 values in all) takes its left
// neighbour's weight and bias, two draws of std 0.2 each: an error of about 0.2 after SiLU
// against a tolerance of 1e-3 + 2e-3 |out|.
// clang-format off
// @launch group_norm_silu_pairs<<<batch * num_groups, 1024>>>(out, input, weight, bias, epsilon, channels, num_groups, height, width)
// clang-format on

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
  __syncthreads();
  return total;
}

__device__ float silu(float v) { return v / (1.0f + expf(-v)); }

extern "C" __global__ void group_norm_silu_pairs(__half* out, const __half* input,
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

  for (int i = 2 * threadIdx.x; i < count; i += 2 * kThreads) {
    const int c = first_channel + i / hw;  // the pair's channel: that of its first value
    const float w = __half2float(weight[c]) * inv_std;
    const float b = __half2float(bias[c]);
    out[start + i] = __float2half(silu((__half2float(input[start + i]) - mean) * w + b));
    if (i + 1 < count) {
      out[start + i + 1] = __float2half(silu((__half2float(input[start + i + 1]) - mean) * w + b));
    }
  }
}
