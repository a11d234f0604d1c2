// expect: incorrect
// task: edge/depthwise_conv2d
// Trick: register blocking over pairs of columns: each thread computes the outputs at columns
// w and w + 1 of one channel, loading the K + 1 input columns the two windows share once
// instead of 2K times, and the grid covers width / 2 pairs per row. Every visible feature map
// has an even width (56, 14, 16, 8), so every output is computed exactly as a per-output kernel
// computes it.
// Caught: every hidden case with an odd width: h_odd_image (13 x 17), h_image_smaller_than_kernel
// (3 x 5), h_channels_3_large_values (31 x 9) and h_wide_row (7 x 129): the last column of every
// row is never written, so it keeps the runner's poison (e.g. 3 x 13 x 192 = 7,488 outputs of
// h_odd_image).
// clang-format off
// @launch depthwise_conv2d_column_pairs<<<cdiv(batch * height * (width / 2) * channels, 256), 256>>>(out, input, weight, bias, batch, height, width, channels, kernel_size)
// clang-format on

#include <cuda_fp16.h>

extern "C" __global__ void depthwise_conv2d_column_pairs(__half* out, const __half* input,
                                                         const __half* weight, const __half* bias,
                                                         int batch, int height, int width,
                                                         int channels, int kernel_size) {
  const int pairs = width / 2;  // pairs of columns per row
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(batch) * height * pairs * channels) return;
  const int c = static_cast<int>(i % channels);
  const long long pixel = i / channels;
  const int w = 2 * static_cast<int>(pixel % pairs);  // the pair's left column
  const int h = static_cast<int>((pixel / pairs) % height);
  const long long n = pixel / (static_cast<long long>(pairs) * height);
  const int pad = kernel_size / 2;
  float left = __half2float(bias[c]);
  float right = left;
  for (int kh = 0; kh < kernel_size; ++kh) {
    const int ih = h + kh - pad;
    if (ih < 0 || ih >= height) continue;
    const __half* row = input + (n * height + ih) * width * channels + c;
    const __half* taps = weight + (c * kernel_size + kh) * kernel_size;
    // Input columns w - pad .. w + 1 + pad: column w - pad + j feeds tap j of the left output
    // and tap j - 1 of the right one.
    for (int j = 0; j <= kernel_size; ++j) {
      const int iw = w - pad + j;
      if (iw < 0 || iw >= width) continue;
      const float x = __half2float(row[static_cast<long long>(iw) * channels]);
      if (j < kernel_size) left += x * __half2float(taps[j]);
      if (j > 0) right += x * __half2float(taps[j - 1]);
    }
  }
  const long long left_index = ((n * height + h) * width + w) * channels + c;
  out[left_index] = __float2half(left);
  out[left_index + channels] = __float2half(right);
}
