// Reference for edge/depthwise_conv2d: NHWC fp16 depthwise convolution, stride 1, zero padding
// K / 2, bias, fp32 accumulation (PyTorch conv2d(groups=C) on channels_last, cuDNN).
//
// Device code only, compiled by NVRTC for sm_90a and launched as the directives below say (see
// kernels/llm/rms_norm.cu for the conventions):
//
//   out[n, h, w, c] = bias[c] + sum_{i, j < K} weight[c, i, j] * input[n, h + i - K/2, w + j - K/2,
//   c]
//
// Launch plan. A block owns one image's tile of rows (as many rows as make 32 strips of 4
// output columns) and a group of channels: 32 (four 16-byte vectors) when channels is a
// multiple of 8, else 4 single channels. blockIdx.y is the channel group; 128 threads. The block
// stages its channels' filters transposed into shared memory ([tap][channel]: one vector load per
// tap), then each thread computes 4 adjacent output pixels of one channel vector. K is a template
// argument (3, 5 or 7), so every tap loop is unrolled.
//
// clang-format off
// @launch if (channels % 8 == 0 && kernel_size == 3) depthwise_conv2d_kernel<3, 8><<<dim3(batch * cdiv(height, max(1, 32 / cdiv(width, 4))), cdiv(channels, 32)), 128>>>(out, input, weight, bias, batch, height, width, channels)
// @launch if (channels % 8 == 0 && kernel_size == 5) depthwise_conv2d_kernel<5, 8><<<dim3(batch * cdiv(height, max(1, 32 / cdiv(width, 4))), cdiv(channels, 32)), 128>>>(out, input, weight, bias, batch, height, width, channels)
// @launch if (channels % 8 == 0 && kernel_size == 7) depthwise_conv2d_kernel<7, 8><<<dim3(batch * cdiv(height, max(1, 32 / cdiv(width, 4))), cdiv(channels, 32)), 128>>>(out, input, weight, bias, batch, height, width, channels)
// @launch if (channels % 8 != 0 && kernel_size == 3) depthwise_conv2d_kernel<3, 1><<<dim3(batch * cdiv(height, max(1, 32 / cdiv(width, 4))), cdiv(channels, 4)), 128>>>(out, input, weight, bias, batch, height, width, channels)
// @launch if (channels % 8 != 0 && kernel_size == 5) depthwise_conv2d_kernel<5, 1><<<dim3(batch * cdiv(height, max(1, 32 / cdiv(width, 4))), cdiv(channels, 4)), 128>>>(out, input, weight, bias, batch, height, width, channels)
// @launch if (channels % 8 != 0 && kernel_size == 7) depthwise_conv2d_kernel<7, 1><<<dim3(batch * cdiv(height, max(1, 32 / cdiv(width, 4))), cdiv(channels, 4)), 128>>>(out, input, weight, bias, batch, height, width, channels)
// clang-format on
//
// Design notes (why, for whoever optimises this next):
// - At these sizes the op sits between the memory and the fp32 FMA roofs: a 7x7 filter is 49
//   FMAs per output against 4 bytes moved, and the H200's fp32 FMA rate, not its bandwidth,
//   bounds ConvNeXt's stage-1 layer. So the inner loop is FMAs and little else: filters are
//   converted to fp32 once per row of taps and kept in registers, and each input vector loaded
//   serves up to 4 outputs (a strip of 4 columns shares K + 3 input columns per tap row).
// - Input rows are re-read by the K row-neighbours of a tile from L1/L2, not DRAM: a tile's rows
//   are adjacent, so DRAM sees the input about once.
// - The filter layout [C][K][K] (PyTorch's) strides a channel vector's taps by K^2; the block's
//   transpose into shared memory turns each tap of 8 channels into one 16-byte load.
// - Channel groups of 32 divide every production width (96 to 1024) with no idle lanes, and
//   128-thread blocks over tiles of ~32 strips give the 14 x 14 stage hundreds of blocks
//   (with 64-channel groups and 256 threads it had 96 blocks for 132 SMs).
// - The strip width 4 keeps accumulators (32), filters (8 K) and a row's K + 3 raw input
//   vectors in registers.

#include <cuda_fp16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kTileW = 4;         // output columns per thread
constexpr int kGroupVectors = 4;  // channel vectors per block
constexpr int kItemSlots = kThreads / kGroupVectors;

// A pixel's kVec channels as loaded, before conversion (zero-initialised: the padding).
template <int kVec>
struct RawChannels;

template <>
struct RawChannels<8> {
  uint4 bits = make_uint4(0u, 0u, 0u, 0u);
};

template <>
struct RawChannels<4> {
  uint2 bits = make_uint2(0u, 0u);
};

template <>
struct RawChannels<1> {
  __half bits = __ushort_as_half(0);
};

template <int kVec>
__device__ __forceinline__ RawChannels<kVec> load_raw(const __half* src) {
  RawChannels<kVec> raw;
  if constexpr (kVec == 8) {
    raw.bits = *reinterpret_cast<const uint4*>(src);
  } else if constexpr (kVec == 4) {
    raw.bits = *reinterpret_cast<const uint2*>(src);
  } else {
    raw.bits = *src;
  }
  return raw;
}

template <int kVec>
__device__ __forceinline__ void to_floats(float (&x)[kVec], const RawChannels<kVec>& raw) {
  if constexpr (kVec > 1) {
    const __half2* pairs = reinterpret_cast<const __half2*>(&raw.bits);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      const float2 f = __half22float2(pairs[i]);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  } else {
    x[0] = __half2float(raw.bits);
  }
}

template <int kVec>
__device__ __forceinline__ void store_channels(__half* dst, const float (&y)[kVec]) {
  if constexpr (kVec > 1) {
    RawChannels<kVec> raw;
    __half2* pairs = reinterpret_cast<__half2*>(&raw.bits);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) pairs[i] = __floats2half2_rn(y[2 * i], y[2 * i + 1]);
    *reinterpret_cast<decltype(raw.bits)*>(dst) = raw.bits;
  } else {
    *dst = __float2half_rn(y[0]);
  }
}

}  // namespace

template <int K, int kVec>
__global__ void __launch_bounds__(kThreads)
    depthwise_conv2d_kernel(__half* __restrict__ out, const __half* __restrict__ input,
                            const __half* __restrict__ weight, const __half* __restrict__ bias,
                            int batch, int height, int width, int channels) {
  constexpr int kGroupChannels = kGroupVectors * kVec;
  constexpr int kPad = K / 2;
  __shared__ __align__(16) __half filters[K * K][kGroupChannels];
  __shared__ float biases[kGroupChannels];

  const int strips = (width + kTileW - 1) / kTileW;
  const int rows_per_tile = max(1, kItemSlots / strips);
  const int h_tiles = (height + rows_per_tile - 1) / rows_per_tile;
  const int image = blockIdx.x / h_tiles;
  const int h0 = (blockIdx.x % h_tiles) * rows_per_tile;
  const int c_base = blockIdx.y * kGroupChannels;

  for (int i = threadIdx.x; i < kGroupChannels * K * K; i += kThreads) {
    const int c = i / (K * K);
    const int tap = i - c * (K * K);
    const int channel = c_base + c;
    filters[tap][c] = channel < channels ? weight[static_cast<long long>(channel) * K * K + tap]
                                         : __float2half(0.0f);
  }
  for (int c = threadIdx.x; c < kGroupChannels; c += kThreads) {
    biases[c] = c_base + c < channels ? __half2float(bias[c_base + c]) : 0.0f;
  }
  __syncthreads();

  const int vector = threadIdx.x % kGroupVectors;
  const int c0 = c_base + vector * kVec;  // channels % kVec == 0 for the vector path
  if (c0 >= channels || image >= batch) return;
  const int rows = min(rows_per_tile, height - h0);
  const int items = rows * strips;
  const long long row_stride = static_cast<long long>(width) * channels;
  const __half* image_in = input + static_cast<long long>(image) * height * row_stride + c0;
  __half* image_out = out + static_cast<long long>(image) * height * row_stride + c0;

  for (int item = threadIdx.x / kGroupVectors; item < items; item += kItemSlots) {
    const int h = h0 + item / strips;
    const int w0 = (item % strips) * kTileW;
    float acc[kTileW][kVec];
#pragma unroll
    for (int t = 0; t < kTileW; ++t) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[t][e] = biases[vector * kVec + e];
    }
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
      const int ih = h + kh - kPad;
      if (ih < 0 || ih >= height) continue;
      float taps[K][kVec];
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        to_floats<kVec>(taps[kw], load_raw<kVec>(&filters[kh * K + kw][vector * kVec]));
      }
      const __half* in_row = image_in + ih * row_stride;
      // Every input vector of the row is loaded before any is used, so the K + 3 loads of a
      // row are in flight together (the bounds checks would otherwise keep the compiler from
      // hoisting them above the FMAs of the previous columns).
      RawChannels<kVec> raw[kTileW + K - 1];
#pragma unroll
      for (int j = 0; j < kTileW + K - 1; ++j) {
        const int iw = w0 + j - kPad;
        raw[j] = (iw >= 0 && iw < width)
                     ? load_raw<kVec>(in_row + static_cast<long long>(iw) * channels)
                     : RawChannels<kVec>{};
      }
#pragma unroll
      for (int j = 0; j < kTileW + K - 1; ++j) {
        float x[kVec];
        to_floats<kVec>(x, raw[j]);
#pragma unroll
        for (int t = 0; t < kTileW; ++t) {
          const int kw = j - t;
          if (kw >= 0 && kw < K) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[t][e] = fmaf(x[e], taps[kw][e], acc[t][e]);
          }
        }
      }
    }
    __half* out_row = image_out + h * row_stride;
#pragma unroll
    for (int t = 0; t < kTileW; ++t) {
      if (w0 + t < width)
        store_channels<kVec>(out_row + static_cast<long long>(w0 + t) * channels, acc[t]);
    }
  }
}
