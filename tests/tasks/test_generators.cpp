// Input generators: bit-for-bit determinism, sliceability, distributions, float conversions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/checksum.hpp"
#include "core/numeric.hpp"
#include "tasks/generators.hpp"
#include "tasks/random.hpp"

using namespace crucible;
using namespace crucible::tasks;

namespace {

// CRC-32C of fixed streams (see "output is pinned"). Only ever update these on purpose.
constexpr std::uint32_t kGoldenRandnF32 = 2882645219u;
constexpr std::uint32_t kGoldenRandnBF16 = 3466684372u;
constexpr std::uint32_t kGoldenUniformF16 = 258094366u;
constexpr std::uint32_t kGoldenUniformI64 = 313155355u;

GeneratorSpec randn(double mean, double std_dev) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kRandn;
  spec.mean = mean;
  spec.std = std_dev;
  return spec;
}

GeneratorSpec uniform(double lo, double hi) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kUniform;
  spec.lo = lo;
  spec.hi = hi;
  return spec;
}

template <class T>
std::vector<T> as(const std::vector<std::byte>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

std::string_view view(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

struct Moments {
  double mean = 0.0;
  double std = 0.0;
};

template <class T, class F>
Moments moments(const std::vector<T>& values, F to_double) {
  double sum = 0.0;
  double sum_sq = 0.0;
  for (const T& v : values) {
    const double x = to_double(v);
    sum += x;
    sum_sq += x * x;
  }
  const double n = static_cast<double>(values.size());
  const double mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

}  // namespace

TEST_CASE("generators: the same spec, dtype and seed give the same bytes") {
  for (const auto dtype : {core::DType::kBF16, core::DType::kF16, core::DType::kF32,
                           core::DType::kI32, core::DType::kI64}) {
    CAPTURE(core::dtype_name(dtype));
    const auto a = generate(randn(0.0, 3.0), dtype, 10001, 42);
    const auto b = generate(randn(0.0, 3.0), dtype, 10001, 42);
    const auto c = generate(randn(0.0, 3.0), dtype, 10001, 43);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(c.ok());
    CHECK(a->size() == 10001 * core::dtype_size(dtype));
    CHECK(*a == *b);
    CHECK(*a != *c);
  }
}

TEST_CASE("generators: output is pinned across machines and releases") {
  // If one of these changes, every recorded trajectory's inputs change with it.
  CHECK(core::crc32c(view(generate(randn(0.0, 1.0), core::DType::kF32, 4096, 7).value())) ==
        kGoldenRandnF32);
  CHECK(core::crc32c(view(generate(randn(1.0, 0.1), core::DType::kBF16, 4096, 7).value())) ==
        kGoldenRandnBF16);
  CHECK(core::crc32c(view(generate(uniform(-2.0, 2.0), core::DType::kF16, 4096, 7).value())) ==
        kGoldenUniformF16);
  CHECK(core::crc32c(view(generate(uniform(0.0, 64.0), core::DType::kI64, 4096, 7).value())) ==
        kGoldenUniformI64);
  CHECK(splitmix64(0) == 0xE220A8397B1DCDAFULL);  // the published first SplitMix64 output
}

TEST_CASE("generators: any slice equals the same range of the whole tensor") {
  const auto whole = generate(randn(0.0, 1.0), core::DType::kBF16, 1000, 9).value();
  std::vector<std::byte> slice(2 * 301);
  REQUIRE(generate_into(randn(0.0, 1.0), core::DType::kBF16, 9, slice, 333).ok());
  CHECK(std::memcmp(slice.data(), whole.data() + 2 * 333, slice.size()) == 0);
}

TEST_CASE("generators: randn has the requested mean and standard deviation") {
  const auto f32 = as<float>(generate(randn(0.0, 1.0), core::DType::kF32, 200000, 1).value());
  const auto m = moments(f32, [](float v) { return static_cast<double>(v); });
  CHECK(std::abs(m.mean) < 0.01);
  CHECK(m.std == doctest::Approx(1.0).epsilon(0.01));

  const auto bf16 =
      as<std::uint16_t>(generate(randn(1.0, 0.1), core::DType::kBF16, 200000, 2).value());
  const auto mb = moments(bf16, [](std::uint16_t v) { return double{bf16_to_float(v)}; });
  CHECK(mb.mean == doctest::Approx(1.0).epsilon(0.002));
  CHECK(mb.std == doctest::Approx(0.1).epsilon(0.02));

  // Tails: about 0.27% of a normal lies beyond 3 sigma.
  std::size_t beyond = 0;
  for (const float v : f32) beyond += std::abs(v) > 3.0f ? 1 : 0;
  CHECK(beyond > 400);
  CHECK(beyond < 700);
}

TEST_CASE("generators: uniform stays in [lo, hi) and fills it evenly") {
  const auto f32 = as<float>(generate(uniform(-2.0, 6.0), core::DType::kF32, 100000, 3).value());
  for (const float v : f32) {
    REQUIRE(v >= -2.0f);
    REQUIRE(v < 6.0f);
  }
  const auto m = moments(f32, [](float v) { return static_cast<double>(v); });
  CHECK(m.mean == doctest::Approx(2.0).epsilon(0.01));
  CHECK(m.std == doctest::Approx(8.0 / std::sqrt(12.0)).epsilon(0.01));

  const auto i32 = as<std::int32_t>(generate(uniform(0, 8), core::DType::kI32, 10000, 4).value());
  std::set<std::int32_t> seen(i32.begin(), i32.end());
  CHECK(seen == std::set<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("generators: constants, ones, zeros and positions") {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kOnes;
  for (const auto v : as<std::uint16_t>(generate(spec, core::DType::kBF16, 5, 0).value())) {
    CHECK(v == 0x3F80);
  }
  spec.kind = GeneratorKind::kZeros;
  for (const auto v : as<float>(generate(spec, core::DType::kF32, 5, 0).value())) CHECK(v == 0.0f);
  spec.kind = GeneratorKind::kConstant;
  spec.value = -3.5;
  for (const auto v : as<std::uint16_t>(generate(spec, core::DType::kF16, 5, 0).value())) {
    CHECK(v == 0xC300);
  }
  spec.kind = GeneratorKind::kPositions;
  spec.max = 100;
  const auto positions = as<std::int64_t>(generate(spec, core::DType::kI64, 250, 5).value());
  for (std::size_t i = 1; i < positions.size(); ++i) {
    CHECK(positions[i] >= 0);
    CHECK(positions[i] < 100);
    CHECK(positions[i] == (positions[i - 1] + 1) % 100);
  }
}

TEST_CASE("generators: bad routing specs are refused, captured without a file too") {
  GeneratorSpec captured;
  captured.kind = GeneratorKind::kCaptured;
  captured.file = "/nonexistent/captured.safetensors";
  captured.tensor = "x";
  const auto a = generate(captured, core::DType::kBF16, 4, 0);
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().code == core::ErrorCode::kIo);
  GeneratorSpec routing;
  routing.kind = GeneratorKind::kRouting;  // no expert count, no top-k
  CHECK_FALSE(generate(routing, core::DType::kI32, 4, 0).ok());
  std::vector<std::byte> odd(3);
  CHECK_FALSE(generate_into(randn(0, 1), core::DType::kF32, 0, odd).ok());
}

TEST_CASE("generators: fp8 values are the f64 stream rounded through float, saturated") {
  // std 300: a few percent of the draws lie past e4m3's 448 and must saturate, none past e5m2's.
  const auto wide = generate(randn(0, 300), core::DType::kF64, 4096, 7);
  const auto e4m3 = generate(randn(0, 300), core::DType::kFP8E4M3, 4096, 7);
  const auto e5m2 = generate(randn(0, 300), core::DType::kFP8E5M2, 4096, 7);
  REQUIRE(wide.ok());
  REQUIRE(e4m3.ok());
  REQUIRE(e5m2.ok());
  std::size_t saturated = 0;
  for (std::size_t i = 0; i < 4096; ++i) {
    double value = 0.0;
    std::memcpy(&value, wide->data() + i * 8, 8);
    const auto e4m3_bits = static_cast<std::uint8_t>((*e4m3)[i]);
    CHECK(e4m3_bits == core::float_to_fp8_e4m3(static_cast<float>(value)));
    CHECK(static_cast<std::uint8_t>((*e5m2)[i]) ==
          core::float_to_fp8_e5m2(static_cast<float>(value)));
    CHECK(std::fabs(core::fp8_e4m3_to_float(e4m3_bits)) <= 448.0f);
    saturated += std::fabs(value) > 464.0 ? 1 : 0;  // past the rounding midpoint above 448
  }
  CHECK(saturated > 20);
}

TEST_CASE("generators: generate_tensor uses the case shape and refuses outputs") {
  TensorSpec input{"x", core::DType::kF32, {"n", "4"}, Role::kIn, "", randn(0, 1), std::nullopt};
  TensorSpec output{"y", core::DType::kF32, {"n"}, Role::kOut, "", std::nullopt, Tolerance{}};
  Case c;
  c.name = "c";
  c.symbols = {{"n", 3}};
  c.values["x"] = randn(0, 1);
  const auto values = generate_tensor(c, input, 11);
  REQUIRE(values.ok());
  CHECK(values->size() == 3 * 4 * sizeof(float));
  CHECK(*values == generate(randn(0, 1), core::DType::kF32, 12, tensor_seed(11, "x")).value());
  CHECK(*values != generate_tensor(c, input, 11, 1).value());  // a second draw differs
  CHECK_FALSE(generate_tensor(c, output, 11).ok());
}

struct FloatRow {
  float value;
  std::uint16_t bf16;
  std::uint16_t f16;
};

// Round-to-nearest-even at the edges: ties, overflow, subnormals, signed zero.
const FloatRow kFloatRows[] = {
    {1.0f, 0x3F80, 0x3C00},          {-2.0f, 0xC000, 0xC000},    {0.0f, 0x0000, 0x0000},
    {-0.0f, 0x8000, 0x8000},         {65504.0f, 0x4780, 0x7BFF},  // largest f16
    {65519.0f, 0x4780, 0x7BFF},                                   // rounds down to the largest f16
    {65520.0f, 0x4780, 0x7C00},                                   // ties to even: infinity
    {1e-8f, 0x322C, 0x0000},          // below half the smallest f16 subnormal
    {5.9604645e-8f, 0x3380, 0x0001},  // smallest f16 subnormal, 2^-24
    {6.1035156e-5f, 0x3880, 0x0400},  // smallest f16 normal, 2^-14
    {1.00390625f, 0x3F80, 0x3C04},    // 1 + 2^-8: a bf16 tie, rounds to even (1.0)
    {1.01171875f, 0x3F82, 0x3C0C},    // 1 + 3 * 2^-8: a bf16 tie, rounds up to even
    {3.0e38f, 0x7F62, 0x7C00},
};

TEST_CASE("conversions: bf16 and f16 round to nearest even") {
  for (const auto& row : kFloatRows) {
    CAPTURE(row.value);
    CHECK(bf16_from_float(row.value) == row.bf16);
    CHECK(f16_from_float(row.value) == row.f16);
  }
  CHECK(std::isnan(bf16_to_float(bf16_from_float(std::nanf("")))));
  CHECK(std::isnan(f16_to_float(f16_from_float(std::nanf("")))));
  CHECK(f16_from_float(std::numeric_limits<float>::infinity()) == 0x7C00);
  // Every finite f16 survives a round trip through float.
  for (std::uint32_t bits = 0; bits < 0x7C00; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    REQUIRE(f16_from_float(f16_to_float(half)) == half);
  }
}

TEST_CASE("portable log: agrees with the C library to within rounding") {
  for (const double x : {1e-300, 1e-17, 0.001, 0.25, 0.5, 0.7071, 0.9999999, 1.0, 2.0, 1e10}) {
    CAPTURE(x);
    CHECK(portable_log(x) == doctest::Approx(std::log(x)).epsilon(1e-15));
  }
  CHECK(std::isinf(portable_log(0.0)));
  CHECK(std::isnan(portable_log(-1.0)));
}

TEST_CASE("generators: a permutation is distinct values below max, a share padded with -1") {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kPermutation;
  for (const std::int64_t max : {1, 2, 7, 1000, 4096, 100003}) {
    CAPTURE(max);
    spec.max = max;
    spec.pad = 0.0;
    const auto bytes = generate(spec, core::DType::kI64, max, 11);
    REQUIRE(bytes.ok());
    const auto values = as<std::int64_t>(*bytes);
    std::set<std::int64_t> distinct(values.begin(), values.end());
    CHECK(distinct.size() == values.size());  // every value of [0, max) exactly once
    CHECK(*distinct.begin() == 0);
    CHECK(*distinct.rbegin() == max - 1);
    if (max >= 1000) {
      std::size_t fixed = 0;  // a permutation, not the identity
      for (std::size_t i = 0; i < values.size(); ++i) fixed += values[i] == std::int64_t(i);
      CHECK(fixed < values.size() / 10);
    }
  }
  spec.max = 50000;
  spec.pad = 0.25;
  const auto padded = generate(spec, core::DType::kI32, 20000, 3);
  REQUIRE(padded.ok());
  const auto values = as<std::int32_t>(*padded);
  std::set<std::int32_t> seen;
  std::size_t pads = 0;
  for (const auto v : values) {
    if (v == -1) {
      ++pads;
      continue;
    }
    CHECK(v >= 0);
    CHECK(v < 50000);
    CHECK(seen.insert(v).second);
  }
  CHECK(pads > 4500);
  CHECK(pads < 5500);
  // Different seeds give different orders; more elements than max cannot be distinct.
  spec.pad = 0.0;
  CHECK(generate(spec, core::DType::kI32, 100, 1).value() !=
        generate(spec, core::DType::kI32, 100, 2).value());
  CHECK_FALSE(generate(spec, core::DType::kI32, 50001, 1).ok());
}

TEST_CASE("generators: list repeats its values, from any first index, in any dtype") {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kList;
  spec.list = {7, 1, 333};
  const auto bytes = generate(spec, core::DType::kI32, 7, 99);
  REQUIRE(bytes.ok());
  auto values = as<std::int32_t>(*bytes);
  CHECK(values == std::vector<std::int32_t>{7, 1, 333, 7, 1, 333, 7});
  // The seed plays no part; a slice starting at index 4 continues the cycle.
  CHECK(generate(spec, core::DType::kI32, 7, 1).value() == *bytes);
  std::vector<std::byte> slice(8);
  REQUIRE(generate_into(spec, core::DType::kI32, 0, slice, 4).ok());
  values = as<std::int32_t>(slice);
  CHECK(values[0] == 1);
  CHECK(values[1] == 333);
  spec.list = {0.5, -2.25};
  const auto halves = generate(spec, core::DType::kBF16, 3, 0);
  REQUIRE(halves.ok());
  const auto bits = as<std::uint16_t>(*halves);
  CHECK(bf16_to_float(bits[0]) == 0.5f);
  CHECK(bf16_to_float(bits[1]) == -2.25f);
  CHECK(bf16_to_float(bits[2]) == 0.5f);
  CHECK_FALSE(stream_length(spec).has_value());
}

TEST_CASE("generators: rope_cache rows hold cos then sin of position times inverse frequency") {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kRopeCache;
  spec.dim = 8;
  spec.theta = 10000.0;
  const auto bytes = generate(spec, core::DType::kF32, 4 * 8, 0);
  REQUIRE(bytes.ok());
  const auto values = as<float>(*bytes);
  for (int p = 0; p < 4; ++p) {
    for (int k = 0; k < 4; ++k) {
      const double angle = p * std::pow(10000.0, -2.0 * k / 8.0);
      CHECK(values[p * 8 + k] == static_cast<float>(std::cos(angle)));
      CHECK(values[p * 8 + 4 + k] == static_cast<float>(std::sin(angle)));
    }
  }
  CHECK(values[0] == 1.0f);  // position 0: cos 1, sin 0
  CHECK(values[4] == 0.0f);
}

namespace {

GeneratorSpec routing(std::int64_t experts, std::int64_t topk, double skew) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kRouting;
  spec.max = experts;
  spec.topk = topk;
  spec.skew = skew;
  return spec;
}

// How many of `rows` rows of `ids` choose each expert.
std::vector<double> expert_loads(const std::vector<std::int32_t>& ids, std::int64_t experts) {
  std::vector<double> loads(static_cast<std::size_t>(experts), 0.0);
  for (const std::int32_t id : ids) loads[static_cast<std::size_t>(id)] += 1.0;
  return loads;
}

}  // namespace

TEST_CASE("routing: every row holds topk distinct experts below the expert count") {
  for (const auto& [experts, topk] :
       {std::pair{8, 2}, std::pair{128, 8}, std::pair{60, 4}, std::pair{256, 8}, std::pair{5, 5}}) {
    CAPTURE(experts);
    const auto ids = as<std::int32_t>(
        generate(routing(experts, topk, 1.0), core::DType::kI32, 500 * topk, 17).value());
    std::size_t bad = 0;
    for (std::size_t row = 0; row < 500; ++row) {
      std::set<std::int32_t> seen;
      for (std::int64_t j = 0; j < topk; ++j) {
        const std::int32_t id = ids[row * topk + j];
        bad += (id >= 0 && id < experts && seen.insert(id).second) ? 0 : 1;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("routing: any slice, also one starting mid-row, equals the whole; i64 equals i32") {
  const GeneratorSpec spec = routing(128, 8, 0.8);
  const auto whole = generate(spec, core::DType::kI32, 8 * 300, 99).value();
  std::vector<std::byte> slice(4 * 1001);
  REQUIRE(generate_into(spec, core::DType::kI32, 99, slice, 203).ok());
  CHECK(std::memcmp(slice.data(), whole.data() + 4 * 203, slice.size()) == 0);
  const auto wide = as<std::int64_t>(generate(spec, core::DType::kI64, 8 * 300, 99).value());
  const auto narrow = as<std::int32_t>(whole);
  CHECK(std::equal(wide.begin(), wide.end(), narrow.begin()));
  for (const std::uint64_t index : {0ull, 7ull, 8ull, 1234ull, 2399ull}) {
    CHECK(generated_value(spec, 99, index) == static_cast<double>(narrow[index]));
  }
  CHECK(uses_seed(spec));
  CHECK(generate(spec, core::DType::kI32, 64, 100).value() !=
        generate(spec, core::DType::kI32, 64, 99).value());
}

TEST_CASE("routing: top-1 picks follow the Zipf popularity exactly (Gumbel-max)") {
  // With topk = 1 the Plackett-Luce draw is one categorical draw: P(rank r) = (r + 1)^-s / H,
  // whichever expert holds rank r. Sorted empirical loads must match the sorted probabilities.
  const std::int64_t experts = 8;
  const double skew = 1.0;
  const std::int64_t rows = 200000;
  const auto ids =
      as<std::int32_t>(generate(routing(experts, 1, skew), core::DType::kI32, rows, 4242).value());
  std::vector<double> share = expert_loads(ids, experts);
  std::sort(share.begin(), share.end(), std::greater<>());
  double harmonic = 0.0;
  for (std::int64_t r = 0; r < experts; ++r) harmonic += 1.0 / static_cast<double>(r + 1);
  for (std::int64_t r = 0; r < experts; ++r) {
    CAPTURE(r);
    const double expected = 1.0 / static_cast<double>(r + 1) / harmonic;
    // Binomial standard error at 200000 draws is below 1.1e-3; 5e-3 is over four of them.
    CHECK(std::fabs(share[r] / static_cast<double>(rows) - expected) < 5e-3);
  }
}

TEST_CASE("routing: skew 0 loads experts evenly; larger skew concentrates the load") {
  const std::int64_t experts = 128;
  const std::int64_t topk = 8;
  const std::int64_t rows = 4096;
  auto hottest_over_mean = [&](double skew) {
    const auto ids = as<std::int32_t>(
        generate(routing(experts, topk, skew), core::DType::kI32, rows * topk, 7).value());
    const auto loads = expert_loads(ids, experts);
    const double mean = static_cast<double>(rows * topk) / static_cast<double>(experts);
    return *std::max_element(loads.begin(), loads.end()) / mean;
  };
  // Uniform: 256 picks an expert on average; the maximum of 128 such counts stays within 25 %.
  CHECK(hottest_over_mean(0.0) < 1.25);
  const double mild = hottest_over_mean(0.5);
  const double strong = hottest_over_mean(1.2);
  CHECK(mild > 1.5);
  CHECK(strong > mild);
  // The hottest expert takes at most one pick a row: its load never exceeds rows.
  CHECK(strong <= static_cast<double>(experts) / static_cast<double>(topk));
}

TEST_CASE("routing: the popular experts are a seeded set, not the low ids") {
  std::set<std::int32_t> hottest;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const auto ids =
        as<std::int32_t>(generate(routing(64, 1, 2.0), core::DType::kI32, 2000, seed).value());
    const auto loads = expert_loads(ids, 64);
    hottest.insert(
        static_cast<std::int32_t>(std::max_element(loads.begin(), loads.end()) - loads.begin()));
  }
  CHECK(hottest.size() >= 4);
}

TEST_CASE("routing: a very large skew sends every token to the same k experts") {
  const auto ids =
      as<std::int32_t>(generate(routing(256, 8, 200.0), core::DType::kI32, 8 * 100, 3).value());
  const std::set<std::int32_t> first(ids.begin(), ids.begin() + 8);
  std::size_t differing = 0;
  for (std::size_t row = 1; row < 100; ++row) {
    differing +=
        std::set<std::int32_t>(ids.begin() + row * 8, ids.begin() + row * 8 + 8) == first ? 0 : 1;
  }
  CHECK(first.size() == 8);
  CHECK(differing == 0);
}

namespace {

GeneratorSpec power_law_offsets(std::int64_t rows, std::int64_t total, double skew) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kPowerLawOffsets;
  spec.rows = rows;
  spec.max = total;
  spec.skew = skew;
  return spec;
}

}  // namespace

TEST_CASE("power_law_offsets: 0 first, total last, non-decreasing; slices equal the whole") {
  for (const double skew : {0.0, 0.5, 1.0, 1.7}) {
    CAPTURE(skew);
    const GeneratorSpec spec = power_law_offsets(70839, 2054770, skew);
    const auto offsets = as<std::int32_t>(generate(spec, core::DType::kI32, 70840, 31).value());
    CHECK(offsets.front() == 0);
    CHECK(offsets.back() == 2054770);
    CHECK(std::is_sorted(offsets.begin(), offsets.end()));
    std::vector<std::byte> slice(4 * 1000);
    REQUIRE(generate_into(spec, core::DType::kI32, 31, slice, 35000).ok());
    CHECK(std::memcmp(slice.data(), offsets.data() + 35000, slice.size()) == 0);
  }
  // Elements past rows repeat total; the seed moves the largest segments.
  const GeneratorSpec spec = power_law_offsets(10, 100, 0.5);
  CHECK(generated_value(spec, 1, 11) == 100.0);
  CHECK(uses_seed(spec));
  CHECK(generate(power_law_offsets(1000, 50000, 1.0), core::DType::kI64, 1001, 1).value() !=
        generate(power_law_offsets(1000, 50000, 1.0), core::DType::kI64, 1001, 2).value());
}

TEST_CASE("power_law_offsets: segment sizes follow the rank-size law") {
  // skew 0: equal segments. skew 0.5 over 70839 rows and 2054770 items (LightGCN's Gowalla graph
  // size): the largest segment total * (sqrt(2) - 1) / (2 (sqrt(70840) - 1)) ~ 1608, the
  // smallest ~ total / (2 sqrt(70840) * C) ~ 7.3, sizes by rank within one item of the integral.
  const auto even = as<std::int64_t>(
      generate(power_law_offsets(100, 1000, 0.0), core::DType::kI64, 101, 5).value());
  for (std::size_t i = 0; i + 1 < even.size(); ++i) CHECK(even[i + 1] - even[i] == 10);

  const std::int64_t rows = 70839, total = 2054770;
  const auto offsets = as<std::int64_t>(
      generate(power_law_offsets(rows, total, 0.5), core::DType::kI64, rows + 1, 77).value());
  std::vector<std::int64_t> sizes;
  for (std::int64_t i = 0; i < rows; ++i) sizes.push_back(offsets[i + 1] - offsets[i]);
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  const double whole = 2.0 * (std::sqrt(static_cast<double>(rows) + 1.0) - 1.0);
  for (const std::int64_t r : {0, 1, 10, 1000, 70000}) {
    CAPTURE(r);
    const double want =
        static_cast<double>(total) * 2.0 * (std::sqrt(r + 2.0) - std::sqrt(r + 1.0)) / whole;
    CHECK(std::abs(static_cast<double>(sizes[static_cast<std::size_t>(r)]) - want) <= 1.5);
  }
  CHECK(sizes.front() > 1500);
  CHECK(sizes.back() >= 6);
}

namespace {

GeneratorSpec zipf(std::int64_t max, double skew) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kZipf;
  spec.max = max;
  spec.skew = skew;
  return spec;
}

// The generator's rank permutation: permutation(max) under the seed xor this salt
// (kZipfRankSalt in tasks/generators.cpp), so element r is the id of rank r.
constexpr std::uint64_t kZipfRankSalt = 0x21F0DA7E5ULL;

std::vector<std::int64_t> zipf_ids_by_rank(std::int64_t max, std::uint64_t seed) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kPermutation;
  spec.max = max;
  return as<std::int64_t>(generate(spec, core::DType::kI64, max, seed ^ kZipfRankSalt).value());
}

// C(x) = int_0^x (1 + t)^-skew dt, the rank-size integral the ranks are drawn by.
double rank_size_integral(double x, double skew) {
  if (skew == 1.0) return std::log1p(x);
  return (std::pow(1.0 + x, 1.0 - skew) - 1.0) / (1.0 - skew);
}

}  // namespace

TEST_CASE("zipf: ids in [0, max), the same for every slice, dtype and call; seeds differ") {
  const std::int64_t max = 70001;
  const std::int64_t count = 200000;
  for (const double skew : {0.0, 0.5, 1.0, 1.5, 4.0}) {
    CAPTURE(skew);
    const GeneratorSpec spec = zipf(max, skew);
    const auto ids = as<std::int64_t>(generate(spec, core::DType::kI64, count, 41).value());
    CHECK(*std::min_element(ids.begin(), ids.end()) >= 0);
    CHECK(*std::max_element(ids.begin(), ids.end()) < max);
    const auto narrow = as<std::int32_t>(generate(spec, core::DType::kI32, count, 41).value());
    CHECK(std::equal(ids.begin(), ids.end(), narrow.begin()));
    CHECK(generate(spec, core::DType::kI64, count, 41).value() ==
          generate(spec, core::DType::kI64, count, 41).value());
    std::vector<std::byte> slice(8 * 1000);
    REQUIRE(generate_into(spec, core::DType::kI64, 41, slice, 123456).ok());
    CHECK(std::memcmp(slice.data(), ids.data() + 123456, slice.size()) == 0);
    CHECK(generate(spec, core::DType::kI64, count, 42).value() !=
          generate(spec, core::DType::kI64, count, 41).value());
  }
  CHECK(uses_seed(zipf(10, 1.0)));
  CHECK_FALSE(stream_length(zipf(10, 1.0)).has_value());  // ids repeat: any count may be drawn
  // A table of one row: every id 0.
  const auto single = as<std::int64_t>(generate(zipf(1, 1.0), core::DType::kI64, 100, 3).value());
  CHECK(std::all_of(single.begin(), single.end(), [](std::int64_t id) { return id == 0; }));
  // A spec the manifest would refuse is an error, not garbage.
  CHECK_FALSE(generate(zipf(0, 1.0), core::DType::kI64, 10, 1).ok());
  CHECK_FALSE(generate(zipf(10, 4.5), core::DType::kI64, 10, 1).ok());
  CHECK_FALSE(
      generate(zipf(10, std::numeric_limits<double>::quiet_NaN()), core::DType::kI64, 10, 1).ok());
}

TEST_CASE("zipf: element i is the id of rank floor(C^-1(u C(max))), u the uniform stream's") {
  // The documented construction, recomputed with the C library: u is element i of the uniform
  // generator on the same seed, the rank solves C(x) = u C(max), the id is that rank's element
  // of the seeded permutation. An x within rounding of an integer may floor either way; skipped.
  const std::int64_t max = 500000;
  const std::uint64_t seed = 2024;
  const std::int64_t count = 20000;
  const auto by_rank = zipf_ids_by_rank(max, seed);
  const auto u = as<double>(generate(uniform(0.0, 1.0), core::DType::kF64, count, seed).value());
  for (const double skew : {0.0, 0.7, 1.0, 2.5}) {
    CAPTURE(skew);
    const auto ids =
        as<std::int64_t>(generate(zipf(max, skew), core::DType::kI64, count, seed).value());
    const double whole =
        skew == 0.0 ? static_cast<double>(max) : rank_size_integral(static_cast<double>(max), skew);
    std::int64_t checked = 0, wrong = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const double target = u[i] * whole;
      double x = target;
      if (skew == 1.0) x = std::expm1(target);
      if (skew != 0.0 && skew != 1.0) {
        x = std::pow(1.0 + target * (1.0 - skew), 1.0 / (1.0 - skew)) - 1.0;
      }
      if (std::abs(x - std::round(x)) < 1e-12 * std::max(1.0, x)) continue;
      const auto rank = std::min<std::int64_t>(max - 1, static_cast<std::int64_t>(x));
      ++checked;
      wrong += ids[i] == by_rank[rank] ? 0 : 1;
    }
    CHECK(checked + 2 >= count);
    CHECK(wrong == 0);
  }
}

TEST_CASE("zipf: the ids of the top ranks take the share of lookups the power law predicts") {
  // 2^20 draws over 500000 rows. The ids of the top k ranks (the first k of the seeded
  // permutation) take C(k) / C(max) of the draws: skew 1.0, top 1% of the rows: ln(5001) /
  // ln(500001) = 0.649, FBGEMM's Zipf(1.0) hot set. Held to 5 standard errors of a binomial share.
  const std::int64_t max = 500000;
  const std::int64_t count = std::int64_t{1} << 20;
  const std::uint64_t seed = 77;
  const auto by_rank = zipf_ids_by_rank(max, seed);
  struct Row {
    double skew;
    std::int64_t top;  // ranks in the hot set
  };
  for (const Row row : {Row{1.0, 5000}, Row{0.5, 5000}, Row{2.0, 10}, Row{0.0, 5000}}) {
    CAPTURE(row.skew);
    const auto ids =
        as<std::int64_t>(generate(zipf(max, row.skew), core::DType::kI64, count, seed).value());
    std::vector<bool> hot(max, false);
    for (std::int64_t r = 0; r < row.top; ++r) hot[by_rank[r]] = true;
    const auto hits =
        std::count_if(ids.begin(), ids.end(), [&](std::int64_t id) { return hot[id]; });
    const double share = static_cast<double>(hits) / count;
    const double want = row.skew == 0.0
                            ? static_cast<double>(row.top) / max
                            : rank_size_integral(static_cast<double>(row.top), row.skew) /
                                  rank_size_integral(static_cast<double>(max), row.skew);
    const double standard_error = std::sqrt(want * (1.0 - want) / count);
    CAPTURE(share);
    CAPTURE(want);
    CHECK(std::abs(share - want) < 5.0 * standard_error);
  }
}

TEST_CASE("zipf: skew 0 draws every id about equally often") {
  // 2^20 draws over 1000 ids: each count is binomial, mean 1048.6, sd 32.4; the chi-square
  // statistic has 999 degrees of freedom (mean 999, sd 44.7).
  const std::int64_t max = 1000;
  const std::int64_t count = std::int64_t{1} << 20;
  const auto ids = as<std::int32_t>(generate(zipf(max, 0.0), core::DType::kI32, count, 5).value());
  std::vector<double> counts(max, 0.0);
  for (const std::int32_t id : ids) counts[static_cast<std::size_t>(id)] += 1.0;
  const double expected = static_cast<double>(count) / max;
  double chi_square = 0.0;
  for (const double c : counts) {
    CHECK(std::abs(c - expected) < 6.0 * std::sqrt(expected));
    chi_square += (c - expected) * (c - expected) / expected;
  }
  CHECK(chi_square > 999.0 - 6.0 * 44.7);
  CHECK(chi_square < 999.0 + 6.0 * 44.7);
}

TEST_CASE("zipf: the hot ids are scattered over the table, not 0, 1, 2, ...") {
  const std::int64_t max = 500000;
  const std::int64_t count = std::int64_t{1} << 20;
  const auto ids = as<std::int64_t>(generate(zipf(max, 1.0), core::DType::kI64, count, 9).value());
  std::vector<std::int64_t> counts(max, 0);
  for (const std::int64_t id : ids) ++counts[static_cast<std::size_t>(id)];
  std::vector<std::int64_t> order(max);
  for (std::int64_t id = 0; id < max; ++id) order[id] = id;
  std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                    [&](std::int64_t a, std::int64_t b) { return counts[a] > counts[b]; });
  // The hottest id takes about ln 2 / ln 500001 = 5.3 % of the draws, and it is not id 0.
  CHECK(order[0] != 0);
  CHECK(counts[order[0]] > count / 25);
  // The ten hottest ids span the table.
  const auto [lo, hi] = std::minmax_element(order.begin(), order.begin() + 10);
  CHECK(*hi - *lo > max / 4);
  CHECK(std::count_if(order.begin(), order.begin() + 10,
                      [](std::int64_t id) { return id < 1000; }) < 3);
}

TEST_CASE("surface_points: points on the floor or on spheres resting on it, in the unit box") {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kSurfacePoints;
  spec.max = 1;
  const std::size_t points = 30000;
  const auto xyz = as<float>(generate(spec, core::DType::kF32, 3 * points, 12).value());
  // One sphere: its points' bounding box is [c - r, c + r]^3 (to ~1e-3 r at this count), and the
  // sphere rests on the floor (its lowest point at z = 0).
  double lo[3] = {1, 1, 1}, hi[3] = {0, 0, 0};
  std::size_t on_floor = 0;
  for (std::size_t p = 0; p < points; ++p) {
    if (xyz[p * 3 + 2] == 0.0f) {
      ++on_floor;
      continue;
    }
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], static_cast<double>(xyz[p * 3 + c]));
      hi[c] = std::max(hi[c], static_cast<double>(xyz[p * 3 + c]));
    }
  }
  CHECK(on_floor > points * 3 / 10);
  CHECK(on_floor < points * 37 / 100);
  const double radius = (hi[2] - lo[2]) / 2.0;
  CHECK(radius >= 0.05 - 1e-3);
  CHECK(radius <= 0.15 + 1e-3);
  CHECK(lo[2] < 1e-3);
  std::size_t off_surface = 0;
  for (std::size_t p = 0; p < points; ++p) {
    if (xyz[p * 3 + 2] == 0.0f) {
      off_surface += (xyz[p * 3] < 0.0f || xyz[p * 3] >= 1.0f) ? 1 : 0;
      continue;
    }
    double d2 = 0.0;
    for (int c = 0; c < 3; ++c) {
      const double d = xyz[p * 3 + c] - (lo[c] + hi[c]) / 2.0;
      d2 += d * d;
    }
    off_surface += std::abs(std::sqrt(d2) - radius) > 2e-3 ? 1 : 0;
  }
  CHECK(off_surface == 0);
  // Any slice equals the whole; another seed samples other points of the same sphere.
  std::vector<std::byte> slice(4 * 301);
  REQUIRE(generate_into(spec, core::DType::kF32, 12, slice, 1000).ok());
  CHECK(std::memcmp(slice.data(), xyz.data() + 1000, slice.size()) == 0);
  CHECK(uses_seed(spec));
  const auto other = as<float>(generate(spec, core::DType::kF32, 3 * points, 13).value());
  CHECK(other != xyz);
  double other_top = 0.0;
  for (std::size_t p = 0; p < points; ++p) {
    other_top = std::max(other_top, static_cast<double>(other[p * 3 + 2]));
  }
  CHECK(std::abs(other_top - hi[2]) < 2e-3);
}

namespace {

GeneratorSpec mrope_positions(std::int64_t tokens, std::int64_t max, std::int64_t sequence,
                              std::int64_t text, std::int64_t frames, std::int64_t grid_h,
                              std::int64_t grid_w, std::int64_t temporal_step = 1) {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kMropePositions;
  spec.max = max;
  spec.mrope = {tokens, sequence, text, frames, grid_h, grid_w, temporal_step};
  return spec;
}

}  // namespace

TEST_CASE("mrope_positions: text then an image grid, as Qwen2-VL's get_rope_index lays it out") {
  // 2 text tokens, a 2 x 3 image (t fixed, h over rows, w over columns, both from the position
  // after the text), then text again from one past the image's largest component (2 + 2 + 1).
  // max equals the span, so the only start is 0.
  const GeneratorSpec spec = mrope_positions(10, 7, 10, 2, 1, 2, 3);
  CHECK(mrope_sequence_span(spec.mrope) == 7);
  const auto ids = as<std::int64_t>(generate(spec, core::DType::kI64, 30, 5).value());
  const std::vector<std::int64_t> t(ids.begin(), ids.begin() + 10);
  const std::vector<std::int64_t> h(ids.begin() + 10, ids.begin() + 20);
  const std::vector<std::int64_t> w(ids.begin() + 20, ids.end());
  CHECK(t == std::vector<std::int64_t>{0, 1, 2, 2, 2, 2, 2, 2, 5, 6});
  CHECK(h == std::vector<std::int64_t>{0, 1, 2, 2, 2, 3, 3, 3, 5, 6});
  CHECK(w == std::vector<std::int64_t>{0, 1, 2, 3, 4, 2, 3, 4, 5, 6});
  // A sequence that ends inside the image spans its largest component so far.
  CHECK(mrope_sequence_span(mrope_positions(5, 5, 5, 2, 1, 2, 3).mrope) == 5);
  CHECK(mrope_sequence_span(mrope_positions(6, 6, 6, 2, 1, 2, 3).mrope) == 5);
}

TEST_CASE("mrope_positions: video frames advance t by the temporal step, h and w restart") {
  // 1 text token, 3 frames of 1 x 2 patches, 4 positions a frame (Qwen2.5-VL's absolute time).
  const GeneratorSpec spec = mrope_positions(7, 10, 7, 1, 3, 1, 2, 4);
  CHECK(mrope_sequence_span(spec.mrope) == 10);
  const auto ids = as<std::int64_t>(generate(spec, core::DType::kI64, 21, 9).value());
  CHECK(std::vector<std::int64_t>(ids.begin(), ids.begin() + 7) ==
        std::vector<std::int64_t>{0, 1, 1, 5, 5, 9, 9});
  CHECK(std::vector<std::int64_t>(ids.begin() + 7, ids.begin() + 14) ==
        std::vector<std::int64_t>{0, 1, 1, 1, 1, 1, 1});
  CHECK(std::vector<std::int64_t>(ids.begin() + 14, ids.end()) ==
        std::vector<std::int64_t>{0, 1, 2, 1, 2, 1, 2});
}

TEST_CASE("mrope_positions: decode tokens sit at drawn positions, equal in all three rows") {
  const std::int64_t tokens = 4000, max = 32768;
  const GeneratorSpec spec = mrope_positions(tokens, max, 1, 1, 0, 1, 1);
  const auto ids = as<std::int64_t>(generate(spec, core::DType::kI64, 3 * tokens, 21).value());
  std::int64_t lo = max, hi = 0;
  for (std::int64_t i = 0; i < tokens; ++i) {
    CHECK(ids[i] == ids[tokens + i]);
    CHECK(ids[i] == ids[2 * tokens + i]);
    lo = std::min(lo, ids[i]);
    hi = std::max(hi, ids[i]);
  }
  CHECK(lo >= 0);
  CHECK(hi < max);
  CHECK(hi - lo > max * 9 / 10);  // spread over the whole range
  CHECK(uses_seed(spec));
  CHECK(generate(spec, core::DType::kI64, 3 * tokens, 22).value() !=
        generate(spec, core::DType::kI64, 3 * tokens, 21).value());
}

TEST_CASE("mrope_positions: packed sequences restart at their own starts; slices equal the whole") {
  // Three sequences of 300 tokens (20 text, a 12 x 20 image, text again), each offset by its own
  // start below max - span; within a sequence the layout of a sequence starting at 0.
  const GeneratorSpec spec = mrope_positions(900, 5000, 300, 20, 1, 12, 20);
  const GeneratorSpec at_zero =
      mrope_positions(300, mrope_sequence_span(spec.mrope), 300, 20, 1, 12, 20);
  const auto ids = as<std::int64_t>(generate(spec, core::DType::kI64, 2700, 3).value());
  const auto base = as<std::int64_t>(generate(at_zero, core::DType::kI64, 900, 3).value());
  std::set<std::int64_t> starts;
  for (std::int64_t s = 0; s < 3; ++s) {
    const std::int64_t start = ids[s * 300];
    starts.insert(start);
    CHECK(start + mrope_sequence_span(spec.mrope) <= 5000);
    for (std::int64_t c = 0; c < 3; ++c) {
      for (std::int64_t j = 0; j < 300; ++j) {
        CHECK(ids[c * 900 + s * 300 + j] - start == base[c * 300 + j]);
      }
    }
  }
  CHECK(starts.size() == 3);
  std::vector<std::byte> slice(8 * 1001);
  REQUIRE(generate_into(spec, core::DType::kI64, 3, slice, 777).ok());
  CHECK(std::memcmp(slice.data(), ids.data() + 777, slice.size()) == 0);
}

TEST_CASE("detections: boxes, scores and classes of one case describe the same candidates") {
  GeneratorSpec spec;
  spec.kind = GeneratorKind::kDetections;
  spec.detections.per_image = 400;
  spec.detections.objects = 10;
  const std::size_t n = 1200;  // three images
  spec.detections.field = DetectionField::kBoxes;
  const auto boxes = as<float>(generate(spec, core::DType::kF32, 4 * n, 21).value());
  spec.detections.field = DetectionField::kScores;
  const auto scores = as<float>(generate(spec, core::DType::kF32, n, 22).value());
  spec.detections.field = DetectionField::kClasses;
  const auto classes = as<std::int64_t>(generate(spec, core::DType::kI64, n, 23).value());
  std::size_t copies = 0, ordered = 0;
  std::set<std::int64_t> image_classes;
  for (std::size_t i = 0; i < n; ++i) {
    const float* b = &boxes[4 * i];
    ordered += b[0] >= 0.0f && b[0] <= b[2] && b[2] <= 640.0f && b[1] >= 0.0f && b[1] <= b[3] &&
                       b[3] <= 640.0f
                   ? 1
                   : 0;
    CHECK(scores[i] > 0.0f);
    CHECK(scores[i] < 1.0f);
    // idxs = image * 80 + class: each image's ids lie in its own range of 80.
    CHECK(classes[i] / 80 == static_cast<std::int64_t>(i / 400));
    if (i / 400 == 0) image_classes.insert(classes[i]);
    // A multi-label copy: the coordinates of the box it copies (the first of a run of equal
    // boxes) under another class, with a lower score.
    if (i % 400 != 0 && std::memcmp(b, b - 4, 16) == 0) {
      ++copies;
      std::size_t source = i - 1;
      while (source % 400 != 0 &&
             std::memcmp(&boxes[4 * source], &boxes[4 * source - 4], 16) == 0) {
        --source;
      }
      CHECK(classes[i] != classes[source]);
      CHECK(scores[i] < scores[source]);
    }
  }
  CHECK(ordered == n);
  CHECK(copies > n / 20);
  CHECK(copies < n / 6);
  // A few classes an image: objects and background draw from one to four, copies from any.
  CHECK(image_classes.size() > 1);
  CHECK(image_classes.size() < 60);
  // Duplicates cluster: most boxes overlap another box of their image above 0.5 IoU.
  const auto iou = [&](std::size_t i, std::size_t j) {
    const float* a = &boxes[4 * i];
    const float* c = &boxes[4 * j];
    const double w = std::max(0.0, double{std::min(a[2], c[2])} - std::max(a[0], c[0]));
    const double h = std::max(0.0, double{std::min(a[3], c[3])} - std::max(a[1], c[1]));
    const double u = double{a[2] - a[0]} * (a[3] - a[1]) + double{c[2] - c[0]} * (c[3] - c[1]);
    return u - w * h > 0.0 ? w * h / (u - w * h) : 0.0;
  };
  std::size_t clustered = 0;
  for (std::size_t i = 0; i < 400; ++i) {
    for (std::size_t j = 0; j < 400; ++j) {
      if (j != i && std::memcmp(&boxes[4 * i], &boxes[4 * j], 16) != 0 && iou(i, j) > 0.5) {
        ++clustered;
        break;
      }
    }
  }
  CHECK(clustered > 300);
  // Any slice equals the whole; another seed moves the objects.
  spec.detections.field = DetectionField::kBoxes;
  std::vector<std::byte> slice(4 * 77);
  REQUIRE(generate_into(spec, core::DType::kF32, 21, slice, 333).ok());
  CHECK(std::memcmp(slice.data(), boxes.data() + 333, slice.size()) == 0);
  CHECK(uses_seed(spec));
  CHECK(as<float>(generate(spec, core::DType::kF32, 4 * n, 24).value()) != boxes);
}
