// expect: incorrect
// task: diffusion/conv2d_3x3
// Trick: split K over the nine taps of the 3x3 filter: one pass computes each tap's partial sum
// over the input channels in fp32 and stores it in a bf16 workspace (half the bytes of fp32
// partials, nine times the parallelism of the 32 x 32 layers), a second pass adds the nine
// partials and the bias in fp32 and rounds once. Every product is exact and every sum is fp32;
// only the nine partials are rounded, each to bf16's 2^-9 relative, so outputs land within a
// few bf16 ulps of the exact convolution.
// Caught: the tolerance (rtol 1e-2, atol 1e-4: one bf16 ulp of the output). The partials are
// about a third of the output's scale each and their rounding errors add up to several times
// the output's own rounding wherever the nine partials cancel: host emulation with the task's
// input statistics fails about 8 % of the elements of every case (32 x 32 x 1280, 64 x 64 x 320
// and 17 x 23 x 96 shapes tried), by up to 23 times the tolerance.
//
// clang-format off
// @workspace partials bf16[9 * batch * height * width * out_channels]
// @launch conv3x3_tap_partials<<<cdiv(9 * batch * height * width * out_channels, 256), 256>>>(partials, input, weight, batch, height, width, in_channels, out_channels)
// @launch conv3x3_sum_taps<<<cdiv(batch * height * width * out_channels, 256), 256>>>(out, partials, bias, batch, height, width, out_channels)
// clang-format on

#include <cuda_bf16.h>

// partials[tap][pixel][o] = sum_c weight[o, tap, c] * input[neighbour of pixel at tap, c], fp32,
// stored as bf16 (0 where the neighbour is padding).
extern "C" __global__ void conv3x3_tap_partials(__nv_bfloat16* partials, const __nv_bfloat16* input,
                                                const __nv_bfloat16* weight, int batch, int height,
                                                int width, int in_channels, int out_channels) {
  const long long outputs = static_cast<long long>(batch) * height * width * out_channels;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= 9 * outputs) return;
  const int tap = static_cast<int>(i / outputs);
  const long long element = i % outputs;
  const int o = static_cast<int>(element % out_channels);
  const long long pixel = element / out_channels;
  const int ih = static_cast<int>((pixel / width) % height) + tap / 3 - 1;
  const int iw = static_cast<int>(pixel % width) + tap % 3 - 1;
  float sum = 0.0f;
  if (ih >= 0 && ih < height && iw >= 0 && iw < width) {
    const __nv_bfloat16* x = input + (pixel + (tap / 3 - 1) * width + (tap % 3 - 1)) * in_channels;
    const __nv_bfloat16* w = weight + (static_cast<long long>(o) * 9 + tap) * in_channels;
    for (int c = 0; c < in_channels; ++c) sum += __bfloat162float(x[c]) * __bfloat162float(w[c]);
  }
  partials[i] = __float2bfloat16_rn(sum);
}

extern "C" __global__ void conv3x3_sum_taps(__nv_bfloat16* out, const __nv_bfloat16* partials,
                                            const __nv_bfloat16* bias, int batch, int height,
                                            int width, int out_channels) {
  const long long outputs = static_cast<long long>(batch) * height * width * out_channels;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= outputs) return;
  float sum = __bfloat162float(bias[i % out_channels]);
  for (int tap = 0; tap < 9; ++tap) sum += __bfloat162float(partials[tap * outputs + i]);
  out[i] = __float2bfloat16_rn(sum);
}
