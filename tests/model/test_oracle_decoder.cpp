// The model step's float64 oracle against an independent forward pass: stories260K's trained
// weights decoded greedily through the task oracles must give the tokens, and logits within
// float64 rounding, of a plain llama2.c-style forward written here without any task code.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "model/model.hpp"
#include "model/oracle_decoder.hpp"
#include "model_tests.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"

using namespace crucible;
using testing::kHome;
using testing::registry;

namespace {

// A direct decoder over the same (bf16-rounded) weights: RMSNorm, GPT-J rotary from the same
// cos/sin table, grouped-query attention over every cached position, SwiGLU, tied LM head, and
// the residual stream stored in bf16 after each add, as the served model keeps it.
class PlainDecoder {
 public:
  PlainDecoder(const model::Model& m, const model::Weights& w, int num_seqs)
      : w_(w),
        dim_(m.constants.at("hidden")),
        hidden_(m.constants.at("intermediate")),
        layers_(m.constants.at("layers")),
        heads_(m.constants.at("heads")),
        kv_heads_(m.constants.at("kv_heads")),
        head_size_(m.constants.at("head_size")),
        vocab_(m.constants.at("vocab")),
        keys_(num_seqs, std::vector<std::vector<double>>(layers_)),
        values_(num_seqs, std::vector<std::vector<double>>(layers_)) {}

  std::vector<double> step(int seq, std::int64_t token) {
    const auto& b = w_.buffers;
    const std::int64_t kv_dim = kv_heads_ * head_size_, pos = length_[seq]++;
    std::vector<double> x(w_.embedding.begin() + token * dim_,
                          w_.embedding.begin() + (token + 1) * dim_);
    for (std::int64_t l = 0; l < layers_; ++l) {
      auto h = norm(x, b.at("attn_norm_weight").data() + l * dim_);
      auto q = matvec(b.at("wq").data() + l * dim_ * dim_, h, dim_, dim_);
      auto k = matvec(b.at("wk").data() + l * kv_dim * dim_, h, kv_dim, dim_);
      auto v = matvec(b.at("wv").data() + l * kv_dim * dim_, h, kv_dim, dim_);
      rotate(q, pos);
      rotate(k, pos);
      auto& keys = keys_[seq][l];
      auto& values = values_[seq][l];
      keys.insert(keys.end(), k.begin(), k.end());
      values.insert(values.end(), v.begin(), v.end());
      std::vector<double> attended(dim_, 0.0);
      const std::int64_t group = heads_ / kv_heads_;
      for (std::int64_t head = 0; head < heads_; ++head) {
        const std::int64_t kv = head / group;
        std::vector<double> scores(pos + 1);
        for (std::int64_t t = 0; t <= pos; ++t) {
          double dot = 0;
          for (std::int64_t d = 0; d < head_size_; ++d) {
            dot += q[head * head_size_ + d] * keys[t * kv_dim + kv * head_size_ + d];
          }
          scores[t] = dot / std::sqrt(static_cast<double>(head_size_));
        }
        const double top = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (auto& s : scores) sum += (s = std::exp(s - top));
        for (std::int64_t t = 0; t <= pos; ++t) {
          for (std::int64_t d = 0; d < head_size_; ++d) {
            attended[head * head_size_ + d] +=
                scores[t] / sum * values[t * kv_dim + kv * head_size_ + d];
          }
        }
      }
      const auto o = matvec(b.at("wo").data() + l * dim_ * dim_, attended, dim_, dim_);
      for (std::int64_t i = 0; i < dim_; ++i) x[i] = stored(x[i] + o[i]);
      h = norm(x, b.at("ffn_norm_weight").data() + l * dim_);
      const double* gate_up = b.at("w_gate_up").data() + l * 2 * hidden_ * dim_;
      const auto gate = matvec(gate_up, h, hidden_, dim_);
      const auto up = matvec(gate_up + hidden_ * dim_, h, hidden_, dim_);
      std::vector<double> act(hidden_);
      for (std::int64_t i = 0; i < hidden_; ++i)
        act[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(b.at("w_down").data() + l * dim_ * hidden_, act, dim_, hidden_);
      for (std::int64_t i = 0; i < dim_; ++i) x[i] = stored(x[i] + down[i]);
    }
    return matvec(w_.embedding.data(), norm(x, b.at("final_norm_weight").data()), vocab_, dim_);
  }

 private:
  // vLLM's fused add-and-norm keeps the residual stream in bf16 (llm/fused_add_rms_norm's
  // definition): each sum is stored rounded.
  static double stored(double value) { return tasks::round_to_dtype(core::DType::kBF16, value); }
  std::vector<double> norm(const std::vector<double>& x, const double* weight) const {
    double ss = 0;
    for (double value : x) ss += value * value;
    const double scale = 1 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * weight[i];
    return out;
  }
  static std::vector<double> matvec(const double* m, const std::vector<double>& x,
                                    std::int64_t rows, std::int64_t cols) {
    std::vector<double> out(rows, 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) out[r] += m[r * cols + c] * x[c];
    }
    return out;
  }
  void rotate(std::vector<double>& v, std::int64_t pos) const {
    const double* row = w_.buffers.at("cos_sin_cache").data() + pos * head_size_;
    const std::int64_t half = head_size_ / 2;
    for (std::size_t base = 0; base < v.size(); base += head_size_) {
      for (std::int64_t k = 0; k < half; ++k) {
        const double x = v[base + 2 * k], y = v[base + 2 * k + 1];
        v[base + 2 * k] = x * row[k] - y * row[half + k];
        v[base + 2 * k + 1] = y * row[k] + x * row[half + k];
      }
    }
  }

  const model::Weights& w_;
  std::int64_t dim_, hidden_, layers_, heads_, kv_heads_, head_size_, vocab_;
  std::vector<std::vector<std::vector<double>>> keys_, values_;  // [seq][layer][pos * kv_dim]
  std::int64_t length_[2] = {0, 0};
};

}  // namespace

TEST_CASE("oracle decoder: stories260K through the task oracles is the plain forward pass") {
  const auto loaded = model::load_model(kHome / "models/stories260K.toml", registry());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  const auto weights = model::read_llama2c(kHome / loaded->weights, *loaded);
  REQUIRE_MESSAGE(weights.ok(), weights.error().message);
  auto decoder = model::OracleDecoder::create(*loaded, *weights, 2, 48);
  REQUIRE_MESSAGE(decoder.ok(), decoder.error().message);
  PlainDecoder plain(*loaded, *weights, 2);

  // Two sequences in one batch, from BOS and from another token, greedily for 40 tokens: the
  // paged cache spans three blocks of 16 by the end.
  std::vector<std::int64_t> tokens = {1, 400};
  std::vector<std::vector<std::int64_t>> generated(2);
  double worst = 0;
  for (int i = 0; i < 40; ++i) {
    const auto logits = decoder->step(tokens);
    REQUIRE_MESSAGE(logits.ok(), logits.error().message);
    for (int s = 0; s < 2; ++s) {
      const auto expected = plain.step(s, tokens[s]);
      const auto& got = (*logits)[s];
      REQUIRE(got.size() == expected.size());
      for (std::size_t t = 0; t < got.size(); ++t) {
        worst = std::max(worst, std::abs(got[t] - expected[t]) / (1 + std::abs(expected[t])));
      }
      tokens[s] = std::max_element(got.begin(), got.end()) - got.begin();
      CHECK(tokens[s] == std::max_element(expected.begin(), expected.end()) - expected.begin());
      generated[s].push_back(tokens[s]);
    }
  }
  MESSAGE("largest relative logit difference: " << worst);
  CHECK(worst < 1e-9);
  CHECK(decoder->length(0) == 40);
  // The trained model writes text: its greedy tokens are not one token repeated.
  for (const auto& seq : generated) {
    CHECK(std::set<std::int64_t>(seq.begin(), seq.end()).size() > 5);
  }
  CHECK(generated[0] != generated[1]);

  // Past its capacity, a sequence is refused; so is a token outside the vocabulary.
  const auto bad_token = decoder->step({1, 512});
  REQUIRE_FALSE(bad_token.ok());
  CHECK(bad_token.error().message.find("outside the vocabulary") != std::string::npos);
  auto small = model::OracleDecoder::create(*loaded, *weights, 1, 2);
  REQUIRE(small.ok());
  REQUIRE(small->greedy({1}, 2).ok());
  const auto full = small->step({1});
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().message.find("is full") != std::string::npos);
}

TEST_CASE(
    "oracle decoder: a prefill step, whole or in chunks, is the decode step fed a token at "
    "a time") {
  const auto decode_model = model::load_model(kHome / "models/stories260K.toml", registry());
  REQUIRE_MESSAGE(decode_model.ok(), decode_model.error().message);
  const auto prefill_model =
      model::load_model(kHome / "tests/model/stories260K_prefill.toml", registry());
  REQUIRE_MESSAGE(prefill_model.ok(), prefill_model.error().message);
  const auto weights = model::read_llama2c(kHome / decode_model->weights, *decode_model);
  REQUIRE_MESSAGE(weights.ok(), weights.error().message);

  // Two 36-token prompts (past two cache blocks of 16): the decode oracle's logits after each
  // token, kept at 12, 24 and 36 tokens.
  constexpr int kPrompt = 36, kChunk = 12;
  std::vector<std::vector<std::int64_t>> prompts(2);
  for (int i = 0; i < kPrompt; ++i) {
    prompts[0].push_back(i == 0 ? 1 : (37 * i + 11) % 512);
    prompts[1].push_back(i == 0 ? 1 : (101 * i + 5) % 512);
  }
  auto decoder = model::OracleDecoder::create(*decode_model, *weights, 2, kPrompt);
  REQUIRE_MESSAGE(decoder.ok(), decoder.error().message);
  std::vector<std::vector<std::vector<double>>> after;  // [chunk][seq][vocab]
  for (int i = 0; i < kPrompt; ++i) {
    const auto logits = decoder->step({prompts[0][i], prompts[1][i]});
    REQUIRE_MESSAGE(logits.ok(), logits.error().message);
    if ((i + 1) % kChunk == 0) after.push_back(*logits);
  }
  const auto difference = [](const std::vector<std::vector<double>>& got,
                             const std::vector<std::vector<double>>& expected) {
    double worst = 0;
    REQUIRE(got.size() == expected.size());
    for (std::size_t s = 0; s < got.size(); ++s) {
      REQUIRE(got[s].size() == expected[s].size());
      for (std::size_t t = 0; t < got[s].size(); ++t) {
        worst =
            std::max(worst, std::abs(got[s][t] - expected[s][t]) / (1 + std::abs(expected[s][t])));
      }
    }
    return worst;
  };

  // The whole prompt in one step: the LM head sees each sequence's last token.
  auto whole = model::OracleDecoder::create(
      *prefill_model, *weights, {{"num_seqs", 2}, {"prompt", kPrompt}, {"context", kPrompt}});
  REQUIRE_MESSAGE(whole.ok(), whole.error().message);
  const auto at_once = whole->advance(prompts);
  REQUIRE_MESSAGE(at_once.ok(), at_once.error().message);
  const double whole_difference = difference(*at_once, after.back());
  MESSAGE("prefill in one step against decoding: largest relative logit difference "
          << whole_difference);
  CHECK(whole_difference < 1e-12);

  // Chunked prefill: three steps of 12 tokens, each attending to the chunks before it in the
  // paged cache as well as causally within itself.
  auto chunked = model::OracleDecoder::create(
      *prefill_model, *weights, {{"num_seqs", 2}, {"prompt", kChunk}, {"context", kPrompt}});
  REQUIRE_MESSAGE(chunked.ok(), chunked.error().message);
  for (int c = 0; c < kPrompt / kChunk; ++c) {
    std::vector<std::vector<std::int64_t>> chunk(2);
    for (int s = 0; s < 2; ++s) {
      chunk[s].assign(prompts[s].begin() + c * kChunk, prompts[s].begin() + (c + 1) * kChunk);
    }
    const auto logits = chunked->advance(chunk);
    REQUIRE_MESSAGE(logits.ok(), logits.error().message);
    CAPTURE(c);
    CHECK(difference(*logits, after[static_cast<std::size_t>(c)]) < 1e-12);
  }
  CHECK(chunked->length(1) == kPrompt);
  // A fourth chunk would overflow the capacity; a step of the wrong length is refused.
  const auto over = chunked->advance({prompts[0], prompts[1]});
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("appends 12 tokens to every sequence") != std::string::npos);
  std::vector<std::vector<std::int64_t>> twelve = {
      std::vector<std::int64_t>(prompts[0].begin(), prompts[0].begin() + kChunk),
      std::vector<std::int64_t>(prompts[1].begin(), prompts[1].begin() + kChunk)};
  const auto full = chunked->advance(twelve);
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().message.find("is full") != std::string::npos);
}

TEST_CASE("oracle decoder: a checkpoint that is not the model's is refused") {
  const auto loaded = model::load_model(kHome / "models/llama3_8b.toml", registry());
  REQUIRE(loaded.ok());
  const auto refused =
      model::read_llama2c(kHome / "tasks/capture/models/stories260K/stories260K.bin", *loaded);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("the checkpoint's hidden is 64, the model's 4096") !=
        std::string::npos);
}
