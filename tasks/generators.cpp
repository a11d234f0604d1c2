// Counter-based value generators and host float conversions.
// Built with -ffp-contract=off (tasks/CMakeLists.txt): a fused multiply-add would change bits.
#include "tasks/generators.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include "core/numeric.hpp"
#include "tasks/captured.hpp"
#include "tasks/random.hpp"

namespace crucible::tasks {
namespace {

constexpr double kLn2 = 0.6931471805599453094;
constexpr double kSqrtHalf = 0.70710678118654752440;
// Rejections allowed per polar-method pair before giving up (probability 0.215^64: never).
constexpr std::uint64_t kMaxPolarAttempts = 64;
constexpr std::uint64_t kPadSalt = 0x5A17ED0DDBA11ULL;

// A keyed bijection on [0, 2^bits): odd multiplications, xor-shifts and additions modulo 2^bits,
// each invertible, in four keyed rounds.
std::uint64_t mix_bits(std::uint64_t x, std::uint64_t seed, unsigned bits) {
  const std::uint64_t mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  const unsigned shift = bits > 1 ? (bits + 1) / 2 : 1;
  for (std::uint64_t round = 0; round < 4; ++round) {
    const std::uint64_t key = stream_bits(seed, round);
    x = (x + key) & mask;
    x = (x * (key | 1)) & mask;
    x ^= x >> shift;
  }
  return x;
}

// Element `index` (< max) of a seeded permutation of [0, max): the bijection on the smallest
// power-of-two domain covering max, walked until it lands below max (cycle walking keeps it a
// bijection on [0, max); fewer than two steps on average).
std::uint64_t permuted_index(std::uint64_t seed, std::uint64_t index, std::uint64_t max) {
  unsigned bits = 1;
  while (bits < 64 && (std::uint64_t{1} << bits) < max) ++bits;
  std::uint64_t x = mix_bits(index, seed, bits);
  while (x >= max) x = mix_bits(x, seed, bits);
  return x;
}

struct NormalPair {
  double first;   // element 2k
  double second;  // element 2k + 1
};

// Elements 2k and 2k + 1 of a randn stream: one accepted point of the polar method.
// `key` is splitmix64(seed) (see keyed_bits).
NormalPair randn_pair(std::uint64_t key, std::uint64_t pair, double mean, double std_dev) {
  for (std::uint64_t attempt = 0; attempt < kMaxPolarAttempts; ++attempt) {
    const std::uint64_t counter = (pair * kMaxPolarAttempts + attempt) * 2;
    const double u = 2.0 * unit_double(keyed_bits(key, counter)) - 1.0;
    const double v = 2.0 * unit_double(keyed_bits(key, counter + 1)) - 1.0;
    const double radius2 = u * u + v * v;
    if (radius2 <= 0.0 || radius2 >= 1.0) continue;
    const double factor = std::sqrt(-2.0 * portable_log(radius2) / radius2);
    return {mean + std_dev * (u * factor), mean + std_dev * (v * factor)};
  }
  return {mean, mean};
}

template <class T>
void store(std::byte* out, T value) {
  std::memcpy(out, &value, sizeof value);
}

template <class T>
T clamp_to(double value) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (std::isnan(value)) return T{0};
  if (value <= lo) return std::numeric_limits<T>::min();
  if (value >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(value);
}

// Integer rounding: uniform draws floor into [lo, hi); everything else rounds to nearest.
double integer_value(const GeneratorSpec& spec, double value) {
  if (spec.kind == GeneratorKind::kUniform) {
    const double floored = std::floor(value);
    const double top = std::ceil(spec.hi) - 1.0;
    return floored > top ? top : floored;
  }
  return std::round(value);
}

core::Status convert(const GeneratorSpec& spec, core::DType dtype, double value, std::byte* out) {
  switch (dtype) {
    case core::DType::kF64:
      store(out, value);
      return {};
    case core::DType::kF32:
      store(out, static_cast<float>(value));
      return {};
    case core::DType::kBF16:
      store(out, bf16_from_float(static_cast<float>(value)));
      return {};
    case core::DType::kF16:
      store(out, f16_from_float(static_cast<float>(value)));
      return {};
    case core::DType::kI8:
      store(out, clamp_to<std::int8_t>(integer_value(spec, value)));
      return {};
    case core::DType::kU8:
      store(out, clamp_to<std::uint8_t>(integer_value(spec, value)));
      return {};
    case core::DType::kI16:
      store(out, clamp_to<std::int16_t>(integer_value(spec, value)));
      return {};
    case core::DType::kI32:
      store(out, clamp_to<std::int32_t>(integer_value(spec, value)));
      return {};
    case core::DType::kI64:
      store(out, clamp_to<std::int64_t>(integer_value(spec, value)));
      return {};
    case core::DType::kBool:
      store(out, static_cast<std::uint8_t>(integer_value(spec, value) != 0.0 ? 1 : 0));
      return {};
    case core::DType::kFP8E4M3:
      // Through float, saturating as __NV_SATFINITE does: a draw past 448 becomes +-448.
      store(out, core::float_to_fp8_e4m3(static_cast<float>(value)));
      return {};
    case core::DType::kFP8E5M2:
      store(out, core::float_to_fp8_e5m2(static_cast<float>(value)));
      return {};
  }
  return core::Error{core::ErrorCode::kInvalidArgument,
                     "no host generator for " + std::string(core::dtype_name(dtype)) + " values"};
}

// Routing (MoE expert ids). Row r of a [tokens, topk] tensor holds the topk experts token r is
// routed to, most preferred first: a draw without replacement from the popularity weights
// w(e) = (1 + rank(e))^-skew (Zipf; rank a seeded permutation of the experts, so the popular
// experts are not the low ids), which is the Plackett-Luce model. It is sampled exactly by
// Gumbel-top-k: the topk largest keys log w(e) + G(r, e), G standard Gumbel noise.
constexpr std::uint64_t kRoutingRankSalt = 0x2B0D11A7E5ULL;

// log w(e) for every expert of the routing spec.
std::vector<double> routing_log_weights(const GeneratorSpec& spec, std::uint64_t seed) {
  const auto experts = static_cast<std::uint64_t>(spec.max);
  std::vector<double> log_weight(experts);
  for (std::uint64_t e = 0; e < experts; ++e) {
    const std::uint64_t rank = permuted_index(seed ^ kRoutingRankSalt, e, experts);
    log_weight[e] = spec.skew == 0.0 ? 0.0 : -spec.skew * portable_log(1.0 + rank);
  }
  return log_weight;
}

// The experts of row `row`, most preferred first, into `row_experts` (topk entries). `keys` is
// scratch of one entry per expert.
void routing_row(const GeneratorSpec& spec, std::uint64_t key, std::uint64_t row,
                 const std::vector<double>& log_weight,
                 std::vector<std::pair<double, std::int64_t>>& keys,
                 std::vector<std::int64_t>& row_experts) {
  const auto experts = static_cast<std::uint64_t>(spec.max);
  keys.resize(experts);
  for (std::uint64_t e = 0; e < experts; ++e) {
    // u in (0, 1): 53 random bits, centred in their interval so neither end is reached.
    const double u =
        (static_cast<double>(keyed_bits(key, row * experts + e) >> 11) + 0.5) * 0x1.0p-53;
    const double gumbel = -portable_log(-portable_log(u));
    keys[e] = {log_weight[e] + gumbel, static_cast<std::int64_t>(e)};
  }
  const auto k = static_cast<std::ptrdiff_t>(spec.topk);
  // Larger key first; an exact tie (never seen in practice) goes to the lower expert id.
  std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  row_experts.resize(static_cast<std::size_t>(k));
  for (std::ptrdiff_t j = 0; j < k; ++j) row_experts[j] = keys[j].second;
}

bool routing_spec_valid(const GeneratorSpec& spec) {
  return spec.max > 0 && spec.topk > 0 && spec.topk <= spec.max && spec.skew >= 0.0 &&
         std::isfinite(spec.skew);
}

// Elements first_index .. of a routing stream, one row computed per row touched.
core::Status routing_into(const GeneratorSpec& spec, core::DType dtype, std::uint64_t seed,
                          std::span<std::byte> out, std::uint64_t first_index) {
  if (!routing_spec_valid(spec)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "routing needs experts > 0, 1 <= topk <= experts and a finite skew >= 0"};
  }
  const std::size_t size = core::dtype_size(dtype);
  const std::size_t count = out.size() / size;
  const auto k = static_cast<std::uint64_t>(spec.topk);
  const std::vector<double> log_weight = routing_log_weights(spec, seed);
  const std::uint64_t key = splitmix64(seed);
  std::vector<std::pair<double, std::int64_t>> keys;
  std::vector<std::int64_t> row_experts;
  std::uint64_t current_row = ~std::uint64_t{0};
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t index = first_index + i;
    if (index / k != current_row) {
      current_row = index / k;
      routing_row(spec, key, current_row, log_weight, keys, row_experts);
    }
    const auto value = static_cast<double>(row_experts[index % k]);
    if (auto status = convert(spec, dtype, value, out.data() + i * size); !status) return status;
  }
  return {};
}

// Power-law offsets (CSR row offsets, jagged bag offsets): element i <= rows is the start of
// segment i of `rows` segments sharing `total` items, the segment of rank r sized in proportion
// to (1 + r)^-skew (a rank-size power law; a degree distribution P(d) ~ d^-(1 + 1/skew)). Ranks
// are rotated by a seeded start, so the largest segments begin at a seeded row; the sizes are the
// increments of the continuous rank-size integral C(x) = int_0^x (1 + u)^-skew du, which keeps
// every offset a closed form of (seed, i): offset i = floor(total * (C(start + i) - C(start)) /
// C(rows)), wrapping past the last rank. Offsets 0 and rows are exactly 0 and total; elements past
// rows repeat total.
constexpr std::uint64_t kOffsetsStartSalt = 0x0FF5E75EEDULL;

// e^y from IEEE-exact operations (y = k ln 2 + r, |r| <= ln 2 / 2, Taylor series of e^r).
double portable_exp(double y) {
  if (y > 700.0) return std::numeric_limits<double>::infinity();
  if (y < -700.0) return 0.0;
  constexpr double kLn2High = 0.693147180369123816490;  // ln 2 to 32 bits: k * kLn2High is exact
  constexpr double kLn2Low = 1.90821492927058770002e-10;
  const double k = std::nearbyint(y / kLn2);
  const double r = (y - k * kLn2High) - k * kLn2Low;
  double term = 1.0;
  double sum = 1.0;
  for (int n = 1; n <= 16; ++n) {
    term *= r / n;
    sum += term;
  }
  return std::ldexp(sum, static_cast<int>(k));
}

// The rank-size integral C(x) of the offsets and zipf generators.
double rank_size_integral(double x, double skew) {
  if (skew == 0.0) return x;
  const double log1px = portable_log(1.0 + x);
  if (skew == 1.0) return log1px;
  return (portable_exp((1.0 - skew) * log1px) - 1.0) / (1.0 - skew);
}

// The x with C(x) = y, for y in [0, C(x_max)): y (skew 0), e^y - 1 (skew 1), otherwise
// (1 + y (1 - skew))^(1 / (1 - skew)) - 1, whose base is positive over that range.
double inverse_rank_size_integral(double y, double skew) {
  if (skew == 0.0) return y;
  if (skew == 1.0) return portable_exp(y) - 1.0;
  const double exponent = 1.0 - skew;
  return portable_exp(portable_log(1.0 + y * exponent) / exponent) - 1.0;
}

double power_law_offset(const GeneratorSpec& spec, std::uint64_t seed, std::uint64_t index) {
  const auto rows = static_cast<std::uint64_t>(spec.rows > 0 ? spec.rows : 1);
  const auto total = static_cast<double>(spec.max);
  if (index == 0) return 0.0;
  if (index >= rows) return total;
  const std::uint64_t start = stream_bits(seed ^ kOffsetsStartSalt, 0) % rows;
  const double whole = rank_size_integral(static_cast<double>(rows), spec.skew);
  const double before = rank_size_integral(static_cast<double>(start), spec.skew);
  const std::uint64_t end = start + index;
  const double covered =
      end <= rows ? rank_size_integral(static_cast<double>(end), spec.skew) - before
                  : whole - before + rank_size_integral(static_cast<double>(end - rows), spec.skew);
  // Floor, except that a value within rounding of an integer is that integer (equal segments
  // stay equal whatever the last bits of the logarithms).
  const double scaled = total * (covered / whole);
  const double nearest = std::nearbyint(scaled);
  return std::min(total, std::fabs(scaled - nearest) < 1e-7 ? nearest : std::floor(scaled));
}

// Zipf ids (embedding lookups, hashed categorical features): element i draws a rank r in
// [0, max) with P(rank < k) = C(k) / C(max), C the rank-size integral above, by solving
// C(x) = u C(max) in closed form for the element's uniform draw u (the uniform generator's) and
// flooring x; rank r is popular in proportion to about (1 + r)^-skew. The id is element r of a
// seeded permutation of [0, max) (permuted_index), so the hot ids lie anywhere in the table, as
// hashed ids do, not at 0, 1, 2, ...
constexpr std::uint64_t kZipfRankSalt = 0x21F0DA7E5ULL;

bool zipf_spec_valid(const GeneratorSpec& spec) {
  return spec.max > 0 && spec.skew >= 0.0 && spec.skew <= 4.0;
}

double zipf_id(const GeneratorSpec& spec, std::uint64_t seed, std::uint64_t index) {
  const auto max = static_cast<std::uint64_t>(spec.max > 0 ? spec.max : 1);
  const auto n = static_cast<double>(max);
  const double u = unit_double(stream_bits(seed, index));
  const double x = inverse_rank_size_integral(u * rank_size_integral(n, spec.skew), spec.skew);
  // Rounding can carry x to max (or a hair below 0); clamp in integers (max may exceed 2^53).
  std::uint64_t rank = 0;
  if (x >= n) {
    rank = max - 1;
  } else if (x > 0.0) {
    rank = std::min(max - 1, static_cast<std::uint64_t>(x));
  }
  return static_cast<double>(permuted_index(seed ^ kZipfRankSalt, rank, max));
}

// Surface points: element i is coordinate i mod 3 of point i / 3, a point of a fixed scene in
// the unit box: a floor (z = 0, x and y uniform in [0, 1)) holds a third of the points; the
// others lie on `objects` spheres resting on the floor, the sphere drawn uniformly, the point
// uniformly on its surface (a normalised normal triple). Sphere o has radius 0.05 + 0.1 u and
// centre (0.15 + 0.7 u', 0.15 + 0.7 u'', radius), u, u', u'' hashed from o alone, so every seed
// samples the same surfaces (two tensors of one case are samples of one scene).
constexpr std::uint64_t kSurfaceSceneKey = 0x5CE7E0B1EC75ULL;
constexpr std::uint64_t kSurfaceChoiceSalt = 0xC401CE5ULL;

double surface_point_coordinate(const GeneratorSpec& spec, std::uint64_t seed,
                                std::uint64_t index) {
  const std::uint64_t point = index / 3;
  const int coordinate = static_cast<int>(index % 3);
  const std::uint64_t key = splitmix64(seed);
  const std::uint64_t choice = keyed_bits(splitmix64(seed ^ kSurfaceChoiceSalt), point);
  const auto objects = static_cast<std::uint64_t>(spec.max > 0 ? spec.max : 1);
  if (unit_double(choice) < 1.0 / 3.0) {
    if (coordinate == 2) return 0.0;
    return unit_double(keyed_bits(key, point * 2 + static_cast<std::uint64_t>(coordinate)));
  }
  const std::uint64_t object = (choice >> 11) % objects;
  const double radius = 0.05 + 0.1 * unit_double(keyed_bits(kSurfaceSceneKey, object * 3));
  const double centre[3] = {0.15 + 0.7 * unit_double(keyed_bits(kSurfaceSceneKey, object * 3 + 1)),
                            0.15 + 0.7 * unit_double(keyed_bits(kSurfaceSceneKey, object * 3 + 2)),
                            radius};
  const auto first = randn_pair(key, point * 2, 0.0, 1.0);
  const auto second = randn_pair(key, point * 2 + 1, 0.0, 1.0);
  const double direction[3] = {first.first, first.second, second.first};
  const double norm = std::sqrt(direction[0] * direction[0] + direction[1] * direction[1] +
                                direction[2] * direction[2]);
  if (!(norm > 0.0)) return centre[coordinate] + (coordinate == 2 ? radius : 0.0);
  return centre[coordinate] + radius * direction[coordinate] / norm;
}

// Detector candidates (the detections generator): box i belongs to image i / per_image. Which
// box is which is a function of i alone (kDetectionLayoutKey), so the boxes, scores and classes
// tensors of a case, each drawn from its own seed, describe the same boxes:
//  - a tenth of the boxes (never the first of an image) are multi-label copies of the box before
//    them: the same coordinates under another class (ultralytics' multi_label NMS input);
//  - of the rest, 12 % are background detections: a box of their own, 8 to 64 px;
//  - the others are duplicates of object o = floor(objects * u^2) of their image, u uniform:
//    large, early objects collect more anchors, as they do in a dense head.
// An object has a centre uniform in the image, a log-uniform scale of 16 px to 0.6 * size and a
// log-uniform aspect ratio of 1/3 to 3; each duplicate moves each edge by a triangular offset of
// up to 15 % of the object's width or height (pairs of duplicates then overlap with IoU around
// 0.6 to 0.9, on both sides of the usual 0.7 threshold). Coordinates are clamped to the image.
// An object's confidence c is uniform in [0.35, 0.95] and a duplicate scores c * (0.55 + 0.45
// u); a copy scores its box's score times 0.3 u, a background box 0.05 + 0.3 u. Each image
// shows one to four classes of `classes`; an object's class is one of them, a copy's class any
// other; the value is image * classes + class (torchvision batched_nms idxs over a batch).
constexpr std::uint64_t kDetectionLayoutKey = 0xDE7EC7105ULL;
constexpr std::uint64_t kDetectionObjectSalt = 0x0B1EC7ULL;
constexpr std::uint64_t kDetectionPaletteSalt = 0xC0105ULL;

enum class DetectionKind { kObject, kBackground, kCopy };

struct DetectionSlot {
  DetectionKind kind;
  std::uint64_t image;
  std::uint64_t object;  // kObject: the object's index in the batch
};

DetectionSlot detection_slot(const DetectionScene& scene, std::uint64_t box) {
  const auto per_image = static_cast<std::uint64_t>(scene.per_image > 0 ? scene.per_image : 1);
  const auto objects = static_cast<std::uint64_t>(scene.objects > 0 ? scene.objects : 1);
  const std::uint64_t image = box / per_image;
  if (box % per_image != 0 && unit_double(keyed_bits(kDetectionLayoutKey, box * 3)) < 0.1) {
    return {DetectionKind::kCopy, image, 0};
  }
  if (unit_double(keyed_bits(kDetectionLayoutKey, box * 3 + 1)) < 0.12) {
    return {DetectionKind::kBackground, image, 0};
  }
  const double u = unit_double(keyed_bits(kDetectionLayoutKey, box * 3 + 2));
  const auto o =
      std::min(objects - 1, static_cast<std::uint64_t>(static_cast<double>(objects) * u * u));
  return {DetectionKind::kObject, image, image * objects + o};
}

// The box a copy repeats (the nearest earlier box of its image that is not a copy).
std::uint64_t detection_source(const DetectionScene& scene, std::uint64_t box) {
  while (detection_slot(scene, box).kind == DetectionKind::kCopy) --box;
  return box;
}

double log_uniform(double u, double lo, double hi) {
  return portable_exp(portable_log(lo) + u * (portable_log(hi) - portable_log(lo)));
}

double detection_coordinate(const DetectionScene& scene, std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t box = detection_source(scene, index / 4);
  const int coordinate = static_cast<int>(index % 4);
  const std::uint64_t key = splitmix64(seed);
  const DetectionSlot slot = detection_slot(scene, box);
  const double size = scene.size;
  double centre[2], extent[2], jitter = 0.0;
  if (slot.kind == DetectionKind::kBackground) {
    const std::uint64_t own = splitmix64(seed ^ kDetectionObjectSalt ^ 0x8ACC6ULL);
    centre[0] = size * unit_double(keyed_bits(own, box * 4));
    centre[1] = size * unit_double(keyed_bits(own, box * 4 + 1));
    extent[0] = log_uniform(unit_double(keyed_bits(own, box * 4 + 2)), 8.0, 64.0);
    extent[1] = log_uniform(unit_double(keyed_bits(own, box * 4 + 3)), 8.0, 64.0);
  } else {
    const std::uint64_t object = splitmix64(seed ^ kDetectionObjectSalt);
    const double scale =
        log_uniform(unit_double(keyed_bits(object, slot.object * 4)), 16.0, 0.6 * size);
    const double aspect = std::sqrt(
        log_uniform(unit_double(keyed_bits(object, slot.object * 4 + 1)), 1.0 / 3.0, 3.0));
    centre[0] = size * unit_double(keyed_bits(object, slot.object * 4 + 2));
    centre[1] = size * unit_double(keyed_bits(object, slot.object * 4 + 3));
    extent[0] = scale * aspect;
    extent[1] = scale / aspect;
    const double a =
        unit_double(keyed_bits(key, box * 8 + static_cast<std::uint64_t>(coordinate) * 2));
    const double b =
        unit_double(keyed_bits(key, box * 8 + static_cast<std::uint64_t>(coordinate) * 2 + 1));
    jitter = 0.15 * extent[coordinate % 2] * (a + b - 1.0);
  }
  const double side = coordinate < 2 ? -0.5 : 0.5;
  const double value = centre[coordinate % 2] + side * extent[coordinate % 2] + jitter;
  return std::min(std::max(value, 0.0), size);
}

double detection_score(const DetectionScene& scene, std::uint64_t seed, std::uint64_t box) {
  const std::uint64_t key = splitmix64(seed);
  const DetectionSlot slot = detection_slot(scene, box);
  const double u = unit_double(keyed_bits(key, box));
  switch (slot.kind) {
    case DetectionKind::kCopy:
      return detection_score(scene, seed, detection_source(scene, box)) * 0.3 * u;
    case DetectionKind::kBackground:
      return 0.05 + 0.3 * u;
    case DetectionKind::kObject:
      break;
  }
  const double confidence =
      0.35 + 0.6 * unit_double(keyed_bits(splitmix64(seed ^ kDetectionObjectSalt), slot.object));
  return confidence * (0.55 + 0.45 * u);
}

double detection_class(const DetectionScene& scene, std::uint64_t seed, std::uint64_t box) {
  const auto classes = static_cast<std::uint64_t>(scene.classes > 0 ? scene.classes : 1);
  const std::uint64_t key = splitmix64(seed);
  const DetectionSlot slot = detection_slot(scene, box);
  const auto image_class = [&](std::uint64_t pick) {
    const std::uint64_t palette = splitmix64(seed ^ kDetectionPaletteSalt);
    const std::uint64_t shown = 1 + keyed_bits(palette, slot.image * 8) % 4;
    return keyed_bits(palette, slot.image * 8 + 1 + pick % shown) % classes;
  };
  std::uint64_t value = 0;
  switch (slot.kind) {
    case DetectionKind::kCopy: {
      const std::uint64_t source =
          static_cast<std::uint64_t>(detection_class(scene, seed, detection_source(scene, box))) %
          classes;
      value = classes > 1 ? (source + 1 + keyed_bits(key, box) % (classes - 1)) % classes : 0;
      break;
    }
    case DetectionKind::kBackground:
      value = image_class(keyed_bits(key, box));
      break;
    case DetectionKind::kObject:
      value = image_class(keyed_bits(splitmix64(seed ^ kDetectionObjectSalt), slot.object));
      break;
  }
  return static_cast<double>(slot.image * classes + value);
}

// M-RoPE position ids (Qwen2-VL, arXiv:2409.12191 section 2.1; transformers'
// Qwen2VLModel.get_rope_index, vLLM's MRotaryEmbedding.get_input_positions): element i is
// component i / tokens (0 temporal, 1 height, 2 width) of token i mod tokens. A sequence repeats
// a period of `text` text tokens, each at t = h = w = the next position, then one vision block
// of frames x grid_h x grid_w merged patches, whose patch (f, y, x) sits at
// (st + f * temporal_step, st + y, st + x), st the position after the text before it; the next
// text begins one past the block's largest component. Sequence s starts at a position drawn from
// (seed, s) such that its last position stays below `max`.
constexpr std::uint64_t kMropeStartSalt = 0x3D0A1E57A27ULL;

struct MropePeriod {
  std::int64_t tokens;   // tokens of one text run and one vision block
  std::int64_t advance;  // positions one period takes
};

MropePeriod mrope_period(const MropeLayout& layout) {
  const std::int64_t vision = layout.frames * layout.grid_h * layout.grid_w;
  if (vision == 0) return {layout.text, layout.text};
  const std::int64_t extent =
      std::max({(layout.frames - 1) * layout.temporal_step, layout.grid_h - 1, layout.grid_w - 1});
  return {layout.text + vision, layout.text + extent + 1};
}

// The three components of token j (< sequence) of a sequence starting at position 0.
std::array<std::int64_t, 3> mrope_components(const MropeLayout& layout, std::int64_t j) {
  const MropePeriod period = mrope_period(layout);
  const std::int64_t base = (j / period.tokens) * period.advance;
  const std::int64_t r = j % period.tokens;
  if (r < layout.text) return {base + r, base + r, base + r};
  const std::int64_t v = r - layout.text;
  const std::int64_t per_frame = layout.grid_h * layout.grid_w;
  const std::int64_t st = base + layout.text;
  return {st + (v / per_frame) * layout.temporal_step, st + (v % per_frame) / layout.grid_w,
          st + v % layout.grid_w};
}

double mrope_position(const GeneratorSpec& spec, std::uint64_t seed, std::uint64_t index) {
  const MropeLayout& layout = spec.mrope;
  if (layout.tokens <= 0 || layout.sequence <= 0 || mrope_period(layout).tokens <= 0) return 0.0;
  const auto tokens = static_cast<std::uint64_t>(layout.tokens);
  const auto component = static_cast<std::size_t>((index / tokens) % 3);
  const auto token = static_cast<std::int64_t>(index % tokens);
  const std::int64_t sequence = token / layout.sequence;
  const std::int64_t span = mrope_sequence_span(layout);
  const auto starts = static_cast<std::uint64_t>(spec.max > span ? spec.max - span + 1 : 1);
  const std::uint64_t start =
      stream_bits(seed ^ kMropeStartSalt, static_cast<std::uint64_t>(sequence)) % starts;
  return static_cast<double>(start) +
         static_cast<double>(mrope_components(layout, token % layout.sequence)[component]);
}

}  // namespace

std::int64_t mrope_sequence_span(const MropeLayout& layout) {
  const MropePeriod period = mrope_period(layout);
  if (layout.sequence <= 0 || period.tokens <= 0) return 0;
  const std::int64_t full = layout.sequence / period.tokens;
  const std::int64_t rest = layout.sequence % period.tokens;
  const std::int64_t before = full * period.advance;
  if (rest <= layout.text) return before + rest;
  // A partial vision block: its first `seen` patches in (frame, row, column) order.
  const std::int64_t seen = rest - layout.text;
  const std::int64_t per_frame = layout.grid_h * layout.grid_w;
  const std::int64_t last_frame = (seen - 1) / per_frame;
  const std::int64_t last_row = seen >= per_frame ? layout.grid_h - 1 : (seen - 1) / layout.grid_w;
  const std::int64_t last_column = seen >= layout.grid_w ? layout.grid_w - 1 : seen - 1;
  return before + layout.text +
         std::max({last_frame * layout.temporal_step, last_row, last_column}) + 1;
}

double portable_log(double x) {
  if (!(x > 0.0))
    return x == 0.0 ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(x)) return x;
  int exponent = 0;
  double mantissa = std::frexp(x, &exponent);  // exact: x = mantissa * 2^exponent, [0.5, 1)
  if (mantissa < kSqrtHalf) {
    mantissa *= 2.0;  // exact
    --exponent;
  }
  // ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716; the series to s^27 is exact to
  // well below one ulp of the result.
  const double s = (mantissa - 1.0) / (mantissa + 1.0);
  const double s2 = s * s;
  // 1/k for odd k, computed once: the same correctly rounded doubles the divisions give, without
  // thirteen divisions per logarithm.
  static constexpr auto kReciprocals = [] {
    std::array<double, 28> r{};
    for (int k = 1; k <= 27; k += 2) r[k] = 1.0 / k;
    return r;
  }();
  double series = kReciprocals[27];
  for (int k = 25; k >= 1; k -= 2) series = kReciprocals[k] + s2 * series;
  return static_cast<double>(exponent) * kLn2 + 2.0 * s * series;
}

double generated_value(const GeneratorSpec& spec, std::uint64_t seed, std::uint64_t index) {
  switch (spec.kind) {
    case GeneratorKind::kRandn: {
      const auto pair = randn_pair(splitmix64(seed), index >> 1, spec.mean, spec.std);
      return (index & 1) == 0 ? pair.first : pair.second;
    }
    case GeneratorKind::kUniform:
      return spec.lo + (spec.hi - spec.lo) * unit_double(stream_bits(seed, index));
    case GeneratorKind::kConstant:
      return spec.value;
    case GeneratorKind::kOnes:
      return 1.0;
    case GeneratorKind::kZeros:
      return 0.0;
    case GeneratorKind::kPositions: {
      const auto max = static_cast<std::uint64_t>(spec.max > 0 ? spec.max : 1);
      const std::uint64_t start = stream_bits(seed, ~std::uint64_t{0}) % max;
      return static_cast<double>((start + index % max) % max);
    }
    case GeneratorKind::kPermutation: {
      if (spec.pad > 0.0 && unit_double(stream_bits(seed ^ kPadSalt, index)) < spec.pad) {
        return -1.0;
      }
      return static_cast<double>(permuted_index(seed, index, static_cast<std::uint64_t>(spec.max)));
    }
    case GeneratorKind::kRopeCache: {
      // Row p, column j of a [max_position, dim] table: cos in the first half, sin in the second,
      // inverse frequency theta^(-2k / dim) for k = j mod dim/2 (vLLM's cos_sin_cache layout).
      const auto dim = static_cast<std::uint64_t>(spec.dim);
      const std::uint64_t half = dim / 2;
      const std::uint64_t position = index / dim;
      const std::uint64_t k = (index % dim) % half;
      const double inv_freq =
          std::pow(spec.theta, -2.0 * static_cast<double>(k) / static_cast<double>(dim));
      const double angle = static_cast<double>(position) * inv_freq;
      return (index % dim) < half ? std::cos(angle) : std::sin(angle);
    }
    case GeneratorKind::kList:
      return spec.list.empty() ? 0.0 : spec.list[index % spec.list.size()];
    case GeneratorKind::kRouting: {
      if (!routing_spec_valid(spec)) break;
      const auto k = static_cast<std::uint64_t>(spec.topk);
      std::vector<std::pair<double, std::int64_t>> keys;
      std::vector<std::int64_t> row_experts;
      routing_row(spec, splitmix64(seed), index / k, routing_log_weights(spec, seed), keys,
                  row_experts);
      return static_cast<double>(row_experts[index % k]);
    }
    case GeneratorKind::kPowerLawOffsets:
      return power_law_offset(spec, seed, index);
    case GeneratorKind::kZipf:
      return zipf_id(spec, seed, index);
    case GeneratorKind::kSurfacePoints:
      return surface_point_coordinate(spec, seed, index);
    case GeneratorKind::kMropePositions:
      return mrope_position(spec, seed, index);
    case GeneratorKind::kDetections:
      switch (spec.detections.field) {
        case DetectionField::kBoxes:
          return detection_coordinate(spec.detections, seed, index);
        case DetectionField::kScores:
          return detection_score(spec.detections, seed, index);
        case DetectionField::kClasses:
          return detection_class(spec.detections, seed, index);
      }
      break;
    case GeneratorKind::kCaptured:
      break;
  }
  return 0.0;
}

namespace {

// Captured values: element i is element (i mod numel) of the recorded tensor, so a timing pool
// larger than the recording sees it rotated. The dtype must match the task tensor's.
core::Status captured_into(const GeneratorSpec& spec, core::DType dtype, std::span<std::byte> out,
                           std::uint64_t first_index) {
  auto values = captured_values(spec, dtype);
  if (!values) return values.error();
  const CapturedTensor* tensor = values->tensor;
  const std::size_t size = core::dtype_size(dtype);
  const std::size_t numel = tensor->bytes.size() / size;
  if (numel == 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "captured tensor '" + spec.tensor + "' is empty"};
  }
  const std::size_t count = out.size() / size;
  for (std::size_t i = 0; i < count;) {
    const std::size_t source = (first_index + i) % numel;
    const std::size_t run = std::min(count - i, numel - source);
    std::memcpy(out.data() + i * size, tensor->bytes.data() + source * size, run * size);
    i += run;
  }
  return {};
}

}  // namespace

core::Result<CapturedValues> captured_values(const GeneratorSpec& spec, core::DType dtype) {
  const auto path = spec.file_path.empty() ? std::filesystem::path(spec.file) : spec.file_path;
  auto file = cached_safetensors(path);
  if (!file) return file.error();
  const CapturedTensor* tensor = (*file)->find(spec.tensor);
  const std::string shown = spec.file.empty() ? path.filename().string() : spec.file;
  if (tensor == nullptr) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "captured file " + shown + " has no tensor '" + spec.tensor + "'"};
  }
  if (tensor->dtype != dtype) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "captured tensor '" + spec.tensor + "' is " +
                           std::string(core::dtype_name(tensor->dtype)) + ", the tensor is " +
                           std::string(core::dtype_name(dtype))};
  }
  return CapturedValues{std::move(file).value(), tensor};
}

core::Status check_stream_range(const GeneratorSpec& spec, std::uint64_t first_index,
                                std::uint64_t count) {
  if (const auto length = stream_length(spec); length && first_index + count > *length) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "a permutation of " + std::to_string(spec.max) +
                           " values cannot fill elements up to index " +
                           std::to_string(first_index + count - 1) + " with distinct values"};
  }
  return {};
}

bool uses_seed(const GeneratorSpec& spec) {
  switch (spec.kind) {
    case GeneratorKind::kRandn:
    case GeneratorKind::kUniform:
    case GeneratorKind::kPositions:
    case GeneratorKind::kPermutation:
    case GeneratorKind::kRouting:
    case GeneratorKind::kPowerLawOffsets:
    case GeneratorKind::kZipf:
    case GeneratorKind::kSurfacePoints:
    case GeneratorKind::kMropePositions:
    case GeneratorKind::kDetections:
      return true;
    case GeneratorKind::kConstant:
    case GeneratorKind::kOnes:
    case GeneratorKind::kZeros:
    case GeneratorKind::kCaptured:
    case GeneratorKind::kRopeCache:
    case GeneratorKind::kList:
      return false;
  }
  return true;
}

std::optional<std::uint64_t> stream_length(const GeneratorSpec& spec) {
  if (spec.kind == GeneratorKind::kPermutation) return static_cast<std::uint64_t>(spec.max);
  return std::nullopt;
}

core::Status generate_into(const GeneratorSpec& spec, core::DType dtype, std::uint64_t seed,
                           std::span<std::byte> out, std::uint64_t first_index) {
  const std::size_t size = core::dtype_size(dtype);
  if (out.size() % size != 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "buffer of " + std::to_string(out.size()) +
                           " bytes is not a whole number of " +
                           std::string(core::dtype_name(dtype)) + " elements"};
  }
  if (spec.kind == GeneratorKind::kRouting)
    return routing_into(spec, dtype, seed, out, first_index);
  const std::size_t count = out.size() / size;
  const std::uint64_t key = splitmix64(seed);
  if (spec.kind == GeneratorKind::kCaptured) return captured_into(spec, dtype, out, first_index);
  if (auto status = check_stream_range(spec, first_index, count); !status) return status;
  if (spec.kind == GeneratorKind::kRopeCache && spec.dim < 2) {
    return core::Error{core::ErrorCode::kInvalidArgument, "rope_cache needs an even dim >= 2"};
  }
  if (spec.kind == GeneratorKind::kZipf && !zipf_spec_valid(spec)) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "zipf needs max > 0 and a skew in [0, 4]"};
  }
  for (std::size_t i = 0; i < count;) {
    const std::uint64_t index = first_index + i;
    if (spec.kind == GeneratorKind::kRandn && (index & 1) == 0 && i + 1 < count) {
      // Both elements of a polar-method pair at once: half the work of two lookups.
      const auto pair = randn_pair(key, index >> 1, spec.mean, spec.std);
      if (auto status = convert(spec, dtype, pair.first, out.data() + i * size); !status) {
        return status;
      }
      (void)convert(spec, dtype, pair.second, out.data() + (i + 1) * size);
      i += 2;
      continue;
    }
    const double value = generated_value(spec, seed, index);
    if (auto status = convert(spec, dtype, value, out.data() + i * size); !status) return status;
    ++i;
  }
  return {};
}

core::Result<std::vector<std::byte>> generate(const GeneratorSpec& spec, core::DType dtype,
                                              std::int64_t count, std::uint64_t seed) {
  if (count < 0) {
    return core::Error{core::ErrorCode::kInvalidArgument, "negative element count"};
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(count) * core::dtype_size(dtype));
  if (auto status = generate_into(spec, dtype, seed, bytes); !status) return status.error();
  return bytes;
}

core::Result<std::vector<std::byte>> generate_tensor(const Case& c, const TensorSpec& tensor,
                                                     std::uint64_t case_seed_value,
                                                     std::uint64_t draw) {
  const auto spec = c.values.find(tensor.name);
  if (spec == c.values.end()) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "tensor '" + tensor.name + "' has no values in case '" + c.name +
                           "' (outputs are poisoned by the runner, not generated)"};
  }
  const auto count = element_count(tensor, c);
  if (!count) return count.error();
  return generate(spec->second, tensor.dtype, *count,
                  tensor_seed(case_seed_value, tensor.name, draw));
}

std::uint16_t bf16_from_float(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x0040);  // quiet
  const std::uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t f16_from_float(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000);
  const std::uint32_t magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return static_cast<std::uint16_t>(sign | 0x7E00);   // NaN
  if (magnitude >= 0x477FF000) return static_cast<std::uint16_t>(sign | 0x7C00);  // >= 65520
  if (magnitude < 0x38800000) {
    // Subnormal half (or zero): value = mantissa * 2^-24, rounded to nearest even.
    if (magnitude < 0x33000000) return sign;  // below half of the smallest subnormal
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7FFFFF) | 0x800000;
    const std::uint32_t shift = 126 - exponent;  // 14..24: value = mantissa * 2^(exponent - 150)
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t rebased = magnitude - (std::uint32_t{112} << 23);
  rebased += 0x0FFF + ((rebased >> 13) & 1);
  return static_cast<std::uint16_t>(sign | (rebased >> 13));
}

float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1F;
  const std::uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace crucible::tasks
