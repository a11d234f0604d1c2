// A model step made of task calls: a decoder described in TOML (models/*.toml, docs/models.md)
// as named buffers and an ordered program of task calls bound to them. Loading checks the
// wiring against the tasks (every tensor bound to a buffer of its dtype, every symbol and
// scalar given); expanding a step at given variables (batch, context) evaluates every call
// site's symbols, checks each bound buffer holds exactly the elements its task tensor needs,
// and returns the call sites with their shapes as task cases: what a candidate's launch plan
// is evaluated on, and what the step's executors (the GPU runner's graph, the float64 oracles)
// run in order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/expr.hpp"
#include "core/result.hpp"
#include "tasks/registry.hpp"
#include "tasks/task.hpp"

namespace crucible::model {

// A tensor of the step: weights, activations, the KV cache, step metadata.
struct Buffer {
  std::string name;
  core::DType dtype;
  std::vector<core::Expr> shape;  // over constants, variables and derived values
  std::string kind;               // "weight", "activation", "cache" or "metadata"
  bool per_layer = false;         // one copy per layer (weights, the KV cache)
  std::string description;
};

// Rows copied from one buffer into another before a call runs: the executor's own work, as
// vLLM's model runner gathers each sequence's last hidden state for the LM head (its
// logits_indices). Rows are a buffer's first dimension; rows first, first + stride, ... of
// `from` (`count` of them) go to rows 0 .. count - 1 of `into`.
struct Gather {
  std::string from, into;
  core::Expr count, first, stride;
};

// One task call of the program, run once per step or once per layer.
struct Call {
  std::string site;  // unique name of the call site, e.g. "attn_norm"
  const tasks::Task* task = nullptr;
  bool per_layer = false;
  std::map<std::string, std::string> tensors;  // task tensor -> buffer
  std::map<std::string, core::Expr> symbols;   // task symbol -> expression
  std::map<std::string, double> scalars;       // every task scalar (defaults filled in)
  std::optional<Gather> gather;                // rows copied before the call (step calls only)
};

struct Variable {
  std::string name;
  std::string description;
};

struct Model {
  std::string name, title, description;
  std::filesystem::path file;     // the model's TOML
  std::filesystem::path program;  // the program's TOML (the model's own file when inline)
  std::string weights;            // "synthetic", or a llama2c file path relative to home
  std::map<std::string, std::int64_t> constants;            // "layers" among them
  std::map<std::string, double> scalars;                    // values calls' scalars may name
  std::vector<Variable> variables;                          // given per step
  std::vector<std::pair<std::string, core::Expr>> derived;  // in order; may use earlier ones
  std::vector<Buffer> buffers;
  std::vector<Call> calls;  // program order within a layer; step calls before or after
  // How the GPU fills buffers it has no file for ([values] in the model's TOML): every weight
  // of a synthetic model and every cache (the earlier tokens' keys and values of a timed step).
  std::map<std::string, tasks::GeneratorSpec> values;
  // The step the model check times unless told otherwise ([defaults]: one value per variable).
  std::map<std::string, std::int64_t> defaults;
  // Prompts whose greedy continuation the model check compares ([tokens]; models with trained
  // weights only): each sequence is fed its prompt one token a step, then its own argmax.
  std::vector<std::vector<std::int64_t>> prompts;
  std::int64_t generate = 0;  // tokens generated after each prompt
  // How far the candidate step's final hidden states may be from the reference step's (relative
  // L2 distance; [check] hidden_rel_l2, derived from the reference step against the float64
  // oracle, docs/models.md); none: the distance is reported without a verdict.
  std::optional<double> hidden_rel_l2;

  const Buffer* find_buffer(std::string_view buffer_name) const;
};

// Reads `file` (and the program it names) and checks it against `registry`. Errors
// (kInvalidArgument) name the file, the call site or buffer, and what is wrong.
core::Result<Model> load_model(const std::filesystem::path& file, const tasks::Registry& registry);

// A call's gather at a step's values, in elements: row r of the copy is elements
// [(first + r * stride) * width, + width) of `from`, written to [r * width, + width) of `into`.
struct GatherRows {
  std::int64_t count = 0, first = 0, stride = 0, width = 0;
};

// One call site of an expanded step: its call, its shapes as a task case (symbols and scalars;
// named "<model>/<site>"), how many times one step runs it, and its gather (if any).
struct CallSite {
  const Call* call = nullptr;
  tasks::Case shapes;
  std::int64_t count = 1;
  std::optional<GatherRows> gather;
};

// Every value a step's expressions see: constants, the given variables, the derived values.
using Values = std::map<std::string, std::int64_t, std::less<>>;

// The step at `variables` (every declared variable, each > 0): the values, and the call sites
// in program order. Errors (kInvalidArgument): a missing or unknown variable, an expression
// that fails, a symbol that is not positive, a bound buffer whose element count is not the
// task tensor's.
core::Result<std::pair<Values, std::vector<CallSite>>> expand_step(
    const Model& model, const std::map<std::string, std::int64_t>& variables);

// The step metadata of a program over a paged cache (its buffers positions, slot_mapping,
// block_tables, seq_lens and, for prefill, query_start_loc): sequence s holds lengths[s] tokens
// before the step and gets `fresh` new ones, packed sequence after sequence. Block j of sequence
// s is block j * num_seqs + s, so a cache grown by one block keeps every block it had. What the
// GPU runner uploads and the float64 oracle reads, so that both lay the cache out alike.
// `values` gives num_seqs, block_size and max_blocks_per_seq.
struct StepMetadata {
  std::vector<std::int64_t> positions, slot_mapping;  // [num_seqs * fresh]
  std::vector<std::int32_t> block_tables;             // [num_seqs, max_blocks_per_seq]
  std::vector<std::int32_t> seq_lens;                 // [num_seqs]
  std::vector<std::int32_t> query_start_loc;          // [num_seqs + 1]
};
StepMetadata step_metadata(const Values& values, const std::vector<std::int64_t>& lengths,
                           std::int64_t fresh);

}  // namespace crucible::model
