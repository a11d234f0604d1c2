// Correctness checks on host copies of outputs: poison, canaries, elementwise tolerance compare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/value.hpp"

namespace crucible::judge {

// A number as reports print it (%.6g).
std::string format_number(double value);

// An element passes when |candidate - reference| <= atol + rtol * |reference| (evaluated in
// double after exact decoding of both values).
struct Tolerance {
  double atol;
  double rtol;
};

// Default tolerance per dtype. The 16-bit float types allow two units in the last place (ulp)
// relative to the reference: both the reference and the candidate round an fp32 accumulator
// once, and a different (equally valid) accumulation order can move the fp32 value across a
// rounding boundary, so two correct kernels may differ by up to two ulps. rtol = 2^-(p-2) for a
// p-bit significand is two ulps at the bottom of a binade and more than two elsewhere; atol
// covers values near zero, where cancellation makes relative error meaningless.
//   bf16     atol 1e-2        rtol 2^-6 = 0.015625   (p = 8)
//   f16      atol 1e-3        rtol 2^-9 ~ 0.00195    (p = 11)
//   f32      atol 1e-5        rtol 1e-5   (~84 ulp: summation order over thousands of terms;
//                                          fast-math intrinsics; not TF32, which changes inputs)
//   f64      atol 1e-12       rtol 1e-10
//   fp8 e4m3 atol 2^-6        rtol 2^-3 = 0.125   (one ulp: quantizing outputs are rounded once
//                                                   from fp32, so a tie flip is one step; atol
//                                                   is the smallest normal, covering subnormals)
//   fp8 e5m2 atol 2^-14       rtol 2^-2 = 0.25    (one ulp, same reasoning)
//   integers and bool: exact (0, 0).
// Tasks override these per output in their manifests.
Tolerance default_tolerance(core::DType dtype);

// Poison: a bit pattern written into every candidate output element before the candidate runs,
// so an element the candidate never wrote is detectable. Variant 0 and 1 differ in every dtype;
// the runner uses the other variant on its second run, which catches a kernel that writes the
// poison pattern itself.
//   f32  0x7FC0FFEE / 0x7FEDBEEF          quiet NaNs with payloads no arithmetic produces
//   f64  0x7FF80000C0FFEE00 / 0x7FFDEADBEEF00000
//   bf16 0x7FD5 / 0xFFEA                   quiet NaNs, not the canonical 0x7FC0/0x7FFF
//   f16  0x7F5A / 0xFEA5                   quiet NaNs, not the canonical 0x7E00/0x7FFF
//   fp8 e4m3 0x7F / 0xFF                   the format's only NaNs (no payload bits), so a NaN
//                                          the kernel computes reads as unwritten under the
//                                          variant of its sign: a failure either way
//   fp8 e5m2 0x7D / 0xFD                   NaNs that float -> e5m2 conversion never produces
//   i8, u8, bool  0xA5 / 0x5A;  i16 0xA5A5 / 0x5A5A;  i32 0xA5A5A5A5 / 0x5A5A5A5A;
//   i64 0xA5A5A5A5A5A5A5A5 / 0x5A5A5A5A5A5A5A5A   (bool: neither 0 nor 1)
// `variant` is taken modulo 2. `data` needs no alignment.
void fill_poison(core::DType dtype, void* data, std::size_t count, int variant);
// The poison of `variant` as the raw bits of one element (in the low dtype_size bytes).
std::uint64_t poison_pattern(core::DType dtype, int variant);
bool is_poison(core::DType dtype, const void* data, std::size_t index, int variant);

// The verdict on one output tensor. Counts are disjoint where stated; `mismatches` counts every
// element that fails for any reason, so unwritten + nan_mismatches <= mismatches.
struct CompareReport {
  bool pass = false;
  std::string output_name;
  std::size_t count = 0;
  std::size_t mismatches = 0;      // elements that fail (any reason)
  std::size_t unwritten = 0;       // poison still in place (floats: the poison NaN of `variant`)
  std::size_t nan_mismatches = 0;  // NaN/Inf where the reference differs (finite, other Inf)
  // NaNs in the reference: the reference is broken, which is the server's fault
  // (infra_error), never the candidate's. Those elements are excluded from `mismatches`, and
  // pass is false; check reference_invalid() before blaming the candidate.
  std::size_t reference_nans = 0;
  std::optional<std::size_t> first_mismatch;        // flat row-major index
  std::vector<std::int64_t> first_mismatch_coords;  // empty unless the shape's product == count
  double first_got = 0.0;  // values at first_mismatch (server side only: see to_value)
  double first_expected = 0.0;
  double max_abs_error = 0.0;  // over pairs where both are finite
  double max_rel_error = 0.0;  // over finite pairs with a non-zero reference: err / |ref|
  // The candidate is all zeros while the reference is not. A failure even when every element
  // is within tolerance (a reference whose values all lie within atol of zero would otherwise
  // reward a kernel that writes nothing but zeros).
  bool all_zero = false;
  bool values_revealed = false;  // whether summary and to_value() may carry numbers
  Tolerance tolerance{0.0, 0.0};
  // One sentence an agent can act on. Without values_revealed it names counts, positions and
  // the tolerance only: no got/expected value, no error magnitude.
  std::string summary;

  bool reference_invalid() const { return reference_nans > 0; }
  // The observation form. Without values_revealed it omits first_got, first_expected,
  // max_abs_error and max_rel_error, so a hidden case's expected output cannot be recovered.
  core::Value to_value() const;
};

// Compares `count` elements of `candidate` with `reference` (host memory, any alignment,
// row-major with `shape` when its product equals count). Floating dtypes: both finite -> the
// tolerance test; the same infinity matches; anything else with a NaN or Inf fails as a
// nan_mismatch; the candidate holding the poison of `poison_variant` counts as unwritten.
// Integer and bool dtypes: exact unless `tol` is wider; an element holding the poison counts as
// unwritten unless the reference holds the same value (then the two cannot be told apart and
// the runner's second run, with the other variant, decides).
// Cost: one pass, no allocation per element; thread-safe.
CompareReport compare_outputs(core::DType dtype, const void* candidate, const void* reference,
                              std::size_t count, const std::vector<std::int64_t>& shape,
                              const Tolerance& tol, int poison_variant, bool reveal_values,
                              std::string_view output_name);

// The report compare_outputs gives on `count` elements that all pass and are not all zero where
// the reference is non-zero, from their error maxima measured elsewhere with compare_outputs'
// operations (the GPU runner's device check): the same fields, summary and observation.
CompareReport passing_report(std::size_t count, double max_abs_error, double max_rel_error,
                             const Tolerance& tol, bool reveal_values,
                             std::string_view output_name);

// Byte-for-byte comparison, for read-only inputs the candidate must leave untouched.
// first_diff is `bytes` when equal; diff_bytes counts every differing byte.
struct ByteDiff {
  bool equal;
  std::size_t first_diff;
  std::size_t diff_bytes;
};
ByteDiff compare_bytes(const void* a, const void* b, std::size_t bytes);

// Canary: a fixed pseudo-random byte sequence determined by `seed` (splitmix64 stream, little
// endian), written into the guard regions around every buffer. check_canary returns false on
// the first byte that differs and stores its offset in *first_bad (when non-null; set to
// `bytes` when intact).
void fill_canary(void* data, std::size_t bytes, std::uint64_t seed);
bool check_canary(const void* data, std::size_t bytes, std::uint64_t seed, std::size_t* first_bad);

// Row-major coordinates of a flat index; empty when the product of `shape` differs from
// `count` or the index is out of range.
std::vector<std::int64_t> flat_to_coords(std::size_t index, std::size_t count,
                                         const std::vector<std::int64_t>& shape);

// --- Extension point: outputs with several right answers -----------------------------------
// Most outputs are checked elementwise. Some admit several right answers (top-k under ties,
// sort stability, sampling); a task names a checker for such an output and the runner calls it
// instead of compare_outputs. A checker sees the host copies of the case's inputs as well.
struct HostTensorView {
  std::string_view name;
  core::DType dtype;
  const void* data;
  std::size_t count;
  std::vector<std::int64_t> shape;
};

struct CheckRequest {
  HostTensorView candidate;
  HostTensorView reference;
  std::span<const HostTensorView> inputs;  // the case's pristine inputs
  Tolerance tolerance;
  int poison_variant;
  bool reveal_values;
};

class OutputChecker {
 public:
  virtual ~OutputChecker() = default;
  // Must honour the same contract as compare_outputs: unwritten detection via the poison and
  // no expected values in the report unless reveal_values.
  virtual CompareReport check(const CheckRequest& request) const = 0;
};

// compare_outputs behind the OutputChecker interface; the default for every output.
class ElementwiseChecker final : public OutputChecker {
 public:
  CompareReport check(const CheckRequest& request) const override;
};

}  // namespace crucible::judge
