// Reading a llama2.c checkpoint (llama2c.hpp).
#include "model/llama2c.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>

#include "tasks/generators.hpp"

namespace crucible::model {
namespace {

using core::Error;
using core::ErrorCode;

// Weights are held as the GPU holds them: rounded to bf16 (the file's values are floats).
double bf16(double value) {
  return tasks::bf16_to_float(tasks::bf16_from_float(static_cast<float>(value)));
}

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

}  // namespace crucible::model
