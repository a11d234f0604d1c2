// The edge/depthwise_conv2d oracle on hand-computed images: padding at every edge, the filter's
// orientation (no flip: cross-correlation, as conv2d), channels kept apart, the bias.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

std::vector<double> convolve(std::int64_t height, std::int64_t width, std::int64_t channels,
                             std::int64_t k, std::vector<double> input, std::vector<double> weight,
                             std::vector<double> bias) {
  return oracle_test::call_oracle(
             "edge/depthwise_conv2d",
             {{"batch", 1},
              {"height", height},
              {"width", width},
              {"channels", channels},
              {"kernel_size", k}},
             Tensors{
                 {"input", {core::DType::kF16, {1, height, width, channels}, std::move(input)}},
                 {"weight", {core::DType::kF16, {channels, k, k}, std::move(weight)}},
                 {"bias", {core::DType::kF16, {channels}, std::move(bias)}},
                 {"out",
                  {core::DType::kF16,
                   {1, height, width, channels},
                   std::vector<double>(height * width * channels, 0.0)}},
             })
      .at("out")
      .values;
}

}  // namespace

TEST_CASE("depthwise_conv2d oracle: a 3x3 filter over a 3x3 image, zero padding at the edges") {
  // One channel, input 1..9 row-major; filter with a single 1 at tap (0, 2) (row above, column
  // to the right): out[h, w] = input[h - 1, w + 1], 0 where that falls outside, plus bias 0.5.
  std::vector<double> input = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<double> weight(9, 0.0);
  weight[2] = 1.0;
  const auto out = convolve(3, 3, 1, 3, input, weight, {0.5});
  const std::vector<double> want = {0.5, 0.5, 0.5, 2.5, 3.5, 0.5, 5.5, 6.5, 0.5};
  REQUIRE(out.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(out[i] == want[i]);
}

TEST_CASE("depthwise_conv2d oracle: channels do not mix, each has its own filter") {
  // Two channels on a 1 x 2 image with K = 3: channel 0 sums its row neighbourhood (filter of
  // ones), channel 1 takes only the centre tap times 3.
  std::vector<double> input = {1, 10, 2, 20};  // pixel 0: (1, 10), pixel 1: (2, 20)
  std::vector<double> weight(18, 0.0);
  for (int t = 0; t < 9; ++t) weight[t] = 1.0;
  weight[9 + 4] = 3.0;
  const auto out = convolve(1, 2, 2, 3, input, weight, {0.0, -1.0});
  CHECK(out[0] == 3.0);   // 1 + 2
  CHECK(out[1] == 29.0);  // 3 * 10 - 1
  CHECK(out[2] == 3.0);
  CHECK(out[3] == 59.0);
}

TEST_CASE("depthwise_conv2d oracle: a 7x7 filter on an image smaller than it sees every pixel") {
  // 3 x 5 image, K = 7: every tap within 3 of the centre; a filter of ones sums the whole image
  // at the centre pixel (1, 2), and the corner (0, 0) reaches rows 0..2 and columns 0..3.
  const std::int64_t h = 3, w = 5;
  std::vector<double> input(h * w);
  for (std::int64_t i = 0; i < h * w; ++i) input[i] = static_cast<double>(i);
  const auto out = convolve(h, w, 1, 7, input, std::vector<double>(49, 1.0), {0.0});
  CHECK(out[1 * w + 2] == 105.0);  // 0 + 1 + ... + 14
  double corner = 0.0;
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t c = 0; c < 4; ++c) corner += input[r * w + c];
  }
  CHECK(out[0] == corner);
}

TEST_CASE("depthwise_conv2d oracle: on a generated case, linear in the input") {
  // Running the oracle on 2 x input minus the bias term must double the bias-free response.
  const tasks::Task& task = oracle_test::repository_task("edge/depthwise_conv2d");
  const tasks::Case& c = oracle_test::case_named(task, "h_odd_image");
  Tensors tensors = oracle_test::run_case(task, c);
  const std::vector<double> first = tensors.at("out").values;
  for (double& v : tensors.at("input").values) v *= 2.0;
  for (double& v : tensors.at("out").values) v = 0.0;
  const auto* oracle = tasks::find_oracle("edge/depthwise_conv2d");
  REQUIRE(oracle != nullptr);
  REQUIRE((*oracle)(tasks::OracleCall{task, c, tensors}).ok());
  const auto& second = tensors.at("out").values;
  const auto& bias = tensors.at("bias").values;
  const std::int64_t channels = 192;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    const double b = bias[i % channels];
    wrong += std::abs((second[i] - b) - 2.0 * (first[i] - b)) <= 1e-12 ? 0 : 1;
  }
  CHECK(wrong == 0);
  CHECK(first.size() == static_cast<std::size_t>(3 * 13 * 17 * channels));
}
