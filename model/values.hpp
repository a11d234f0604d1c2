// The values a model step is filled with where no checkpoint gives them: the model's [values]
// generators (every weight of a synthetic model, the earlier tokens' keys and values of a timed
// step) and the timed step's input. The GPU runner's model check generates them on the device
// and the float64 oracle on the host, bit for bit the same (tasks/generators.hpp and its device
// twin), from the seeds defined here.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.hpp"
#include "core/result.hpp"
#include "model/model.hpp"
#include "tasks/task.hpp"

namespace crucible::model {

// The seed of buffer `buffer`'s values: a hash of its name, so every runner, every job and the
// oracle see the same model, and programs of one model (decode, prefill) the same weights.
std::uint64_t value_seed(const Model& model, std::string_view buffer);

// The timed step's input hidden states (the embeddings of some tokens): standard normal, from
// this seed, in the hidden buffer's dtype.
inline constexpr std::uint64_t kStepInputSeed = 0x68696464656EULL;

// Elements first .. first + count - 1 of the stream (spec, seed), stored as `dtype` and read
// back as doubles, into out[0 .. count). Large ranges are shared among the host's threads.
// Errors: a dtype that is not a floating-point one, and those of tasks::generate_into.
core::Status generate_doubles(const tasks::GeneratorSpec& spec, core::DType dtype,
                              std::uint64_t seed, std::uint64_t first, std::uint64_t count,
                              double* out);

}  // namespace crucible::model
