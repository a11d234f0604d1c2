// A correct, deliberately simple solution for diffusion/conv2d_3x3: one thread per output
// element, fp32 sums on CUDA cores, every operand read from global memory.
//
// Consecutive threads take consecutive output channels of one pixel, so a warp reads the same
// input values (broadcast) and 32 weight rows, each walked in order (mostly from L1). No tensor
// cores, no tiling: right on every shape and far slower than the reference.
//
// clang-format off
// @launch conv2d_3x3_simple<<<cdiv(batch * height * width * out_channels, 256), 256>>>(out, input, weight, bias, batch, height, width, in_channels, out_channels)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void conv2d_3x3_simple(__nv_bfloat16* out, const __nv_bfloat16* input,
                                             const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                             int batch, int height, int width, int in_channels,
                                             int out_channels) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * height * width * out_channels) return;
  const int o = static_cast<int>(i % out_channels);
  const long long pixel = i / out_channels;
  const int w = static_cast<int>(pixel % width);
  const int h = static_cast<int>((pixel / width) % height);
  float sum = 0.0f;
  for (int r = 0; r < 3; ++r) {
    const int ih = h + r - 1;
    if (ih < 0 || ih >= height) continue;
    for (int s = 0; s < 3; ++s) {
      const int iw = w + s - 1;
      if (iw < 0 || iw >= width) continue;
      // The neighbour is pixel + (r - 1) * width + (s - 1) of the same image.
      const __nv_bfloat16* x = input + (pixel + (r - 1) * width + (s - 1)) * in_channels;
      const __nv_bfloat16* taps =
          weight + (static_cast<long long>(o) * 9 + r * 3 + s) * in_channels;
      for (int c = 0; c < in_channels; ++c) {
        sum += __bfloat162float(x[c]) * __bfloat162float(taps[c]);
      }
    }
  }
  out[i] = __float2bfloat16_rn(sum + __bfloat162float(bias[o]));
}
