// Output comparison, poison and canary patterns: tight per-dtype loops over host copies.
#include "judge/compare.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"

namespace crucible::judge {
namespace {

using core::DType;

template <class T>
T load(const unsigned char* base, std::size_t index) {
  T value;
  std::memcpy(&value, base + index * sizeof(T), sizeof(T));
  return value;
}

template <class T>
void store(unsigned char* base, std::size_t index, T value) {
  std::memcpy(base + index * sizeof(T), &value, sizeof(T));
}

// The poison patterns documented in compare.hpp, as raw bits of the element's width.
std::uint64_t poison_bits(DType dtype, int variant) {
  const bool second = (variant & 1) != 0;
  switch (dtype) {
    case DType::kF32:
      return second ? 0x7FEDBEEFu : 0x7FC0FFEEu;
    case DType::kF64:
      return second ? 0x7FFDEADBEEF00000ull : 0x7FF80000C0FFEE00ull;
    case DType::kBF16:
      return second ? 0xFFEAu : 0x7FD5u;
    case DType::kF16:
      return second ? 0xFEA5u : 0x7F5Au;
    case DType::kFP8E4M3:
      return second ? 0xFFu : 0x7Fu;
    case DType::kFP8E5M2:
      return second ? 0xFDu : 0x7Du;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return second ? 0x5Au : 0xA5u;
    case DType::kI16:
      return second ? 0x5A5Au : 0xA5A5u;
    case DType::kI32:
      return second ? 0x5A5A5A5Au : 0xA5A5A5A5u;
    case DType::kI64:
      return second ? 0x5A5A5A5A5A5A5A5Aull : 0xA5A5A5A5A5A5A5A5ull;
  }
  throw core::InternalError("poison_bits: unknown dtype");
}

// Everything one pass over the elements learns; folded into a CompareReport afterwards.
struct Tally {
  std::size_t mismatches = 0;
  std::size_t unwritten = 0;
  std::size_t nan_mismatches = 0;
  std::size_t reference_nans = 0;
  std::size_t first = 0;
  bool first_unwritten = false;
  double first_got = 0.0;
  double first_expected = 0.0;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  bool candidate_nonzero = false;
  bool reference_nonzero = false;

  void fail(std::size_t index, double got, double expected, bool unwritten_element) {
    if (mismatches == 0) {
      first = index;
      first_got = got;
      first_expected = expected;
      first_unwritten = unwritten_element;
    }
    ++mismatches;
  }
};

// fp8 decodes through 256-entry tables: one load instead of the decoder's branches.
template <auto Decode>
constexpr std::array<float, 256> fp8_table() {
  std::array<float, 256> table{};
  for (std::size_t bits = 0; bits < table.size(); ++bits) {
    table[bits] = Decode(static_cast<std::uint8_t>(bits));
  }
  return table;
}
constexpr std::array<float, 256> kE4M3Values = fp8_table<core::fp8_e4m3_to_float>();
constexpr std::array<float, 256> kE5M2Values = fp8_table<core::fp8_e5m2_to_float>();

// f16 likewise, through a 256 KiB table built on first use (thread-safe static): about twice the
// throughput of the branchy decoder, and real outputs touch only a few of its cache lines.
const std::array<float, 65536>& f16_values() {
  static const std::array<float, 65536> table = [] {
    std::array<float, 65536> values{};
    for (std::size_t bits = 0; bits < values.size(); ++bits) {
      values[bits] = core::f16_to_float(static_cast<std::uint16_t>(bits));
    }
    return values;
  }();
  return table;
}

// The loops keep their running state in locals and store it once at the end: the byte loads
// may alias anything, so state kept in the Tally would be reloaded and stored every element.

// Floating types: Bits is the storage word, `decode` maps it exactly to float or double.
// Elements go in blocks: a branch-free pass accepts a block where every pair is finite and
// within tolerance (the common case); any other block is walked again element by element.
template <class Bits, class Decode>
void tally_floating(const unsigned char* candidate, const unsigned char* reference,
                    std::size_t count, Bits poison, const Tolerance& tol, Tally& tally,
                    Decode decode) {
  constexpr std::size_t kBlock = 512;
  constexpr double kMaxFinite = std::numeric_limits<double>::max();
  const double atol = tol.atol;
  const double rtol = tol.rtol;
  std::size_t unwritten = 0, nan_mismatches = 0, reference_nans = 0;
  double max_abs_error = 0.0, max_rel_error = 0.0;
  bool candidate_nonzero = false, reference_nonzero = false;
  for (std::size_t start = 0; start < count; start += kBlock) {
    const std::size_t end = std::min(count, start + kBlock);
    // A NaN anywhere (poison included) makes `error` NaN and the block unclean; an infinite
    // reference is excluded explicitly because its bound would be infinite too.
    bool clean = true;
    bool block_candidate_nonzero = false, block_reference_nonzero = false;
    double block_abs = 0.0, block_rel = 0.0;
    for (std::size_t i = start; i < end; ++i) {
      const double got = static_cast<double>(decode(load<Bits>(candidate, i)));
      const double expected = static_cast<double>(decode(load<Bits>(reference, i)));
      const double error = std::fabs(got - expected);
      const double magnitude = std::fabs(expected);
      clean &= (error <= atol + rtol * magnitude) & (magnitude <= kMaxFinite);
      block_abs = error > block_abs ? error : block_abs;
      const double relative = magnitude != 0.0 ? error / magnitude : 0.0;
      block_rel = relative > block_rel ? relative : block_rel;
      block_candidate_nonzero |= got != 0.0;
      block_reference_nonzero |= expected != 0.0;
    }
    if (clean) {
      max_abs_error = std::max(max_abs_error, block_abs);
      max_rel_error = std::max(max_rel_error, block_rel);
      candidate_nonzero |= block_candidate_nonzero;
      reference_nonzero |= block_reference_nonzero;
      continue;
    }
    for (std::size_t i = start; i < end; ++i) {
      const Bits candidate_bits = load<Bits>(candidate, i);
      const Bits reference_bits = load<Bits>(reference, i);
      const double got = static_cast<double>(decode(candidate_bits));
      const double expected = static_cast<double>(decode(reference_bits));
      // NaN compares unequal to zero, so an unwritten or NaN element is never "zero".
      candidate_nonzero |= !(got == 0.0);
      reference_nonzero |= !(expected == 0.0);
      if (std::isnan(expected)) {
        ++reference_nans;
        continue;
      }
      if (candidate_bits == poison) {
        ++unwritten;
        tally.fail(i, got, expected, true);
        continue;
      }
      if (std::isfinite(got) && std::isfinite(expected)) {
        const double error = std::fabs(got - expected);
        const double magnitude = std::fabs(expected);
        max_abs_error = std::max(max_abs_error, error);
        if (magnitude != 0.0) max_rel_error = std::max(max_rel_error, error / magnitude);
        if (!(error <= atol + rtol * magnitude)) tally.fail(i, got, expected, false);
        continue;
      }
      if (got == expected) continue;  // the same infinity
      ++nan_mismatches;
      tally.fail(i, got, expected, false);
    }
  }
  tally.unwritten = unwritten;
  tally.nan_mismatches = nan_mismatches;
  tally.reference_nans = reference_nans;
  tally.max_abs_error = max_abs_error;
  tally.max_rel_error = max_rel_error;
  tally.candidate_nonzero = candidate_nonzero;
  tally.reference_nonzero = reference_nonzero;
}

// Integer and bool types: exact equality first, the tolerance only for values that differ.
template <class T>
void tally_integer(const unsigned char* candidate, const unsigned char* reference,
                   std::size_t count, T poison, const Tolerance& tol, Tally& tally) {
  using Unsigned = std::make_unsigned_t<T>;
  const double atol = tol.atol;
  const double rtol = tol.rtol;
  std::size_t unwritten = 0;
  double max_abs_error = 0.0, max_rel_error = 0.0;
  bool candidate_nonzero = false, reference_nonzero = false;
  for (std::size_t i = 0; i < count; ++i) {
    const T got = load<T>(candidate, i);
    const T expected = load<T>(reference, i);
    candidate_nonzero |= got != 0;
    reference_nonzero |= expected != 0;
    if (got == expected) continue;
    const auto got_double = static_cast<double>(got);
    const auto expected_double = static_cast<double>(expected);
    if (got == poison) {
      ++unwritten;
      tally.fail(i, got_double, expected_double, true);
      continue;
    }
    // The distance in the unsigned domain is exact; only its conversion to double rounds, and
    // it is at least 1, so a zero tolerance can never pass a differing pair.
    const Unsigned distance =
        got > expected
            ? static_cast<Unsigned>(static_cast<Unsigned>(got) - static_cast<Unsigned>(expected))
            : static_cast<Unsigned>(static_cast<Unsigned>(expected) - static_cast<Unsigned>(got));
    const auto error = static_cast<double>(distance);
    const double magnitude = std::fabs(expected_double);
    max_abs_error = std::max(max_abs_error, error);
    if (magnitude != 0.0) max_rel_error = std::max(max_rel_error, error / magnitude);
    if (!(error <= atol + rtol * magnitude)) tally.fail(i, got_double, expected_double, false);
  }
  tally.unwritten = unwritten;
  tally.max_abs_error = max_abs_error;
  tally.max_rel_error = max_rel_error;
  tally.candidate_nonzero = candidate_nonzero;
  tally.reference_nonzero = reference_nonzero;
}

Tally tally_elements(DType dtype, const void* candidate_data, const void* reference_data,
                     std::size_t count, const Tolerance& tol, int variant) {
  const auto* candidate = static_cast<const unsigned char*>(candidate_data);
  const auto* reference = static_cast<const unsigned char*>(reference_data);
  const std::uint64_t poison = poison_bits(dtype, variant);
  Tally tally;
  // Each decoder is a lambda (a distinct type), so every instantiation inlines its own.
  switch (dtype) {
    case DType::kBF16:
      tally_floating<std::uint16_t>(candidate, reference, count, static_cast<std::uint16_t>(poison),
                                    tol, tally,
                                    [](std::uint16_t bits) { return core::bf16_to_float(bits); });
      break;
    case DType::kF16: {
      const float* values = f16_values().data();
      tally_floating<std::uint16_t>(candidate, reference, count, static_cast<std::uint16_t>(poison),
                                    tol, tally,
                                    [values](std::uint16_t bits) { return values[bits]; });
      break;
    }
    case DType::kF32:
      tally_floating<std::uint32_t>(candidate, reference, count, static_cast<std::uint32_t>(poison),
                                    tol, tally,
                                    [](std::uint32_t bits) { return std::bit_cast<float>(bits); });
      break;
    case DType::kF64:
      tally_floating<std::uint64_t>(candidate, reference, count, poison, tol, tally,
                                    [](std::uint64_t bits) { return std::bit_cast<double>(bits); });
      break;
    case DType::kFP8E4M3:
      tally_floating<std::uint8_t>(candidate, reference, count, static_cast<std::uint8_t>(poison),
                                   tol, tally, [](std::uint8_t bits) { return kE4M3Values[bits]; });
      break;
    case DType::kFP8E5M2:
      tally_floating<std::uint8_t>(candidate, reference, count, static_cast<std::uint8_t>(poison),
                                   tol, tally, [](std::uint8_t bits) { return kE5M2Values[bits]; });
      break;
    case DType::kI8:
      tally_integer<std::int8_t>(candidate, reference, count, static_cast<std::int8_t>(poison), tol,
                                 tally);
      break;
    case DType::kU8:
    case DType::kBool:  // compared as bytes: a bool output must hold exactly 0 or 1
      tally_integer<std::uint8_t>(candidate, reference, count, static_cast<std::uint8_t>(poison),
                                  tol, tally);
      break;
    case DType::kI16:
      tally_integer<std::int16_t>(candidate, reference, count, static_cast<std::int16_t>(poison),
                                  tol, tally);
      break;
    case DType::kI32:
      tally_integer<std::int32_t>(candidate, reference, count, static_cast<std::int32_t>(poison),
                                  tol, tally);
      break;
    case DType::kI64:
      tally_integer<std::int64_t>(candidate, reference, count, static_cast<std::int64_t>(poison),
                                  tol, tally);
      break;
  }
  return tally;
}

}  // namespace

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

namespace {

std::string format_coords(const std::vector<std::int64_t>& coords, std::size_t flat) {
  if (coords.empty()) return "flat index " + std::to_string(flat);
  std::string text = "[";
  for (std::size_t i = 0; i < coords.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(coords[i]);
  }
  return text + "]";
}

std::string format_tolerance(const Tolerance& tol) {
  if (tol.atol == 0.0 && tol.rtol == 0.0) return "exact match required";
  return "atol " + format_number(tol.atol) + " + rtol " + format_number(tol.rtol) + " * |ref|";
}

std::string build_summary(const CompareReport& report, bool first_unwritten) {
  const std::string head = "output '" + report.output_name + "': ";
  const std::string tolerance = format_tolerance(report.tolerance);
  if (report.reference_invalid()) {
    return head + "the reference produced " + std::to_string(report.reference_nans) +
           " NaN value(s); this is a server-side fault (infra_error), not the candidate's";
  }
  if (report.count == 0) return head + "empty, nothing to compare";
  if (report.mismatches == 0 && !report.all_zero) {
    return head + "all " + std::to_string(report.count) + " elements match (" + tolerance + ")";
  }
  if (report.mismatches == 0) {
    return head +
           "every element is zero while the reference is not (the reference values lie "
           "within tolerance of zero, " +
           tolerance + "); compute the real result";
  }
  std::string text = head + std::to_string(report.mismatches) + " of " +
                     std::to_string(report.count) + " elements differ (" + tolerance +
                     "); first at " +
                     format_coords(report.first_mismatch_coords, *report.first_mismatch);
  if (first_unwritten) {
    text += ": never written";
  } else if (report.values_revealed) {
    text += ": got " + format_number(report.first_got) + ", expected " +
            format_number(report.first_expected);
  }
  text += "; " + std::to_string(report.unwritten) + " unwritten";
  if (report.nan_mismatches > 0) {
    text += "; " + std::to_string(report.nan_mismatches) + " NaN/Inf where the reference differs";
  }
  if (report.all_zero) text += "; the whole output is zero while the reference is not";
  return text;
}

// splitmix64: a full-period 64-bit stream; each state step gives 8 canary bytes.
std::uint64_t canary_word(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  std::uint64_t mixed = state;
  mixed = (mixed ^ (mixed >> 30)) * 0xBF58476D1CE4E5B9ull;
  mixed = (mixed ^ (mixed >> 27)) * 0x94D049BB133111EBull;
  return mixed ^ (mixed >> 31);
}

// The canary word as little-endian bytes, independent of host byte order.
void word_bytes(std::uint64_t word, unsigned char* out) {
  for (int b = 0; b < 8; ++b) out[b] = static_cast<unsigned char>(word >> (8 * b));
}

}  // namespace

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return {1e-2, 0x1p-6};
    case DType::kF16:
      return {1e-3, 0x1p-9};
    case DType::kF32:
      return {1e-5, 1e-5};
    case DType::kF64:
      return {1e-12, 1e-10};
    case DType::kFP8E4M3:
      return {0x1p-6, 0x1p-3};
    case DType::kFP8E5M2:
      return {0x1p-14, 0x1p-2};
    case DType::kI8:
    case DType::kU8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      return {0.0, 0.0};
  }
  throw core::InternalError("default_tolerance: unknown dtype");
}

std::uint64_t poison_pattern(DType dtype, int variant) { return poison_bits(dtype, variant); }

void fill_poison(DType dtype, void* data, std::size_t count, int variant) {
  auto* bytes = static_cast<unsigned char*>(data);
  const std::uint64_t bits = poison_bits(dtype, variant);
  switch (core::dtype_size(dtype)) {
    case 1:
      std::memset(bytes, static_cast<int>(bits), count);
      return;
    case 2:
      for (std::size_t i = 0; i < count; ++i) store(bytes, i, static_cast<std::uint16_t>(bits));
      return;
    case 4:
      for (std::size_t i = 0; i < count; ++i) store(bytes, i, static_cast<std::uint32_t>(bits));
      return;
    case 8:
      for (std::size_t i = 0; i < count; ++i) store(bytes, i, bits);
      return;
    default:
      throw core::InternalError("fill_poison: unexpected element size");
  }
}

bool is_poison(DType dtype, const void* data, std::size_t index, int variant) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  const std::uint64_t bits = poison_bits(dtype, variant);
  switch (core::dtype_size(dtype)) {
    case 1:
      return load<std::uint8_t>(bytes, index) == static_cast<std::uint8_t>(bits);
    case 2:
      return load<std::uint16_t>(bytes, index) == static_cast<std::uint16_t>(bits);
    case 4:
      return load<std::uint32_t>(bytes, index) == static_cast<std::uint32_t>(bits);
    case 8:
      return load<std::uint64_t>(bytes, index) == bits;
    default:
      throw core::InternalError("is_poison: unexpected element size");
  }
}

std::vector<std::int64_t> flat_to_coords(std::size_t index, std::size_t count,
                                         const std::vector<std::int64_t>& shape) {
  if (shape.empty() || index >= count) return {};
  std::size_t product = 1;
  for (const std::int64_t extent : shape) {
    if (extent <= 0) return {};
    const auto size = static_cast<std::size_t>(extent);
    if (product > std::numeric_limits<std::size_t>::max() / size) return {};
    product *= size;
  }
  if (product != count) return {};
  std::vector<std::int64_t> coords(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::size_t>(shape[d]);
    coords[d] = static_cast<std::int64_t>(index % extent);
    index /= extent;
  }
  return coords;
}

namespace {

// Large outputs (a prefill activation is 16 M elements) are tallied in slices on several
// threads and the slices folded in index order, so the verdict is the serial one.
Tally tally_in_slices(DType dtype, const void* candidate, const void* reference, std::size_t count,
                      const Tolerance& tol, int variant) {
  constexpr std::size_t kMinSlice = std::size_t{1} << 20;
  const std::size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t threads = std::min<std::size_t>({hardware, 16, count / kMinSlice});
  if (threads < 2) return tally_elements(dtype, candidate, reference, count, tol, variant);
  const std::size_t esize = core::dtype_size(dtype);
  const std::size_t slice = (count + threads - 1) / threads;
  std::vector<Tally> parts(threads);
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t first = t * slice;
    const std::size_t n = std::min(slice, count - std::min(count, first));
    if (n == 0) break;
    workers.emplace_back([&, t, first, n] {
      parts[t] =
          tally_elements(dtype, static_cast<const std::byte*>(candidate) + first * esize,
                         static_cast<const std::byte*>(reference) + first * esize, n, tol, variant);
    });
  }
  for (auto& worker : workers) worker.join();
  Tally total;
  for (std::size_t t = 0; t < parts.size(); ++t) {
    const Tally& part = parts[t];
    if (part.mismatches > 0 && total.mismatches == 0) {
      total.first = part.first + t * slice;
      total.first_got = part.first_got;
      total.first_expected = part.first_expected;
      total.first_unwritten = part.first_unwritten;
    }
    total.mismatches += part.mismatches;
    total.unwritten += part.unwritten;
    total.nan_mismatches += part.nan_mismatches;
    total.reference_nans += part.reference_nans;
    total.max_abs_error = std::max(total.max_abs_error, part.max_abs_error);
    total.max_rel_error = std::max(total.max_rel_error, part.max_rel_error);
    total.candidate_nonzero |= part.candidate_nonzero;
    total.reference_nonzero |= part.reference_nonzero;
  }
  return total;
}

// The report on `count` elements from their tally.
CompareReport report_from_tally(const Tally& tally, std::size_t count,
                                const std::vector<std::int64_t>& shape, const Tolerance& tol,
                                bool reveal_values, std::string_view output_name) {
  CompareReport report;
  report.output_name = std::string(output_name);
  report.count = count;
  report.mismatches = tally.mismatches;
  report.unwritten = tally.unwritten;
  report.nan_mismatches = tally.nan_mismatches;
  report.reference_nans = tally.reference_nans;
  report.max_abs_error = tally.max_abs_error;
  report.max_rel_error = tally.max_rel_error;
  report.all_zero = count > 0 && !tally.candidate_nonzero && tally.reference_nonzero;
  report.values_revealed = reveal_values;
  report.tolerance = tol;
  if (tally.mismatches > 0) {
    report.first_mismatch = tally.first;
    report.first_mismatch_coords = flat_to_coords(tally.first, count, shape);
    report.first_got = tally.first_got;
    report.first_expected = tally.first_expected;
  }
  report.pass = tally.mismatches == 0 && tally.reference_nans == 0 && !report.all_zero;
  report.summary = build_summary(report, tally.first_unwritten);
  return report;
}

}  // namespace

CompareReport compare_outputs(DType dtype, const void* candidate, const void* reference,
                              std::size_t count, const std::vector<std::int64_t>& shape,
                              const Tolerance& tol, int poison_variant, bool reveal_values,
                              std::string_view output_name) {
  return report_from_tally(tally_in_slices(dtype, candidate, reference, count, tol, poison_variant),
                           count, shape, tol, reveal_values, output_name);
}

CompareReport passing_report(std::size_t count, double max_abs_error, double max_rel_error,
                             const Tolerance& tol, bool reveal_values,
                             std::string_view output_name) {
  Tally tally;
  tally.max_abs_error = max_abs_error;
  tally.max_rel_error = max_rel_error;
  // Not all zero: a non-zero candidate, or a reference that is zero too.
  tally.candidate_nonzero = true;
  return report_from_tally(tally, count, {}, tol, reveal_values, output_name);
}

core::Value CompareReport::to_value() const {
  core::Value value = {
      {"output", output_name},
      {"pass", pass},
      {"count", count},
      {"mismatches", mismatches},
      {"unwritten", unwritten},
      {"nan_mismatches", nan_mismatches},
      {"reference_nans", reference_nans},
      {"all_zero", all_zero},
      {"first_mismatch", nullptr},
      {"first_mismatch_coords", first_mismatch_coords},
      {"atol", tolerance.atol},
      {"rtol", tolerance.rtol},
      {"summary", summary},
  };
  if (first_mismatch) value["first_mismatch"] = *first_mismatch;
  if (values_revealed) {
    value["max_abs_error"] = max_abs_error;
    value["max_rel_error"] = max_rel_error;
    if (first_mismatch) {
      value["first_got"] = first_got;
      value["first_expected"] = first_expected;
    }
  }
  return value;
}

ByteDiff compare_bytes(const void* a, const void* b, std::size_t bytes) {
  if (bytes == 0 || std::memcmp(a, b, bytes) == 0) return {true, bytes, 0};
  const auto* left = static_cast<const unsigned char*>(a);
  const auto* right = static_cast<const unsigned char*>(b);
  ByteDiff diff{false, bytes, 0};
  for (std::size_t i = 0; i < bytes; ++i) {
    if (left[i] != right[i]) {
      if (diff.diff_bytes == 0) diff.first_diff = i;
      ++diff.diff_bytes;
    }
  }
  return diff;
}

void fill_canary(void* data, std::size_t bytes, std::uint64_t seed) {
  auto* out = static_cast<unsigned char*>(data);
  std::uint64_t state = seed;
  unsigned char word[8];
  for (std::size_t offset = 0; offset < bytes; offset += 8) {
    word_bytes(canary_word(state), word);
    std::memcpy(out + offset, word, std::min<std::size_t>(8, bytes - offset));
  }
}

bool check_canary(const void* data, std::size_t bytes, std::uint64_t seed, std::size_t* first_bad) {
  const auto* in = static_cast<const unsigned char*>(data);
  std::uint64_t state = seed;
  unsigned char word[8];
  for (std::size_t offset = 0; offset < bytes; offset += 8) {
    word_bytes(canary_word(state), word);
    const std::size_t span = std::min<std::size_t>(8, bytes - offset);
    if (std::memcmp(in + offset, word, span) == 0) continue;
    for (std::size_t b = 0; b < span; ++b) {
      if (in[offset + b] != word[b]) {
        if (first_bad != nullptr) *first_bad = offset + b;
        return false;
      }
    }
  }
  if (first_bad != nullptr) *first_bad = bytes;
  return true;
}

CompareReport ElementwiseChecker::check(const CheckRequest& request) const {
  // Both views describe the same output tensor of the case; anything else is a runner bug.
  if (request.candidate.dtype != request.reference.dtype ||
      request.candidate.count != request.reference.count) {
    throw core::InternalError("ElementwiseChecker: candidate and reference views differ for '" +
                              std::string(request.candidate.name) + "'");
  }
  return compare_outputs(request.candidate.dtype, request.candidate.data, request.reference.data,
                         request.candidate.count, request.candidate.shape, request.tolerance,
                         request.poison_variant, request.reveal_values, request.candidate.name);
}

}  // namespace crucible::judge
