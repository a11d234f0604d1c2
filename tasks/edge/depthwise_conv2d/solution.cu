// A correct, deliberately simple solution for edge/depthwise_conv2d: one thread per output
// element, every tap read from global memory.
//
// Slower than the reference (2-byte loads, each input element re-read by K^2 threads, the
// filter re-read per output), but right on every shape.
//
// clang-format off
// @launch depthwise_conv2d_simple<<<cdiv(batch * height * width * channels, 256), 256>>>(out, input, weight, bias, batch, height, width, channels, kernel_size)
// clang-format on

#include <cuda_fp16.h>

extern "C" __global__ void depthwise_conv2d_simple(__half* out, const __half* input,
                                                   const __half* weight, const __half* bias,
                                                   int batch, int height, int width, int channels,
                                                   int kernel_size) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * height * width * channels) return;
  const int c = static_cast<int>(i % channels);
  const long long pixel = i / channels;
  const int w = static_cast<int>(pixel % width);
  const int h = static_cast<int>((pixel / width) % height);
  const long long n = pixel / (static_cast<long long>(width) * height);
  const int pad = kernel_size / 2;
  float sum = __half2float(bias[c]);
  for (int kh = 0; kh < kernel_size; ++kh) {
    const int ih = h + kh - pad;
    if (ih < 0 || ih >= height) continue;
    for (int kw = 0; kw < kernel_size; ++kw) {
      const int iw = w + kw - pad;
      if (iw < 0 || iw >= width) continue;
      const float x = __half2float(input[((n * height + ih) * width + iw) * channels + c]);
      sum += x * __half2float(weight[(c * kernel_size + kh) * kernel_size + kw]);
    }
  }
  out[i] = __float2half(sum);
}
