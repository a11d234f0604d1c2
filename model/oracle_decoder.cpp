// The model step's float64 oracle (oracle_decoder.hpp).
#include "model/oracle_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "model/values.hpp"
#include "tasks/oracle.hpp"

namespace crucible::model {

using core::Error;
using core::ErrorCode;

namespace {

Error refuse(const Model& model, const std::string& why) {
  return Error{ErrorCode::kInvalidArgument, "model " + model.name + ": " + why};
}

}  // namespace

core::Result<OracleDecoder> OracleDecoder::create(
    const Model& model, Weights weights, const std::map<std::string, std::int64_t>& variables) {
  for (const char* name : {"num_seqs", "context"}) {
    if (!variables.contains(name)) {
      return refuse(model, "the oracle needs the variables num_seqs and context");
    }
  }
  auto expanded = expand_step(model, variables);
  if (!expanded) return expanded.error();
  OracleDecoder decoder;
  decoder.model_ = &model;
  decoder.synthetic_ = model.weights == "synthetic";
  decoder.values_ = std::move(expanded->first);
  decoder.sites_ = std::move(expanded->second);
  const std::int64_t layers = model.constants.at("layers");
  for (const auto& buffer : model.buffers) {
    std::int64_t elements = 1;
    for (const auto& dim : buffer.shape) elements *= *dim.eval(decoder.values_);
    decoder.layer_elements_[buffer.name] = elements;
    const std::int64_t total = elements * (buffer.per_layer ? layers : 1);
    if (buffer.kind == "weight" && decoder.synthetic_) continue;  // generated when read
    if (buffer.kind == "weight") {
      auto it = weights.buffers.find(buffer.name);
      if (it == weights.buffers.end()) {
        return refuse(model, "the weights have no buffer '" + buffer.name + "'");
      }
      if (static_cast<std::int64_t>(it->second.size()) != total) {
        return refuse(model, "weight '" + buffer.name + "' has " +
                                 std::to_string(it->second.size()) + " values, the program needs " +
                                 std::to_string(total));
      }
      decoder.buffers_[buffer.name] = std::move(it->second);
    } else {
      decoder.buffers_[buffer.name].assign(static_cast<std::size_t>(total), 0.0);
    }
  }
  weights.buffers.clear();
  decoder.weights_ = std::move(weights);
  decoder.lengths_.assign(static_cast<std::size_t>(variables.at("num_seqs")), 0);
  return decoder;
}

core::Result<OracleDecoder> OracleDecoder::create(const Model& model, Weights weights,
                                                  std::int64_t num_seqs, std::int64_t max_context) {
  return create(model, std::move(weights), {{"num_seqs", num_seqs}, {"context", max_context}});
}

core::Result<OracleDecoder> OracleDecoder::synthetic(
    const Model& model, const std::map<std::string, std::int64_t>& variables) {
  if (model.weights != "synthetic") {
    return refuse(model, "its weights come from " + model.weights + ", not from generators");
  }
  return create(model, Weights{}, variables);
}

core::Result<std::vector<std::vector<double>>> OracleDecoder::step(
    const std::vector<std::int64_t>& tokens) {
  std::vector<std::vector<std::int64_t>> each;
  for (const auto token : tokens) each.push_back({token});
  return advance(each);
}

void OracleDecoder::write_metadata(std::int64_t fresh) {
  const auto meta = step_metadata(values_, lengths_, fresh);
  const auto store = [&](const char* name, const auto& values) {
    auto& buffer = buffers_.at(name);
    std::transform(values.begin(), values.end(), buffer.begin(),
                   [](auto v) { return static_cast<double>(v); });
  };
  store("positions", meta.positions);
  store("slot_mapping", meta.slot_mapping);
  store("block_tables", meta.block_tables);
  store("seq_lens", meta.seq_lens);
  if (buffers_.contains("query_start_loc")) store("query_start_loc", meta.query_start_loc);
}

core::Result<std::vector<std::vector<double>>> OracleDecoder::advance(
    const std::vector<std::vector<std::int64_t>>& tokens) {
  const auto& v = values_;
  const std::int64_t num_seqs = v.at("num_seqs"), hidden = v.at("hidden"), vocab = v.at("vocab"),
                     max_context = v.at("context"), fresh = v.at("num_tokens") / num_seqs;
  if (weights_.embedding.empty()) {
    return refuse(*model_, "tokens need an embedding table (a checkpoint's)");
  }
  if (static_cast<std::int64_t>(tokens.size()) != num_seqs) {
    return Error{ErrorCode::kInvalidArgument,
                 "a step takes tokens for each of the " + std::to_string(num_seqs) + " sequences"};
  }
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    if (static_cast<std::int64_t>(tokens[s].size()) != fresh) {
      return Error{ErrorCode::kInvalidArgument,
                   "a step appends " + std::to_string(fresh) + " tokens to every sequence"};
    }
    for (const auto token : tokens[s]) {
      if (token < 0 || token >= vocab) {
        return Error{ErrorCode::kInvalidArgument,
                     "token " + std::to_string(token) + " is outside the vocabulary"};
      }
    }
    if (lengths_[s] + fresh > max_context) {
      return Error{ErrorCode::kInvalidArgument, "sequence " + std::to_string(s) + " is full (" +
                                                    std::to_string(max_context) + " tokens)"};
    }
  }
  // The executor's own work: embeddings, a zero residual, the metadata of the new tokens.
  auto& hidden_buffer = buffers_.at("hidden");
  std::fill(buffers_.at("residual").begin(), buffers_.at("residual").end(), 0.0);
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    for (std::int64_t i = 0; i < fresh; ++i) {
      std::copy_n(weights_.embedding.begin() + tokens[s][i] * hidden, hidden,
                  hidden_buffer.begin() + (s * fresh + i) * hidden);
    }
  }
  write_metadata(fresh);
  auto logits = execute();
  if (!logits) return logits.error();
  for (auto& length : lengths_) length += fresh;
  return logits;
}

core::Result<OracleDecoder::StepOutputs> OracleDecoder::timed_step() {
  const auto& v = values_;
  const std::int64_t num_seqs = v.at("num_seqs"), context = v.at("context"),
                     fresh = v.at("num_tokens") / num_seqs;
  if (fresh > context) {
    return refuse(*model_, "context " + std::to_string(context) + " is shorter than the step's " +
                               std::to_string(fresh) + " new tokens a sequence");
  }
  for (const auto& buffer : model_->buffers) {
    if (buffer.kind != "cache") continue;
    auto& values = buffers_.at(buffer.name);
    if (auto made =
            generate_doubles(model_->values.at(buffer.name), buffer.dtype,
                             value_seed(*model_, buffer.name), 0, values.size(), values.data());
        !made) {
      return made.error();
    }
  }
  auto& hidden = buffers_.at("hidden");
  if (auto made = generate_doubles(tasks::GeneratorSpec{}, model_->find_buffer("hidden")->dtype,
                                   kStepInputSeed, 0, hidden.size(), hidden.data());
      !made) {
    return made.error();
  }
  std::fill(buffers_.at("residual").begin(), buffers_.at("residual").end(), 0.0);
  const auto lengths = lengths_;
  std::fill(lengths_.begin(), lengths_.end(), context - fresh);
  write_metadata(fresh);
  lengths_ = lengths;
  auto logits = execute();
  if (!logits) return logits.error();
  return StepOutputs{buffers_.at("hidden"), std::move(logits).value()};
}

core::Result<std::vector<std::vector<double>>> OracleDecoder::execute() {
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
      if (spec.role == tasks::Role::kOut) {
        tensor.values.assign(static_cast<std::size_t>(elements), 0.0);
      } else if (buffer->kind == "weight" && synthetic_) {
        tensor.values.resize(static_cast<std::size_t>(elements));
        if (auto made =
                generate_doubles(model_->values.at(name), buffer->dtype, value_seed(*model_, name),
                                 static_cast<std::uint64_t>(offset),
                                 static_cast<std::uint64_t>(elements), tensor.values.data());
            !made) {
          return made.error();
        }
      } else {
        const auto& values = buffers_.at(name);
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
      if (const auto& rows = sites_[i].gather) {
        const auto& from = buffers_.at(sites_[i].call->gather->from);
        auto& into = buffers_.at(sites_[i].call->gather->into);
        for (std::int64_t r = 0; r < rows->count; ++r) {
          std::copy_n(from.begin() + (rows->first + r * rows->stride) * rows->width, rows->width,
                      into.begin() + r * rows->width);
        }
      }
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
  const std::int64_t num_seqs = values_.at("num_seqs"), vocab = values_.at("vocab");
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
