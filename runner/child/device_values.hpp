// Input values generated on the GPU, bit for bit what tasks/generators.hpp makes on the host.
//
// A case's inputs are regenerated for every draw and for the timing pools; for tasks with large
// inputs (a paged KV cache, a weight matrix) host generation was most of a step's time. The
// runner's own kernel (crucible_generate, kernels/runner/device_values.cu: every function there
// is the device twin of one in tasks/random.hpp or tasks/generators.cpp, statement for
// statement) computes the same counter-based streams with the same IEEE double arithmetic (no
// FMA contraction, correctly rounded division and square root) and the same rounding to each
// dtype, so the bytes are identical; test_runner_device holds the two to that on every input
// of every task. Generators that need libm (rope_cache) or a file (captured) stay on the host.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/dtype.hpp"
#include "tasks/task.hpp"

namespace crucible::runner::child {

struct Device;

// Which values: the host's bytes (correctness runs, the model check), or, for a timed call's
// inputs, the same distributions drawn faster (randn in fp32 from one draw per pair; every other
// generator as the host's). A timed call's values are only ever read on the device, where a
// checked call draws them again the same way.
enum class Draw { kAsHost, kFast };

// Whether `spec` values of `dtype` can be made on the device.
bool generates_on_device(const tasks::GeneratorSpec& spec, core::DType dtype);

// Enqueues elements first_index .. first_index + count - 1 of the stream (spec, seed) as `dtype`
// into `out` on the device's stream. Requires generates_on_device(spec, dtype); a permutation
// asked for more than `max` elements is the caller's error (checked by the host generator's
// rules before, see tasks::stream_length). Throws CudaFailure.
void generate_on_device(Device& device, const tasks::GeneratorSpec& spec, core::DType dtype,
                        std::uint64_t seed, std::uint64_t first_index, std::uint64_t count,
                        CUdeviceptr out, Draw draw = Draw::kAsHost);

}  // namespace crucible::runner::child
