// Oracle of diffusion/conv2d_3x3: NHWC 3x3 convolution, stride 1, zero padding 1, plus bias, in
// float64.
#include "tasks/oracle.hpp"

#include <algorithm>
#include <vector>

namespace crucible::tasks {
namespace {

// Pixels and output channels per block of accumulators: 32 x 128 doubles (32 KiB) stay in
// cache while the K loop streams the transposed weight, each of its rows read once per block of
// pixels. The visible cases are 3e10 multiply-adds each; this order lets the compiler
// vectorise the innermost loop over output channels.
constexpr std::int64_t kPixelBlock = 32;
constexpr std::int64_t kChannelBlock = 128;

// acc[o] += value * row[o] for a whole channel block: a fixed trip count over pointers that do
// not alias, which the compiler vectorises.
void accumulate_row(double* __restrict acc, double value, const double* __restrict row) {
  for (std::int64_t o = 0; o < kChannelBlock; ++o) acc[o] += value * row[o];
}

core::Status conv2d_3x3(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& bias = call.tensor("bias");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t height = call.symbol("height");
  const std::int64_t width = call.symbol("width");
  const std::int64_t in_channels = call.symbol("in_channels");
  const std::int64_t out_channels = call.symbol("out_channels");
  const std::int64_t taps_k = 9 * in_channels;  // K: (tap r, tap s, channel)
  const std::int64_t pixels = batch * height * width;

  // weight [o][k] -> transposed [k][o'], o' padded with zeros to whole channel blocks, so that
  // one input value scales a contiguous row of a fixed length.
  const std::int64_t padded_channels =
      (out_channels + kChannelBlock - 1) / kChannelBlock * kChannelBlock;
  std::vector<double> transposed(static_cast<std::size_t>(taps_k * padded_channels), 0.0);
  for (std::int64_t o = 0; o < out_channels; ++o) {
    for (std::int64_t k = 0; k < taps_k; ++k) {
      transposed[k * padded_channels + o] = weight.values[o * taps_k + k];
    }
  }

  std::vector<double> acc(static_cast<std::size_t>(kPixelBlock * kChannelBlock));
  std::vector<const double*> neighbour(static_cast<std::size_t>(kPixelBlock));
  for (std::int64_t p0 = 0; p0 < pixels; p0 += kPixelBlock) {
    const std::int64_t block_pixels = std::min(kPixelBlock, pixels - p0);
    for (std::int64_t o0 = 0; o0 < out_channels; o0 += kChannelBlock) {
      const std::int64_t block_channels = std::min(kChannelBlock, out_channels - o0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t r = 0; r < 3; ++r) {
        for (std::int64_t s = 0; s < 3; ++s) {
          // Each pixel's neighbour at tap (r, s), or null where it is padding.
          for (std::int64_t p = 0; p < block_pixels; ++p) {
            const std::int64_t pixel = p0 + p;
            const std::int64_t ih = pixel / width % height + r - 1;
            const std::int64_t iw = pixel % width + s - 1;
            neighbour[p] =
                ih < 0 || ih >= height || iw < 0 || iw >= width
                    ? nullptr
                    : input.values.data() + (pixel + (r - 1) * width + (s - 1)) * in_channels;
          }
          const double* const taps =
              transposed.data() + (r * 3 + s) * in_channels * padded_channels + o0;
          for (std::int64_t c = 0; c < in_channels; ++c) {
            for (std::int64_t p = 0; p < block_pixels; ++p) {
              if (neighbour[p] == nullptr) continue;
              accumulate_row(acc.data() + p * kChannelBlock, neighbour[p][c],
                             taps + c * padded_channels);
            }
          }
        }
      }
      for (std::int64_t p = 0; p < block_pixels; ++p) {
        double* const dst = out.values.data() + (p0 + p) * out_channels + o0;
        for (std::int64_t o = 0; o < block_channels; ++o) {
          dst[o] = bias.values[o0 + o] + acc[p * kChannelBlock + o];
        }
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("diffusion/conv2d_3x3", conv2d_3x3);

}  // namespace crucible::tasks
