// A llama2.c checkpoint's weights as the buffers of models/llama_decoder.toml: what the
// step's float64 oracle and the GPU runner's model check both load.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "model/model.hpp"

namespace crucible::model {

// The weights of a llama2.c checkpoint (tasks/capture/models/stories260K/README.md has the
// format) as the buffers of models/llama_decoder.toml: norms, the q/k/v/o projections, gate and
// up stacked in w_gate_up, down, the final norm and the LM head (the token embedding, which
// llama2.c ties to it), plus the token embedding itself, rounded to bf16; cos_sin_cache is
// computed (theta 10000) for max_position rows. Per-layer buffers hold `layers` copies one after
// another. Errors: kIo (unreadable), kInvalidArgument (a header that disagrees with the model's
// constants, or a file of the wrong size).
struct Weights {
  std::map<std::string, std::vector<double>> buffers;
  std::vector<double> embedding;  // [vocab, hidden]
};
core::Result<Weights> read_llama2c(const std::filesystem::path& file, const Model& model);

}  // namespace crucible::model
