// The diffusion/group_norm_silu oracle on hand-computed groups and on its own task's values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

Tensors group_norm_silu(std::int64_t batch, std::int64_t channels, std::int64_t groups,
                        std::int64_t height, std::int64_t width, std::vector<double> input,
                        std::vector<double> weight, std::vector<double> bias, double epsilon) {
  const std::int64_t n = batch * channels * height * width;
  return oracle_test::call_oracle(
      "diffusion/group_norm_silu",
      {{"batch", batch},
       {"channels", channels},
       {"num_groups", groups},
       {"height", height},
       {"width", width}},
      Tensors{
          {"input", {core::DType::kF16, {batch, channels, height, width}, std::move(input)}},
          {"weight", {core::DType::kF16, {channels}, std::move(weight)}},
          {"bias", {core::DType::kF16, {channels}, std::move(bias)}},
          {"out", {core::DType::kF16, {batch, channels, height, width}, std::vector<double>(n)}},
      },
      {{"epsilon", epsilon}});
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

TEST_CASE("group_norm_silu oracle: hand-computed groups, statistics over channels and pixels") {
  // One sample, 4 channels of 1 x 2 pixels, 2 groups of 2 channels: group 0 holds (1, 2, 3, 6)
  // (mean 3, variance 3.5), group 1 holds (0, 0, 4, 4) (mean 2, variance 4). Epsilon 0.5 and 0
  // make 1/std exactly 1/2 for both.
  const std::vector<double> input = {1, 2, 3, 6, 0, 0, 4, 4};
  const Tensors a = group_norm_silu(1, 4, 2, 1, 2, input, {1, 2, 1, 1}, {0, 0, 0, 0.5}, 0.5);
  const auto& out = a.at("out").values;
  // Group 1 with epsilon 0.5: 1/std = 1/sqrt(4.5), so it is computed separately.
  const double s1 = 1.0 / std::sqrt(4.5);
  const double channel2 = -2 * s1;       // weight 1, bias 0
  const double channel3 = 2 * s1 + 0.5;  // weight 1, bias 0.5
  CHECK(out[0] == doctest::Approx(silu(-1.0)).epsilon(1e-15));
  CHECK(out[1] == doctest::Approx(silu(-0.5)).epsilon(1e-15));
  CHECK(out[2] == doctest::Approx(silu(0.0 * 2)).epsilon(1e-15));  // channel 1, pixel 0: 0 * 2
  CHECK(out[3] == doctest::Approx(silu(1.5 * 2)).epsilon(1e-15));  // channel 1, pixel 1: 1.5 * 2
  CHECK(out[4] == doctest::Approx(silu(channel2)).epsilon(1e-15));
  CHECK(out[5] == doctest::Approx(silu(channel2)).epsilon(1e-15));
  CHECK(out[6] == doctest::Approx(silu(channel3)).epsilon(1e-15));
  CHECK(out[7] == doctest::Approx(silu(channel3)).epsilon(1e-15));
}

TEST_CASE("group_norm_silu oracle: on a generated case no output is below SiLU's minimum") {
  // SiLU's minimum is -0.27846 (at v = -1.27846); normalised values are positive about half the
  // time.
  const tasks::Task& task = oracle_test::repository_task("diffusion/group_norm_silu");
  const tasks::Case& c = oracle_test::case_named(task, "h_odd_spatial_33x47");
  const Tensors tensors = oracle_test::run_case(task, c);
  const auto& out = tensors.at("out").values;
  std::size_t below = 0;
  std::size_t positive = 0;
  for (const double y : out) {
    below += y < -0.27847 ? 1 : 0;
    positive += y > 0.0 ? 1 : 0;
  }
  CHECK(below == 0);
  // Normalised values with scale ~1 and shift ~0 are positive about half the time.
  CHECK(positive > out.size() * 4 / 10);
  CHECK(positive < out.size() * 6 / 10);
}

TEST_CASE("group_norm_silu oracle: each group is standardised by its own statistics") {
  // Unit weight, zero bias and epsilon 0: every output is SiLU of the value standardised by its
  // group's statistics, recomputed here from the input.
  const std::int64_t channels = 8;
  const std::int64_t groups = 4;
  const std::int64_t hw = 6;
  std::vector<double> input(channels * hw);
  for (std::size_t i = 0; i < input.size(); ++i) {
    input[i] = std::sin(0.7 * static_cast<double>(i)) * 3.0 + static_cast<double>(i % 5);
  }
  const Tensors t =
      group_norm_silu(1, channels, groups, 2, 3, input, std::vector<double>(channels, 1.0),
                      std::vector<double>(channels, 0.0), 0.0);
  const auto& out = t.at("out").values;
  const std::int64_t group_elems = channels / groups * hw;
  for (std::int64_t g = 0; g < groups; ++g) {
    double mean = 0.0;
    for (std::int64_t i = 0; i < group_elems; ++i) mean += input[g * group_elems + i];
    mean /= static_cast<double>(group_elems);
    double var = 0.0;
    for (std::int64_t i = 0; i < group_elems; ++i) {
      var += (input[g * group_elems + i] - mean) * (input[g * group_elems + i] - mean);
    }
    var /= static_cast<double>(group_elems);
    for (std::int64_t i = 0; i < group_elems; ++i) {
      const double v = (input[g * group_elems + i] - mean) / std::sqrt(var);
      CHECK(out[g * group_elems + i] == doctest::Approx(silu(v)).epsilon(1e-12));
    }
  }
}
