// Deterministic host-side input values: the same (spec, dtype, seed) gives the same bytes on
// every machine, compiler and thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"
#include "tasks/captured.hpp"
#include "tasks/task.hpp"

namespace crucible::tasks {

// How values are made. Every element is a pure function of (seed, flat index), computed with
// a counter-based SplitMix64 stream (tasks/random.hpp), so a tensor can be filled in parallel
// slices and any slice is reproducible on its own. randn uses the polar form of Box-Muller on
// pairs of elements (2k, 2k+1) with a logarithm built from IEEE-exact operations only (+ - * /
// sqrt), so no libm difference can change a bit. Values are computed in double and rounded
// once to the dtype: round-to-nearest-even for floating types (bf16 and f16 through f32),
// rounding to nearest (uniform: floor) and clamping to the range for integer types.

// The value of element `index` before rounding to a dtype. kCaptured has no generated values;
// it returns 0. A routing element computes its whole row (generate_into computes a row once).
double generated_value(const GeneratorSpec& spec, std::uint64_t seed, std::uint64_t index);

// How many elements the stream of `spec` holds: a permutation has `max` distinct values and
// no more; every other stream is unbounded (nullopt). Captured recordings repeat, so they count
// as unbounded.
std::optional<std::uint64_t> stream_length(const GeneratorSpec& spec);

// The recorded tensor a captured spec names, checked to hold `dtype` values: the parsed file
// (cached per process, kept alive here) and the tensor in it. Errors: kIo when the file cannot be
// read, kInvalidArgument for a tensor it does not hold or of another dtype.
struct CapturedValues {
  std::shared_ptr<const SafetensorsFile> file;
  const CapturedTensor* tensor = nullptr;
};
core::Result<CapturedValues> captured_values(const GeneratorSpec& spec, core::DType dtype);

// Whether elements first_index .. first_index + count - 1 exist in the stream of `spec`: a
// permutation has only `max` distinct values. Errors: kInvalidArgument, saying so.
core::Status check_stream_range(const GeneratorSpec& spec, std::uint64_t first_index,
                                std::uint64_t count);

// Whether the values of `spec` depend on the seed (randn, uniform, positions, permutation,
// routing, power_law_offsets, zipf, surface_points, mrope_positions, detections); constant,
// ones, zeros, list, rope_cache and captured values are the same for every seed.
bool uses_seed(const GeneratorSpec& spec);

// How many positions one sequence of an mrope_positions layout spans: its largest component + 1
// from a start of 0 (`layout.sequence` tokens). The generator draws each sequence's start so
// that start + span <= max.
std::int64_t mrope_sequence_span(const MropeLayout& layout);

// Fills `out` with elements first_index, first_index + 1, ... of the stream; `out.size()` must be
// a multiple of dtype_size(dtype). A captured spec reads its recorded tensor (element i is element
// i mod n of the recording; the file is parsed once per process). fp8 values are rounded
// through float and saturated to the largest finite value. Errors: kInvalidArgument for a
// routing or zipf spec out of range, a permutation asked for more elements than its max, a
// captured tensor missing or of another dtype, a size that is not a whole number of elements;
// kIo when a captured file cannot be read. Thread-safe; writes only `out`.
core::Status generate_into(const GeneratorSpec& spec, core::DType dtype, std::uint64_t seed,
                           std::span<std::byte> out, std::uint64_t first_index = 0);

// A new buffer of `count` elements.
core::Result<std::vector<std::byte>> generate(const GeneratorSpec& spec, core::DType dtype,
                                              std::int64_t count, std::uint64_t seed);

// The values of one input tensor of `c`: its shape, its effective generator and
// tensor_seed(case_seed, tensor.name, draw). Errors as generate_into, plus kInvalidArgument for
// an output tensor (it has no values; the runner poisons it).
core::Result<std::vector<std::byte>> generate_tensor(const Case& c, const TensorSpec& tensor,
                                                     std::uint64_t case_seed,
                                                     std::uint64_t draw = 0);

// Float conversions with round-to-nearest-even; NaN stays NaN, overflow becomes infinity.
std::uint16_t bf16_from_float(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t f16_from_float(float value);
float f16_to_float(std::uint16_t bits);

// Natural logarithm for x > 0 from IEEE-exact operations only; bit-identical everywhere.
// Absolute error below 1e-15 on (0, 1]. Used by randn.
double portable_log(double x);

}  // namespace crucible::tasks
