// The diffusion/attention oracle on hand-computed attention, its layout ([batch, seq_len,
// num_heads, 128]: samples and heads never mix), its invariances, large scores, and its threaded
// path; and the manifest's contract.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "diffusion/attention";
constexpr std::int64_t kD = 128;

struct Inputs {
  std::int64_t batch, seq_len, heads;
  std::vector<double> query, key, value;
};

std::size_t at(const Inputs& x, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  return static_cast<std::size_t>(((b * x.seq_len + s) * x.heads + h) * kD + d);
}

Inputs zeros(std::int64_t batch, std::int64_t seq_len, std::int64_t heads) {
  const auto n = static_cast<std::size_t>(batch * seq_len * heads * kD);
  return {batch,
          seq_len,
          heads,
          std::vector<double>(n),
          std::vector<double>(n),
          std::vector<double>(n)};
}

// A deterministic spread of values (no generator needed), distinct per tensor.
Inputs filled(std::int64_t batch, std::int64_t seq_len, std::int64_t heads) {
  Inputs x = zeros(batch, seq_len, heads);
  for (std::size_t i = 0; i < x.query.size(); ++i) {
    x.query[i] = std::sin(0.37 * static_cast<double>(i)) * 2.0;
    x.key[i] = std::cos(0.91 * static_cast<double>(i) + 0.3);
    x.value[i] = std::sin(1.73 * static_cast<double>(i) + 1.1);
  }
  return x;
}

std::vector<double> attend(const Inputs& x, double scale) {
  const std::vector<std::int64_t> shape{x.batch, x.seq_len, x.heads, kD};
  oracle_test::Tensors tensors{
      {"out", {core::DType::kBF16, shape, std::vector<double>(x.query.size())}},
      {"query", {core::DType::kBF16, shape, x.query}},
      {"key", {core::DType::kBF16, shape, x.key}},
      {"value", {core::DType::kBF16, shape, x.value}},
  };
  return oracle_test::call_oracle(
             kTask, {{"batch", x.batch}, {"seq_len", x.seq_len}, {"num_heads", x.heads}},
             std::move(tensors), {{"scale", scale}})
      .at("out")
      .values;
}

// Attention of one output row computed directly from the formula, for the threaded-path test.
std::vector<double> row_direct(const Inputs& x, std::int64_t b, std::int64_t i, std::int64_t h,
                               double scale) {
  std::vector<double> scores(static_cast<std::size_t>(x.seq_len));
  for (std::int64_t j = 0; j < x.seq_len; ++j) {
    double dot = 0.0;
    for (std::int64_t d = 0; d < kD; ++d)
      dot += x.query[at(x, b, i, h, d)] * x.key[at(x, b, j, h, d)];
    scores[static_cast<std::size_t>(j)] = scale * dot;
  }
  double top = scores[0];
  for (const double s : scores) top = std::max(top, s);
  double total = 0.0;
  for (auto& s : scores) total += (s = std::exp(s - top));
  std::vector<double> y(kD, 0.0);
  for (std::int64_t j = 0; j < x.seq_len; ++j) {
    for (std::int64_t d = 0; d < kD; ++d) {
      y[static_cast<std::size_t>(d)] +=
          scores[static_cast<std::size_t>(j)] / total * x.value[at(x, b, j, h, d)];
    }
  }
  return y;
}

}  // namespace

TEST_CASE("attention oracle: two keys weighted by the softmax of their scaled scores") {
  // One head, three tokens. Query of token 0 is (2, 0, ...); keys (1, 0, ...), (0, 1, ...),
  // (-1, 0, ...) give scores 2, 0, -2 at scale 1; values carry 1, 10, 100 in dimension 0 and
  // the token index in dimension 5.
  Inputs x = zeros(1, 3, 1);
  x.query[at(x, 0, 0, 0, 0)] = 2.0;
  x.key[at(x, 0, 0, 0, 0)] = 1.0;
  x.key[at(x, 0, 1, 0, 1)] = 1.0;
  x.key[at(x, 0, 2, 0, 0)] = -1.0;
  const double v0[3] = {1, 10, 100};
  for (std::int64_t j = 0; j < 3; ++j) {
    x.value[at(x, 0, j, 0, 0)] = v0[j];
    x.value[at(x, 0, j, 0, 5)] = static_cast<double>(j);
  }
  const auto out = attend(x, 1.0);
  const double e2 = std::exp(2.0), em2 = std::exp(-2.0), total = e2 + 1.0 + em2;
  CHECK(out[at(x, 0, 0, 0, 0)] ==
        doctest::Approx((e2 * 1 + 10 + em2 * 100) / total).epsilon(1e-14));
  CHECK(out[at(x, 0, 0, 0, 5)] == doctest::Approx((1.0 + 2 * em2) / total).epsilon(1e-14));
  CHECK(out[at(x, 0, 0, 0, 1)] == 0.0);
  // Tokens 1 and 2 have a zero query: every score 0, the mean of the values.
  CHECK(out[at(x, 0, 1, 0, 0)] == doctest::Approx(37.0).epsilon(1e-14));
  CHECK(out[at(x, 0, 2, 0, 5)] == doctest::Approx(1.0).epsilon(1e-14));
  // The scale multiplies the scores: at scale 0.5 they are 1, 0, -1.
  const auto half = attend(x, 0.5);
  const double e1 = std::exp(1.0), em1 = std::exp(-1.0);
  CHECK(half[at(x, 0, 0, 0, 0)] ==
        doctest::Approx((e1 + 10 + em1 * 100) / (e1 + 1 + em1)).epsilon(1e-14));
}

TEST_CASE("attention oracle: a sequence of one token returns its value, per sample and head") {
  Inputs x = filled(3, 1, 2);
  const auto out = attend(x, 0.0883883);
  for (std::size_t i = 0; i < out.size(); ++i)
    CHECK(out[i] == doctest::Approx(x.value[i]).epsilon(1e-14));
}

TEST_CASE("attention oracle: samples and heads do not mix, tokens are [batch, seq, head, dim]") {
  // Changing the keys and values of sample 1 (every head) and of head 0 of sample 0 leaves
  // head 1 of sample 0 exactly as it was.
  Inputs x = filled(2, 9, 3);
  const auto before = attend(x, 0.3);
  Inputs y = x;
  for (std::int64_t s = 0; s < 9; ++s) {
    for (std::int64_t d = 0; d < kD; ++d) {
      for (std::int64_t h = 0; h < 3; ++h) {
        y.key[at(y, 1, s, h, d)] += 1.5;
        y.value[at(y, 1, s, h, d)] *= -3.0;
      }
      y.key[at(y, 0, s, 0, d)] *= 0.25;
      y.value[at(y, 0, s, 0, d)] += 7.0;
    }
  }
  const auto after = attend(y, 0.3);
  std::size_t changed_elsewhere = 0;
  for (std::int64_t s = 0; s < 9; ++s) {
    for (std::int64_t d = 0; d < kD; ++d) {
      CHECK(after[at(x, 0, s, 1, d)] == before[at(x, 0, s, 1, d)]);
      CHECK(after[at(x, 0, s, 2, d)] == before[at(x, 0, s, 2, d)]);
      changed_elsewhere += after[at(x, 0, s, 0, d)] != before[at(x, 0, s, 0, d)];
      changed_elsewhere += after[at(x, 1, s, 2, d)] != before[at(x, 1, s, 2, d)];
    }
  }
  CHECK(changed_elsewhere == 2 * 9 * kD);
}

TEST_CASE(
    "attention oracle: reordering key-value tokens changes nothing, reordering queries "
    "reorders rows") {
  Inputs x = filled(1, 7, 2);
  const auto out = attend(x, 0.2);
  // Token order reversed in keys and values only.
  Inputs kv = x;
  for (std::int64_t s = 0; s < 7; ++s) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t d = 0; d < kD; ++d) {
        kv.key[at(kv, 0, s, h, d)] = x.key[at(x, 0, 6 - s, h, d)];
        kv.value[at(kv, 0, s, h, d)] = x.value[at(x, 0, 6 - s, h, d)];
      }
    }
  }
  const auto same = attend(kv, 0.2);
  for (std::size_t i = 0; i < out.size(); ++i)
    CHECK(same[i] == doctest::Approx(out[i]).epsilon(1e-12));
  // Queries reversed: rows reversed.
  Inputs q = x;
  for (std::int64_t s = 0; s < 7; ++s) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t d = 0; d < kD; ++d)
        q.query[at(q, 0, s, h, d)] = x.query[at(x, 0, 6 - s, h, d)];
    }
  }
  const auto reversed = attend(q, 0.2);
  for (std::int64_t s = 0; s < 7; ++s) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t d = 0; d < kD; ++d) {
        CHECK(reversed[at(x, 0, s, h, d)] == out[at(x, 0, 6 - s, h, d)]);
      }
    }
  }
}

TEST_CASE("attention oracle: scores far beyond exp's range stay finite") {
  // Scores 1000 and 999 (scale 1): exp overflows unless the maximum is subtracted first.
  Inputs x = zeros(1, 2, 1);
  x.query[at(x, 0, 0, 0, 0)] = 1000.0;
  x.key[at(x, 0, 0, 0, 0)] = 1.0;
  x.key[at(x, 0, 1, 0, 0)] = 0.999;
  x.value[at(x, 0, 0, 0, 0)] = 1.0;
  x.value[at(x, 0, 1, 0, 1)] = 1.0;
  const auto out = attend(x, 1.0);
  const double p0 = 1.0 / (1.0 + std::exp(-1.0));
  CHECK(out[at(x, 0, 0, 0, 0)] == doctest::Approx(p0).epsilon(1e-12));
  CHECK(out[at(x, 0, 0, 0, 1)] == doctest::Approx(1.0 - p0).epsilon(1e-12));
}

TEST_CASE("attention oracle: the threaded path (long sequences) agrees with the formula") {
  // 2 samples x 2 heads x 600^2 scores: above the single-thread threshold.
  Inputs x = filled(2, 600, 2);
  const double scale = 0.0883883;
  const auto out = attend(x, scale);
  for (const std::int64_t b : {0, 1}) {
    for (const std::int64_t i : {0, 63, 64, 599}) {
      for (const std::int64_t h : {0, 1}) {
        const auto want = row_direct(x, b, i, h, scale);
        for (std::int64_t d = 0; d < kD; d += 17) {
          CHECK(out[at(x, b, i, h, d)] ==
                doctest::Approx(want[static_cast<std::size_t>(d)]).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("attention: the manifest states the flash_attn_func contract") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  REQUIRE(task.tensors.size() == 4);
  const char* names[] = {"out", "query", "key", "value"};
  for (std::size_t t = 0; t < 4; ++t) {
    CAPTURE(t);
    CHECK(task.tensors[t].name == names[t]);
    CHECK(task.tensors[t].dtype == core::DType::kBF16);
  }
  REQUIRE(task.scalars.size() == 1);
  CHECK(task.scalars[0].name == "scale");
  REQUIRE(task.scalars[0].default_value.has_value());
  CHECK(*task.scalars[0].default_value == doctest::Approx(1.0 / std::sqrt(128.0)).epsilon(1e-12));
  // Every case is within the 50 ms budget the visible shapes were chosen for: at most 2^44 FLOPs
  // (17.6 TFLOP, 27 ms at 650 TFLOP/s).
  for (const auto& c : task.cases) {
    CAPTURE(c.name);
    const std::int64_t flops = 4 * c.symbols.at("batch") * c.symbols.at("num_heads") *
                               c.symbols.at("seq_len") * c.symbols.at("seq_len") * kD;
    CHECK(flops <= (std::int64_t{1} << 44));
  }
}
