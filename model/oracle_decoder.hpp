// The model step's float64 oracle: runs a model's decode or prefill steps on the CPU, every call
// site computed by its task's float64 oracle (tasks/oracle.hpp) on the step's buffers, in program
// order. Weights are held as the GPU holds them (rounded to their buffer's dtype); activations
// and the KV cache stay in float64, so the result is the step's exact value for those weights:
// what a GPU step's tokens and hidden states are compared with. A program that links this must
// also link crucible::oracles (the oracles register themselves).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "model/llama2c.hpp"
#include "model/model.hpp"

namespace crucible::model {

// Runs a program with the buffers of models/llama_decoder.toml and llama_prefill.toml (hidden,
// residual, positions, slot_mapping, block_tables, seq_lens, query_start_loc when present,
// logits are filled or read by name). Every step appends the same number of tokens to every
// sequence: one for a decode program, the program's num_tokens / num_seqs for a prefill.
class OracleDecoder {
 public:
  // A decoder for the program expanded at `variables`: num_seqs sequences, each of up to
  // `context` tokens (the capacity; each step's metadata carries the real lengths), and any
  // other variable the program declares (a prefill's `prompt`).
  static core::Result<OracleDecoder> create(const Model& model, Weights weights,
                                            const std::map<std::string, std::int64_t>& variables);
  // A decode program's decoder: num_seqs sequences of up to max_context tokens.
  static core::Result<OracleDecoder> create(const Model& model, Weights weights,
                                            std::int64_t num_seqs, std::int64_t max_context);
  // A decoder of a model with synthetic weights (weights = "synthetic"): each weight is
  // generated from the model's [values] (model/values.hpp) when a call reads it, a layer at a
  // time, so an 8B model never has all its weights in memory at once.
  static core::Result<OracleDecoder> synthetic(
      const Model& model, const std::map<std::string, std::int64_t>& variables);

  // What the GPU model check's timed step computes (docs/models.md): the input hidden states
  // standard normal from model::kStepInputSeed, a zero residual, every sequence `context`
  // tokens long with its last num_tokens / num_seqs the new ones, the earlier tokens' keys and
  // values from the model's cache generators, at the runner's cache layout. Returns the final
  // hidden states (the hidden buffer after the last norm) and the logits ([num_seqs][vocab]).
  // Leaves the sequences' lengths as they were.
  struct StepOutputs {
    std::vector<double> hidden;
    std::vector<std::vector<double>> logits;
  };
  core::Result<StepOutputs> timed_step();

  // Appends `tokens[s]` to sequence s (each the step's new tokens a sequence) and returns the
  // logits the program computes, a row each ([num_seqs][vocab]: the last new token of each
  // sequence). Errors: a sequence that would overflow, a wrong token count, a token outside
  // the vocabulary, a task without a registered oracle, an oracle that fails.
  core::Result<std::vector<std::vector<double>>> advance(
      const std::vector<std::vector<std::int64_t>>& tokens);
  // A decode step: advance by one token a sequence.
  core::Result<std::vector<std::vector<double>>> step(const std::vector<std::int64_t>& tokens);

  // Greedy decoding: feeds `first`, then each step's argmax (the lowest id among equal
  // logits), `count` times; returns the `count` generated tokens per sequence.
  core::Result<std::vector<std::vector<std::int64_t>>> greedy(
      const std::vector<std::int64_t>& first, int count);

  std::int64_t length(std::size_t seq) const { return lengths_.at(seq); }

 private:
  OracleDecoder() = default;

  // The metadata buffers of a step that appends `fresh` tokens to every sequence (lengths_
  // before it): model::step_metadata, as the GPU runner uploads it.
  void write_metadata(std::int64_t fresh);
  // Runs the program's calls in order over the buffers; returns the logits.
  core::Result<std::vector<std::vector<double>>> execute();

  const Model* model_ = nullptr;
  bool synthetic_ = false;  // weights generated as calls read them
  Values values_;
  std::vector<CallSite> sites_;
  Weights weights_;
  std::map<std::string, std::vector<double>> buffers_;  // per-layer ones: layers copies in a row
  std::map<std::string, std::int64_t> layer_elements_;  // elements of one copy, per buffer
  std::vector<std::int64_t> lengths_;
};

}  // namespace crucible::model
