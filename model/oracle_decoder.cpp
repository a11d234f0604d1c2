// The model step's float64 oracle (oracle_decoder.hpp).
#include "model/oracle_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "tasks/oracle.hpp"

namespace crucible::model {
namespace {

using core::Error;
using core::ErrorCode;

double bf16(double value) { return tasks::round_to_dtype(core::DType::kBF16, value); }

}  // namespace

core::Result<Weights> read_llama2c(const std::filesystem::path& file, const Model& model) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error{ErrorCode::kIo, "cannot read " + file.string()};
  std::int32_t header[7] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  if (!in) return Error{ErrorCode::kInvalidArgument, file.string() + ": no llama2.c header"};
  const auto& c = model.constants;
  const auto constant = [&](const char* name) {
    const auto it = c.find(name);
    return it == c.end() ? std::int64_t{-1} : it->second;
  };
  const std::int64_t dim = header[0], hidden = header[1], layers = header[2], heads = header[3],
                     kv_heads = header[4], vocab = std::abs(header[5]);
  const std::pair<const char*, std::int64_t> expected[] = {
      {"hidden", dim},  {"intermediate", hidden}, {"layers", layers},
      {"heads", heads}, {"kv_heads", kv_heads},   {"vocab", vocab}};
  for (const auto& [name, value] : expected) {
    if (constant(name) != value) {
      return Error{ErrorCode::kInvalidArgument,
                   file.string() + ": the checkpoint's " + name + " is " + std::to_string(value) +
                       ", the model's " + std::to_string(constant(name))};
    }
  }
  if (heads <= 0 || dim % heads != 0 || constant("head_size") != dim / heads) {
    return Error{ErrorCode::kInvalidArgument, file.string() + ": head_size is not hidden / heads"};
  }
  const std::int64_t head_size = dim / heads, kv_dim = kv_heads * head_size;
  const auto read = [&](std::int64_t count, std::vector<double>& out) {
    std::vector<float> raw(static_cast<std::size_t>(count));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(count * 4));
    if (!in) return false;
    out.resize(raw.size());
    std::transform(raw.begin(), raw.end(), out.begin(), [](float v) { return bf16(v); });
    return true;
  };
  Weights weights;
  std::vector<double> rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final;
  const bool complete = read(vocab * dim, weights.embedding) && read(layers * dim, rms_att) &&
                        read(layers * dim * dim, wq) && read(layers * kv_dim * dim, wk) &&
                        read(layers * kv_dim * dim, wv) && read(layers * dim * dim, wo) &&
                        read(layers * dim, rms_ffn) && read(layers * hidden * dim, w1) &&
                        read(layers * dim * hidden, w2) && read(layers * hidden * dim, w3) &&
                        read(dim, rms_final);
  if (!complete) {
    return Error{ErrorCode::kInvalidArgument, file.string() + ": shorter than its header says"};
  }
  auto& b = weights.buffers;
  b["attn_norm_weight"] = std::move(rms_att);
  b["wq"] = std::move(wq);
  b["wk"] = std::move(wk);
  b["wv"] = std::move(wv);
  b["wo"] = std::move(wo);
  b["ffn_norm_weight"] = std::move(rms_ffn);
  b["w_down"] = std::move(w2);
  b["final_norm_weight"] = std::move(rms_final);
  b["lm_head_weight"] = weights.embedding;  // tied
  // Per layer: the gate rows (w1), then the up rows (w3).
  auto& gate_up = b["w_gate_up"];
  const std::size_t block = static_cast<std::size_t>(hidden * dim);
  for (std::int64_t l = 0; l < layers; ++l) {
    gate_up.insert(gate_up.end(), w1.begin() + l * block, w1.begin() + (l + 1) * block);
    gate_up.insert(gate_up.end(), w3.begin() + l * block, w3.begin() + (l + 1) * block);
  }
  // vLLM's cos_sin_cache: row p holds cos(p * f_k) for k < head_size / 2, then the sines, with
  // f_k = 10000^(-2k / head_size).
  const std::int64_t positions = constant("max_position");
  auto& cache = b["cos_sin_cache"];
  cache.resize(static_cast<std::size_t>(positions * head_size));
  const std::int64_t half = head_size / 2;
  for (std::int64_t p = 0; p < positions; ++p) {
    for (std::int64_t k = 0; k < half; ++k) {
      const double angle =
          static_cast<double>(p) *
          std::pow(10000.0, -2.0 * static_cast<double>(k) / static_cast<double>(head_size));
      cache[p * head_size + k] = bf16(std::cos(angle));
      cache[p * head_size + half + k] = bf16(std::sin(angle));
    }
  }
  return weights;
}

core::Result<OracleDecoder> OracleDecoder::create(const Model& model, Weights weights,
                                                  std::int64_t num_seqs, std::int64_t max_context) {
  for (const char* name : {"num_seqs", "context"}) {
    const bool declared = std::any_of(model.variables.begin(), model.variables.end(),
                                      [&](const Variable& v) { return v.name == name; });
    if (!declared) {
      return Error{ErrorCode::kInvalidArgument,
                   "model " + model.name +
                       ": a decode program declares the variables num_seqs "
                       "and context"};
    }
  }
  auto expanded = expand_step(model, {{"num_seqs", num_seqs}, {"context", max_context}});
  if (!expanded) return expanded.error();
  OracleDecoder decoder;
  decoder.model_ = &model;
  decoder.values_ = std::move(expanded->first);
  decoder.sites_ = std::move(expanded->second);
  const std::int64_t layers = model.constants.at("layers");
  for (const auto& buffer : model.buffers) {
    std::int64_t elements = 1;
    for (const auto& dim : buffer.shape) elements *= *dim.eval(decoder.values_);
    decoder.layer_elements_[buffer.name] = elements;
    const std::int64_t total = elements * (buffer.per_layer ? layers : 1);
    if (buffer.kind == "weight") {
      auto it = weights.buffers.find(buffer.name);
      if (it == weights.buffers.end()) {
        return Error{ErrorCode::kInvalidArgument,
                     "model " + model.name + ": the weights have no buffer '" + buffer.name + "'"};
      }
      if (static_cast<std::int64_t>(it->second.size()) != total) {
        return Error{ErrorCode::kInvalidArgument,
                     "model " + model.name + ": weight '" + buffer.name + "' has " +
                         std::to_string(it->second.size()) + " values, the program needs " +
                         std::to_string(total)};
      }
      decoder.buffers_[buffer.name] = std::move(it->second);
    } else {
      decoder.buffers_[buffer.name].assign(static_cast<std::size_t>(total), 0.0);
    }
  }
  weights.buffers.clear();
  decoder.weights_ = std::move(weights);
  decoder.lengths_.assign(static_cast<std::size_t>(num_seqs), 0);
  return decoder;
}

core::Result<std::vector<std::vector<double>>> OracleDecoder::step(
    const std::vector<std::int64_t>& tokens) {
  const auto& v = values_;
  const std::int64_t num_seqs = v.at("num_seqs"), hidden = v.at("hidden"), vocab = v.at("vocab"),
                     block_size = v.at("block_size"), max_blocks = v.at("max_blocks_per_seq"),
                     max_context = v.at("context");
  if (static_cast<std::int64_t>(tokens.size()) != num_seqs) {
    return Error{ErrorCode::kInvalidArgument, "a step takes one token per sequence"};
  }
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    if (tokens[s] < 0 || tokens[s] >= vocab) {
      return Error{ErrorCode::kInvalidArgument,
                   "token " + std::to_string(tokens[s]) + " is outside the vocabulary"};
    }
    if (lengths_[s] >= max_context) {
      return Error{ErrorCode::kInvalidArgument, "sequence " + std::to_string(s) + " is full (" +
                                                    std::to_string(max_context) + " tokens)"};
    }
  }
  // The executor's own work: embeddings, a zero residual, the metadata of the new tokens.
  auto& hidden_buffer = buffers_.at("hidden");
  std::fill(buffers_.at("residual").begin(), buffers_.at("residual").end(), 0.0);
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    std::copy_n(weights_.embedding.begin() + tokens[s] * hidden, hidden,
                hidden_buffer.begin() + s * hidden);
    const std::int64_t position = lengths_[s];
    buffers_.at("positions")[s] = static_cast<double>(position);
    for (std::int64_t b = 0; b < max_blocks; ++b) {
      buffers_.at("block_tables")[s * max_blocks + b] = static_cast<double>(s * max_blocks + b);
    }
    buffers_.at("slot_mapping")[s] = static_cast<double>(
        (s * max_blocks + position / block_size) * block_size + position % block_size);
    buffers_.at("seq_lens")[s] = static_cast<double>(position + 1);
  }

  const std::int64_t layers = model_->constants.at("layers");
  const auto run = [&](const CallSite& site, std::int64_t layer) -> core::Status {
    const tasks::Task& task = *site.call->task;
    const tasks::OracleFn* oracle = tasks::find_oracle(task.id);
    if (oracle == nullptr) {
      return Error{ErrorCode::kUnknownTask, "no float64 oracle is linked for " + task.id};
    }
    std::map<std::string, tasks::OracleTensor> tensors;
    for (const auto& spec : task.tensors) {
      const std::string& name = site.call->tensors.at(spec.name);
      const Buffer* buffer = model_->find_buffer(name);
      const std::int64_t elements = layer_elements_.at(name);
      const std::int64_t offset = buffer->per_layer ? layer * elements : 0;
      auto shape = tasks::resolve_shape(spec, site.shapes);
      if (!shape) return shape.error();
      tasks::OracleTensor tensor{spec.dtype, std::move(shape).value(), {}};
      const auto& values = buffers_.at(name);
      if (spec.role == tasks::Role::kOut) {
        tensor.values.assign(static_cast<std::size_t>(elements), 0.0);
      } else {
        tensor.values.assign(values.begin() + offset, values.begin() + offset + elements);
      }
      tensors.emplace(spec.name, std::move(tensor));
    }
    if (auto ran = (*oracle)(tasks::OracleCall{task, site.shapes, tensors}); !ran) {
      return Error{ran.error().code, "call '" + site.call->site + "': " + ran.error().message};
    }
    for (const auto& spec : task.tensors) {
      if (!tasks::is_output(spec.role)) continue;
      const std::string& name = site.call->tensors.at(spec.name);
      const std::int64_t offset =
          model_->find_buffer(name)->per_layer ? layer * layer_elements_.at(name) : 0;
      const auto& out = tensors.at(spec.name).values;
      std::copy(out.begin(), out.end(), buffers_.at(name).begin() + offset);
    }
    return {};
  };
  for (std::size_t i = 0; i < sites_.size();) {
    if (!sites_[i].call->per_layer) {
      if (auto ran = run(sites_[i], 0); !ran) return ran.error();
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < sites_.size() && sites_[end].call->per_layer) ++end;
    for (std::int64_t layer = 0; layer < layers; ++layer) {
      for (std::size_t k = i; k < end; ++k) {
        if (auto ran = run(sites_[k], layer); !ran) return ran.error();
      }
    }
    i = end;
  }
  for (auto& length : lengths_) ++length;
  const auto& logits = buffers_.at("logits");
  std::vector<std::vector<double>> rows;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    rows.emplace_back(logits.begin() + s * vocab, logits.begin() + (s + 1) * vocab);
  }
  return rows;
}

core::Result<std::vector<std::vector<std::int64_t>>> OracleDecoder::greedy(
    const std::vector<std::int64_t>& first, int count) {
  std::vector<std::int64_t> tokens = first;
  std::vector<std::vector<std::int64_t>> generated(first.size());
  for (int i = 0; i < count; ++i) {
    auto logits = step(tokens);
    if (!logits) return logits.error();
    for (std::size_t s = 0; s < tokens.size(); ++s) {
      const auto& row = (*logits)[s];
      tokens[s] = std::max_element(row.begin(), row.end()) - row.begin();
      generated[s].push_back(tokens[s]);
    }
  }
  return generated;
}

}  // namespace crucible::model
