// The diffusion/conv2d_3x3 oracle on hand-computed images (padding at every edge, no filter flip,
// the [C_out, 3, 3, C_in] weight layout, channels mixed, the bias) and against a direct
// six-loop convolution on generated cases that cross its pixel and channel blocks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

constexpr const char* kTask = "diffusion/conv2d_3x3";

std::vector<double> convolve(std::int64_t batch, std::int64_t height, std::int64_t width,
                             std::int64_t in_channels, std::int64_t out_channels,
                             std::vector<double> input, std::vector<double> weight,
                             std::vector<double> bias) {
  return oracle_test::call_oracle(
             kTask,
             {{"batch", batch},
              {"height", height},
              {"width", width},
              {"in_channels", in_channels},
              {"out_channels", out_channels}},
             Tensors{
                 {"input",
                  {core::DType::kBF16, {batch, height, width, in_channels}, std::move(input)}},
                 {"weight",
                  {core::DType::kBF16, {out_channels, 3, 3, in_channels}, std::move(weight)}},
                 {"bias", {core::DType::kBF16, {out_channels}, std::move(bias)}},
                 {"out",
                  {core::DType::kBF16,
                   {batch, height, width, out_channels},
                   std::vector<double>(batch * height * width * out_channels, 0.0)}},
             })
      .at("out")
      .values;
}

// Index of weight[o, r, s, c].
std::size_t tap(std::int64_t o, std::int64_t r, std::int64_t s, std::int64_t c,
                std::int64_t in_channels) {
  return static_cast<std::size_t>(((o * 3 + r) * 3 + s) * in_channels + c);
}

// The convolution straight from its definition, one output at a time.
std::vector<double> direct(const Tensors& t, std::int64_t batch, std::int64_t height,
                           std::int64_t width, std::int64_t in_channels,
                           std::int64_t out_channels) {
  const auto& x = t.at("input").values;
  const auto& w = t.at("weight").values;
  const auto& b = t.at("bias").values;
  std::vector<double> out;
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t h = 0; h < height; ++h) {
      for (std::int64_t v = 0; v < width; ++v) {
        for (std::int64_t o = 0; o < out_channels; ++o) {
          double sum = b[o];
          for (std::int64_t r = 0; r < 3; ++r) {
            for (std::int64_t s = 0; s < 3; ++s) {
              const std::int64_t ih = h + r - 1, iw = v + s - 1;
              if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
              for (std::int64_t c = 0; c < in_channels; ++c) {
                sum += w[tap(o, r, s, c, in_channels)] *
                       x[((n * height + ih) * width + iw) * in_channels + c];
              }
            }
          }
          out.push_back(sum);
        }
      }
    }
  }
  return out;
}

void check_against_direct(const std::string& case_name) {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const tasks::Case& c = oracle_test::case_named(task, case_name);
  const Tensors tensors = oracle_test::run_case(task, c);
  const auto want =
      direct(tensors, c.symbols.at("batch"), c.symbols.at("height"), c.symbols.at("width"),
             c.symbols.at("in_channels"), c.symbols.at("out_channels"));
  const auto& got = tensors.at("out").values;
  REQUIRE(got.size() == want.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    wrong += std::abs(got[i] - want[i]) <= 1e-9 * (1.0 + std::abs(want[i])) ? 0 : 1;
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("conv2d_3x3 oracle: one tap of a 3x3 filter shifts the image, zeros past its edges") {
  // One channel in and out, input 1..9 row-major; the filter's only non-zero tap is (0, 2): the
  // row above, the column to the right (cross-correlation: no flip). out[h, w] =
  // input[h - 1, w + 1], 0 where that falls outside, plus bias 0.5.
  std::vector<double> weight(9, 0.0);
  weight[tap(0, 0, 2, 0, 1)] = 1.0;
  const auto out = convolve(1, 3, 3, 1, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9}, weight, {0.5});
  const std::vector<double> want = {0.5, 0.5, 0.5, 2.5, 3.5, 0.5, 5.5, 6.5, 0.5};
  REQUIRE(out.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(out[i] == want[i]);
}

TEST_CASE("conv2d_3x3 oracle: every output channel sums every input channel of its own row") {
  // A 1 x 1 image (only the centre tap sees a pixel), 2 channels in, 3 out:
  // out[o] = bias[o] + sum_c weight[o, 1, 1, c] * input[c]; the other taps multiply padding.
  const std::vector<double> input = {2.0, -3.0};
  std::vector<double> weight(3 * 9 * 2, 100.0);  // off-centre taps: would show if read
  weight[tap(0, 1, 1, 0, 2)] = 1.0;
  weight[tap(0, 1, 1, 1, 2)] = 1.0;
  weight[tap(1, 1, 1, 0, 2)] = 0.5;
  weight[tap(1, 1, 1, 1, 2)] = 0.0;
  weight[tap(2, 1, 1, 0, 2)] = 0.0;
  weight[tap(2, 1, 1, 1, 2)] = -2.0;
  const auto out = convolve(1, 1, 1, 2, 3, input, weight, {0.25, 0.0, -1.0});
  REQUIRE(out.size() == 3);
  CHECK(out[0] == -0.75);  // 2 - 3 + 0.25
  CHECK(out[1] == 1.0);    // 0.5 * 2
  CHECK(out[2] == 5.0);    // -2 * -3 - 1
}

TEST_CASE("conv2d_3x3 oracle: a filter of ones counts the neighbours inside the image") {
  // Two images of 2 x 3 ones (the second scaled by 2), one channel, filter of ones, no bias:
  // an output is the number of its 3x3 neighbours inside the image (corners 4, edges 6 here).
  std::vector<double> input(12, 1.0);
  for (int i = 6; i < 12; ++i) input[i] = 2.0;
  const auto out = convolve(2, 2, 3, 1, 1, input, std::vector<double>(9, 1.0), {0.0});
  const std::vector<double> want = {4, 6, 4, 4, 6, 4, 8, 12, 8, 8, 12, 8};
  REQUIRE(out.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(out[i] == want[i]);
}

TEST_CASE("conv2d_3x3 oracle: matches the direct definition on a tiny odd case") {
  // 45 pixels (two pixel blocks), 7 output channels.
  check_against_direct("h_tiny_odd_out");
}

TEST_CASE("conv2d_3x3 oracle: matches the direct definition across pixel and channel blocks") {
  // 17 x 23 = 391 pixels (12 full blocks of 32 and 7), 320 output channels (two blocks of 128
  // and 64), 320 input channels.
  check_against_direct("h_odd_image");
}
