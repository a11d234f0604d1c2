// A model step's generated values (model/values.hpp) and the float64 oracle's timed step over
// synthetic weights (OracleDecoder::synthetic): the host values are the generators' bytes, the
// seeds are the buffers' own, and the timed step of the prefill program with one new token is
// the decode program's timed step.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "model/model.hpp"
#include "model/oracle_decoder.hpp"
#include "model/values.hpp"
#include "model_tests.hpp"
#include "tasks/generators.hpp"
#include "tasks/registry.hpp"

using namespace crucible;
using testing::kHome;
using testing::registry;

namespace {

// A small synthetic Llama (Llama-3-8B's values and scalars, its own widths) running `program`.
model::Model small_llama(const std::filesystem::path& dir, const std::string& program) {
  std::filesystem::create_directories(dir);
  const auto file = dir / (program + ".toml");
  std::ofstream(file) << "name = \"small_" << program << "\"\nbase = \""
                      << (kHome / "models/llama3_8b.toml").string() << "\"\nprogram = \""
                      << (kHome / "models" / (program + ".toml")).string() << "\"\n"
                      << "[constants]\nhidden = 64\nintermediate = 96\nlayers = 2\nheads = 4\n"
                         "kv_heads = 2\nhead_size = 16\nvocab = 200\nmax_position = 64\n";
  auto loaded = model::load_model(file, registry());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  return std::move(loaded).value();
}

}  // namespace

TEST_CASE("model values: the host's doubles are the generator's bytes, from each buffer's seed") {
  tasks::GeneratorSpec spec;
  spec.std = 0.02;
  // An odd first index and a range over several of the threads' pieces.
  constexpr std::uint64_t kFirst = 12345, kCount = (std::uint64_t{1} << 21) + 77;
  std::vector<double> got(kCount);
  REQUIRE(model::generate_doubles(spec, core::DType::kBF16, 99, kFirst, kCount, got.data()).ok());
  std::vector<std::byte> bytes((kFirst + kCount) * 2);
  REQUIRE(tasks::generate_into(spec, core::DType::kBF16, 99, bytes).ok());
  std::size_t equal = 0;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, bytes.data() + (kFirst + i) * 2, 2);
    equal += got[i] == tasks::bf16_to_float(bits) ? 1 : 0;
  }
  CHECK(equal == kCount);
  CHECK_FALSE(model::generate_doubles(spec, core::DType::kI32, 99, 0, 4, got.data()).ok());

  // Seeds: one per buffer name, the same in every program of a model.
  const auto decode = model::load_model(kHome / "models/llama3_8b.toml", registry());
  const auto prefill = model::load_model(kHome / "models/llama3_8b_prefill.toml", registry());
  REQUIRE(decode.ok());
  REQUIRE(prefill.ok());
  std::set<std::uint64_t> seeds;
  for (const auto& buffer : decode->buffers) {
    seeds.insert(model::value_seed(*decode, buffer.name));
    CHECK(model::value_seed(*decode, buffer.name) == model::value_seed(*prefill, buffer.name));
  }
  CHECK(seeds.size() == decode->buffers.size());
}

TEST_CASE("oracle decoder: the timed step over synthetic weights; prefill of one token is decode") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("crucible-model-values-" + std::to_string(::getpid()));
  const auto decode_model = small_llama(dir, "llama_decoder");
  const auto prefill_model = small_llama(dir, "llama_prefill");
  // Three sequences of 40 tokens (three cache blocks), the last one new.
  auto decode = model::OracleDecoder::synthetic(decode_model, {{"num_seqs", 3}, {"context", 40}});
  REQUIRE_MESSAGE(decode.ok(), decode.error().message);
  const auto first = decode->timed_step();
  REQUIRE_MESSAGE(first.ok(), first.error().message);
  CHECK(first->hidden.size() == 3 * 64);
  REQUIRE(first->logits.size() == 3);
  CHECK(first->logits[0].size() == 200);
  double norm = 0;
  for (const double x : first->hidden) norm += x * x;
  CHECK(std::isfinite(norm));
  CHECK(norm > 0);
  CHECK(decode->length(0) == 0);
  // Every timed step computes the same thing (the caches and the input are regenerated).
  const auto again = decode->timed_step();
  REQUIRE(again.ok());
  CHECK(again->hidden == first->hidden);
  CHECK(again->logits == first->logits);
  // Tokens need an embedding table, which synthetic weights do not have.
  const auto tokens = decode->step({1, 2, 3});
  REQUIRE_FALSE(tokens.ok());
  CHECK(tokens.error().message.find("embedding") != std::string::npos);

  // The prefill program with one new token a sequence: the same weights (seeds by name), cache
  // and input, through the prefill attention and the last-token gather.
  auto prefill = model::OracleDecoder::synthetic(prefill_model,
                                                 {{"num_seqs", 3}, {"prompt", 1}, {"context", 40}});
  REQUIRE_MESSAGE(prefill.ok(), prefill.error().message);
  const auto one = prefill->timed_step();
  REQUIRE_MESSAGE(one.ok(), one.error().message);
  double worst = 0;
  for (std::size_t i = 0; i < one->hidden.size(); ++i) {
    worst = std::max(worst, std::abs(one->hidden[i] - first->hidden[i]));
  }
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t v = 0; v < 200; ++v) {
      worst = std::max(worst, std::abs(one->logits[s][v] - first->logits[s][v]));
    }
  }
  MESSAGE("prefill of one token against decode: largest difference " << worst);
  CHECK(worst < 1e-12);

  // A chunk of 8 new tokens: a different step, and one the context must hold.
  auto chunk = model::OracleDecoder::synthetic(prefill_model,
                                               {{"num_seqs", 3}, {"prompt", 8}, {"context", 40}});
  REQUIRE(chunk.ok());
  const auto eight = chunk->timed_step();
  REQUIRE(eight.ok());
  CHECK(eight->hidden.size() == 3 * 8 * 64);
  CHECK(eight->logits[2] != first->logits[2]);
  auto overfull = model::OracleDecoder::synthetic(prefill_model,
                                                  {{"num_seqs", 1}, {"prompt", 8}, {"context", 4}});
  REQUIRE(overfull.ok());
  const auto refused = overfull->timed_step();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("shorter than the step's 8 new tokens") != std::string::npos);
  // A checkpoint model is not synthetic.
  const auto stories = model::load_model(kHome / "models/stories260K.toml", registry());
  REQUIRE(stories.ok());
  CHECK_FALSE(model::OracleDecoder::synthetic(*stories, {{"num_seqs", 1}, {"context", 4}}).ok());
  std::filesystem::remove_all(dir);
}
