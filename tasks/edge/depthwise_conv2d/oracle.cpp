// Oracle of edge/depthwise_conv2d: NHWC depthwise convolution, stride 1, zero padding K / 2,
// plus bias, in float64.
#include "tasks/oracle.hpp"

namespace crucible::tasks {
namespace {

core::Status depthwise_conv2d(const OracleCall& call) {
  const OracleTensor& input = call.tensor("input");
  const OracleTensor& weight = call.tensor("weight");
  const OracleTensor& bias = call.tensor("bias");
  OracleTensor& out = call.tensor("out");
  const std::int64_t batch = call.symbol("batch");
  const std::int64_t height = call.symbol("height");
  const std::int64_t width = call.symbol("width");
  const std::int64_t channels = call.symbol("channels");
  const std::int64_t k = call.symbol("kernel_size");
  const std::int64_t pad = k / 2;
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t h = 0; h < height; ++h) {
      for (std::int64_t w = 0; w < width; ++w) {
        double* dst = out.values.data() + ((n * height + h) * width + w) * channels;
        for (std::int64_t c = 0; c < channels; ++c) dst[c] = bias.values[c];
        for (std::int64_t i = 0; i < k; ++i) {
          const std::int64_t ih = h + i - pad;
          if (ih < 0 || ih >= height) continue;
          for (std::int64_t j = 0; j < k; ++j) {
            const std::int64_t iw = w + j - pad;
            if (iw < 0 || iw >= width) continue;
            const double* src = input.values.data() + ((n * height + ih) * width + iw) * channels;
            for (std::int64_t c = 0; c < channels; ++c) {
              dst[c] += weight.values[(c * k + i) * k + j] * src[c];
            }
          }
        }
      }
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("edge/depthwise_conv2d", depthwise_conv2d);

}  // namespace crucible::tasks
