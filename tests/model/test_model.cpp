// Model descriptions: the shipped Llama decoders load and expand into their call sites with the
// shapes their tasks need; a wrongly wired description is refused, naming what is wrong.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <tuple>

#include "model/model.hpp"
#include "model_tests.hpp"
#include "tasks/registry.hpp"

using namespace crucible;
using testing::kHome;
using testing::registry;

namespace {

const std::filesystem::path kModels = std::filesystem::path(CRUCIBLE_SOURCE_DIR) / "models";

const model::CallSite& site(const std::vector<model::CallSite>& sites, const std::string& name) {
  for (const auto& s : sites) {
    if (s.call->site == name) return s;
  }
  FAIL("no call site " << name);
  return sites.front();
}

}  // namespace

TEST_CASE("models: Llama-3-8B's decode step is 12 calls a layer and 2 after, at real shapes") {
  const auto loaded = model::load_model(kModels / "llama3_8b.toml", registry());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  const auto& llama = *loaded;
  CHECK(llama.name == "llama3_8b");
  CHECK(llama.program == kModels / "llama_decoder.toml");
  const auto step = model::expand_step(llama, {{"num_seqs", 64}, {"context", 2048}});
  REQUIRE_MESSAGE(step.ok(), step.error().message);
  const auto& [values, sites] = *step;
  REQUIRE(sites.size() == 14);
  const auto calls = std::accumulate(sites.begin(), sites.end(), std::int64_t{0},
                                     [](std::int64_t n, const auto& s) { return n + s.count; });
  CHECK(calls == 12 * 32 + 2);
  CHECK(values.at("num_blocks") == 64 * 128);
  const auto& q = site(sites, "q_proj");
  CHECK(q.count == 32);
  CHECK(q.call->task->id == "llm/linear");
  CHECK(q.shapes.name == "llama3_8b/q_proj");
  CHECK(q.shapes.symbols == std::map<std::string, std::int64_t>{
                                {"num_tokens", 64}, {"in_features", 4096}, {"out_features", 4096}});
  CHECK(site(sites, "k_proj").shapes.symbols.at("out_features") == 1024);
  CHECK(site(sites, "gate_up_proj").shapes.symbols.at("out_features") == 28672);
  CHECK(site(sites, "down_proj").shapes.symbols.at("in_features") == 14336);
  const auto& attention = site(sites, "attention");
  CHECK(attention.shapes.symbols.at("max_blocks_per_seq") == 128);
  CHECK(attention.shapes.symbols.at("context_tokens") == 64 * 2048);
  CHECK(attention.shapes.scalars.at("scale") == doctest::Approx(1.0 / std::sqrt(128.0)));
  CHECK(site(sites, "rotary").shapes.scalars.at("is_neox") == 1);
  const auto& lm_head = site(sites, "lm_head");
  CHECK(lm_head.count == 1);
  CHECK(lm_head.shapes.symbols.at("out_features") == 128256);
  CHECK(site(sites, "final_norm").shapes.scalars.at("epsilon") == doctest::Approx(1e-5));
}

TEST_CASE("models: stories260K shares the program with its own constants and tied weights") {
  const auto loaded = model::load_model(kModels / "stories260K.toml", registry());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  CHECK(std::filesystem::exists(std::filesystem::path(CRUCIBLE_SOURCE_DIR) / loaded->weights));
  const auto step = model::expand_step(*loaded, {{"num_seqs", 1}, {"context", 1}});
  REQUIRE_MESSAGE(step.ok(), step.error().message);
  const auto& sites = step->second;
  CHECK(site(sites, "attn_norm").count == 5);
  CHECK(site(sites, "rotary").shapes.scalars.at("is_neox") == 0);
  CHECK(site(sites, "attention").shapes.symbols.at("num_blocks") == 1);
  CHECK(site(sites, "lm_head").shapes.symbols.at("out_features") == 512);
  // Every variable must be given, positive, and declared.
  CHECK_FALSE(model::expand_step(*loaded, {{"num_seqs", 1}}).ok());
  CHECK_FALSE(model::expand_step(*loaded, {{"num_seqs", 0}, {"context", 4}}).ok());
  const auto unknown = model::expand_step(*loaded, {{"num_seqs", 1}, {"context", 4}, {"x", 1}});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("no variable 'x'") != std::string::npos);
}

TEST_CASE(
    "models: Llama-3-8B's prefill step: the decode program with prefill attention and a "
    "last-token LM head") {
  const auto loaded = model::load_model(kModels / "llama3_8b_prefill.toml", registry());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  const auto& llama = *loaded;
  CHECK(llama.name == "llama3_8b_prefill");
  CHECK(llama.program == kModels / "llama_prefill.toml");
  // From its base: shapes, scalars, synthetic weights and their generators; its own defaults.
  CHECK(llama.constants.at("hidden") == 4096);
  CHECK(llama.scalars.at("rope_is_neox") == 1);
  CHECK(llama.weights == "synthetic");
  CHECK(llama.values.contains("w_gate_up"));
  CHECK(llama.prompts.empty());
  CHECK(llama.defaults ==
        std::map<std::string, std::int64_t>{{"num_seqs", 1}, {"prompt", 2048}, {"context", 2048}});
  // The decode program's variables (context's description replaced in place) and prompt.
  std::vector<std::string> variables;
  for (const auto& v : llama.variables) variables.push_back(v.name);
  CHECK(variables == std::vector<std::string>{"num_seqs", "context", "prompt"});

  // Two sequences, each a 1000-token chunk after 3000 cached tokens.
  const auto step =
      model::expand_step(llama, {{"num_seqs", 2}, {"prompt", 1000}, {"context", 4000}});
  REQUIRE_MESSAGE(step.ok(), step.error().message);
  const auto& [values, sites] = *step;
  REQUIRE(sites.size() == 14);
  CHECK(values.at("num_tokens") == 2000);
  const auto& attention = site(sites, "attention");
  CHECK(attention.call->task->id == "llm/flash_attn_varlen_prefill");
  CHECK(attention.count == 32);
  CHECK(attention.shapes.symbols.at("num_tokens") == 2000);
  CHECK(attention.shapes.symbols.at("num_offsets") == 3);
  CHECK(attention.shapes.symbols.at("context_tokens") == 8000);
  CHECK(attention.shapes.symbols.at("max_blocks_per_seq") == 250);
  CHECK(attention.shapes.symbols.at("attended_pairs") == 2 * (1000 * 3000 + 1000 * 1001 / 2));
  CHECK(site(sites, "q_proj").shapes.symbols.at("num_tokens") == 2000);
  CHECK(site(sites, "cache_write").shapes.symbols.at("num_tokens") == 2000);
  CHECK(site(sites, "final_norm").shapes.symbols.at("num_tokens") == 2000);
  CHECK_FALSE(site(sites, "final_norm").gather.has_value());
  // The LM head sees each sequence's last new token only: rows 999 and 1999 of hidden.
  const auto& lm_head = site(sites, "lm_head");
  CHECK(lm_head.shapes.symbols.at("num_tokens") == 2);
  CHECK(lm_head.call->tensors.at("input") == "last_hidden");
  REQUIRE(lm_head.gather.has_value());
  CHECK(lm_head.gather->count == 2);
  CHECK(lm_head.gather->first == 999);
  CHECK(lm_head.gather->stride == 1000);
  CHECK(lm_head.gather->width == 4096);
  CHECK(lm_head.call->gather->from == "hidden");
  CHECK(lm_head.call->gather->into == "last_hidden");
}

TEST_CASE("models: a wrongly wired description is refused with the site and the reason") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("crucible-model-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string program = [] {
    std::ifstream in(kModels / "llama_decoder.toml");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::string header = [] {
    std::ifstream in(kModels / "stories260K.toml");
    std::string text(std::istreambuf_iterator<char>(in), {});
    return std::regex_replace(text, std::regex("program = \"llama_decoder.toml\""),
                              "program = \"program.toml\"");
  }();
  // Each variant changes one thing of the program and names what the loader (or the expansion)
  // must say.
  const std::vector<std::tuple<std::string, std::string, std::string>> variants = {
      {R"t(tensors = { out = "q", input = "hidden", weight = "wq" })t",
       R"t(tensors = { out = "q", input = "hidden" })t",
       "call 'q_proj': tensor 'weight' is not bound"},
      {R"t(tensors = { out = "act", input = "gate_up" })t",
       R"t(tensors = { out = "act", input = "positions" })t",
       "call 'activation': tensor 'input' is bf16 but buffer 'positions' is i64"},
      {R"t(site = "activation"
task = "llm/silu_and_mul")t",
       R"t(site = "activation"
task = "llm/silu_and_nothing")t",
       "call 'activation': no task 'llm/silu_and_nothing'"},
      {R"t(value = "cdiv(context, block_size)")t", R"t(value = "cdiv(context, blocks)")t",
       "uses 'blocks', which is not a constant, variable or derived value"},
      {R"t(scalars = { scale = "attention_scale" })t", R"t(scalars = { scale = "softmax_scale" })t",
       "scalar 'scale' names 'softmax_scale', which is not in the model's [scalars]"},
      {R"t(symbols = { num_tokens = "num_tokens", d = "intermediate" })t",
       R"t(symbols = { num_tokens = "num_tokens" })t",
       "call 'activation': symbol 'd' is not given"},
      {R"t(site = "lm_head"
task = "llm/linear")t",
       R"t(site = "lm_head"
task = "llm/linear"
tensors = { out = "logits", input = "hidden", weight = "wq" }
[[calls]]
site = "lm_head_twice"
task = "llm/linear")t",
       "buffer 'wq' has a copy per layer, but the call runs once a step"},
  };
  for (const auto& [from, to, needle] : variants) {
    CAPTURE(needle);
    const auto at = program.find(from);
    REQUIRE(at != std::string::npos);
    std::string changed = program;
    changed.replace(at, from.size(), to);
    std::ofstream(dir / "program.toml") << changed;
    std::ofstream(dir / "model.toml") << header;
    const auto loaded = model::load_model(dir / "model.toml", registry());
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().code == core::ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(loaded.error().message.find(needle) != std::string::npos, loaded.error().message);
  }
  // A buffer of the wrong size loads (its expressions are fine) but does not expand.
  std::string wrong = program;
  const std::string wo = "name = \"wo\"\ndtype = \"bf16\"\nshape = [\"hidden\", \"q_width\"]";
  REQUIRE(wrong.find(wo) != std::string::npos);
  wrong.replace(wrong.find(wo), wo.size(),
                "name = \"wo\"\ndtype = \"bf16\"\nshape = [\"hidden\", \"kv_width\"]");
  std::ofstream(dir / "program.toml") << wrong;
  const auto loaded = model::load_model(dir / "model.toml", registry());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  const auto step = model::expand_step(*loaded, {{"num_seqs", 2}, {"context", 8}});
  REQUIRE_FALSE(step.ok());
  CHECK_MESSAGE(step.error().message.find("call 'o_proj': tensor 'weight' needs 4096 elements, "
                                          "buffer 'wo' holds 2048") != std::string::npos,
                step.error().message);
  std::filesystem::remove_all(dir);
}

TEST_CASE("models: bases and gathers are checked: what a derived description may not do") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("crucible-model-base-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kModels / "llama_decoder.toml", dir / "llama_decoder.toml");
  std::filesystem::copy_file(kModels / "llama3_8b.toml", dir / "llama3_8b.toml");
  const std::string model = R"t(name = "m"
base = "llama3_8b.toml"
program = "program.toml"
[constants]
layers = 2
)t";
  std::ofstream(dir / "model.toml") << model;
  const auto load = [&](const std::string& program) {
    std::ofstream(dir / "program.toml") << "base = \"llama_decoder.toml\"\n" << program;
    return model::load_model(dir / "model.toml", registry());
  };
  // The model's own constants win over its base's; the rest is inherited.
  const auto plain = load("");
  REQUIRE_MESSAGE(plain.ok(), plain.error().message);
  CHECK(plain->constants.at("layers") == 2);
  CHECK(plain->constants.at("hidden") == 4096);
  CHECK(plain->calls.size() == 14);
  const std::string lm_head = R"t(
[[calls]]
site = "lm_head"
task = "llm/linear"
tensors = { out = "logits", input = "hidden", weight = "lm_head_weight" }
symbols = { num_tokens = "num_tokens", in_features = "hidden", out_features = "vocab" }
)t";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {lm_head +
           R"t(gather = { from = "hiden", into = "hidden", count = 1, first = 0, stride = 1 })t",
       "call 'lm_head', gather: 'hiden' is not a buffer"},
      {lm_head + R"t(gather = { from = "q", into = "hidden", count = 1, first = 0 })t",
       "call 'lm_head', gather: no `stride`"},
      {lm_head +
           R"t(gather = { from = "positions", into = "hidden", count = 1, first = 0, stride = 1 })t",
       "call 'lm_head', gather: `from` and `into` differ in dtype"},
      {lm_head +
           R"t(gather = { from = "hidden", into = "hidden", count = 1, first = "last", stride = 1 })t",
       "uses 'last', which is not a constant, variable or derived value"},
  };
  for (const auto& [program, needle] : refused) {
    CAPTURE(needle);
    const auto loaded = load(program);
    REQUIRE_FALSE(loaded.ok());
    CHECK_MESSAGE(loaded.error().message.find(needle) != std::string::npos, loaded.error().message);
  }
  // Gathers that load but do not fit the step's buffers are refused when it is expanded.
  const std::vector<std::pair<std::string, std::string>> unfit = {
      {lm_head + R"t(gather = { from = "q", into = "k", count = 1, first = 0, stride = 1 })t",
       "gather: rows of 'q' and 'k' differ in width"},
      {lm_head +
           R"t(gather = { from = "hidden", into = "residual", count = 2, first = 3, stride = 1 })t",
       "gather: rows 3 + k * 1 for k < 2 do not fit 'hidden' (4 rows) and 'residual' (4)"},
  };
  for (const auto& [program, needle] : unfit) {
    CAPTURE(needle);
    const auto loaded = load(program);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
    const auto step = model::expand_step(*loaded, {{"num_seqs", 4}, {"context", 16}});
    REQUIRE_FALSE(step.ok());
    CHECK_MESSAGE(step.error().message.find(needle) != std::string::npos, step.error().message);
  }
  // A base of a base is refused (one level).
  std::ofstream(dir / "llama_decoder_2.toml") << "base = \"llama_decoder.toml\"\n";
  std::ofstream(dir / "program.toml") << "base = \"llama_decoder_2.toml\"\n";
  const auto chained = model::load_model(dir / "model.toml", registry());
  REQUIRE_FALSE(chained.ok());
  CHECK(chained.error().message.find("has a base itself") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("models: the model check's settings: synthetic values, default step, prompts") {
  const auto llama = model::load_model(kModels / "llama3_8b.toml", registry());
  REQUIRE_MESSAGE(llama.ok(), llama.error().message);
  CHECK(llama->defaults.at("num_seqs") == 64);
  CHECK(llama->defaults.at("context") == 2048);
  CHECK(llama->prompts.empty());
  // The hidden-state verdict's tolerance, derived on the H200 (the model files say how).
  REQUIRE(llama->hidden_rel_l2.has_value());
  CHECK(*llama->hidden_rel_l2 == doctest::Approx(0.1));
  // Every weight and cache of a synthetic model has a generator; the rotary table is vLLM's.
  for (const auto& buffer : llama->buffers) {
    if (buffer.kind == "weight" || buffer.kind == "cache") {
      CHECK_MESSAGE(llama->values.contains(buffer.name), buffer.name);
    }
  }
  CHECK(llama->values.at("wq").kind == tasks::GeneratorKind::kRandn);
  CHECK(llama->values.at("wq").std == doctest::Approx(0.02));
  CHECK(llama->values.at("cos_sin_cache").kind == tasks::GeneratorKind::kRopeCache);
  CHECK(llama->values.at("cos_sin_cache").theta == doctest::Approx(500000.0));
  CHECK(llama->values.at("cos_sin_cache").dim == 128);

  const auto stories = model::load_model(kModels / "stories260K.toml", registry());
  REQUIRE_MESSAGE(stories.ok(), stories.error().message);
  REQUIRE(stories->prompts.size() == 8);
  CHECK(stories->prompts.front() == std::vector<std::int64_t>{1, 37});
  CHECK(stories->generate == 48);
  // Trained weights come from the checkpoint: only the caches need generators.
  CHECK_FALSE(stories->values.contains("wq"));
  CHECK(stories->values.contains("key_cache"));

  const auto dir = std::filesystem::temp_directory_path() /
                   ("crucible-model-settings-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kModels / "llama_decoder.toml", dir / "llama_decoder.toml");
  const std::string base = [] {
    std::ifstream in(kModels / "llama3_8b.toml");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"wq = { generator = \"randn\", std = 0.02 }\n",
       "values: buffer 'wq' (weight) needs a generator"},
      {"key_cache = { generator = \"randn\", std = 1.0 }\n",
       "values: buffer 'key_cache' (cache) needs a generator"},
      {"num_seqs = 64\n", ""},  // a default left out is fine: the step must then name it
  };
  for (const auto& [removed, needle] : variants) {
    CAPTURE(removed);
    std::string text = base;
    REQUIRE(text.find(removed) != std::string::npos);
    text.erase(text.find(removed), removed.size());
    std::ofstream(dir / "model.toml") << text;
    const auto loaded = model::load_model(dir / "model.toml", registry());
    if (needle.empty()) {
      CHECK(loaded.ok());
    } else {
      REQUIRE_FALSE(loaded.ok());
      CHECK_MESSAGE(loaded.error().message.find(needle) != std::string::npos,
                    loaded.error().message);
    }
  }
  // Lines added to the model's [values] table, and a [tokens] table added to a synthetic model.
  const std::vector<std::pair<std::string, std::string>> added = {
      {"nothing = { generator = \"randn\" }\n", "values.nothing: no buffer of that name"},
      {"hidden = { generator = \"permutation\" }\n", "`generator` must be randn"},
      {"hidden = { generator = \"randn\", std = 0.0 }\n", "`std` must be positive"},
  };
  for (const auto& [line, needle] : added) {
    CAPTURE(line);
    std::string text = base;
    text.insert(text.find("[values]\n") + 9, line);
    std::ofstream(dir / "model.toml") << text;
    const auto loaded = model::load_model(dir / "model.toml", registry());
    REQUIRE_FALSE(loaded.ok());
    CHECK_MESSAGE(loaded.error().message.find(needle) != std::string::npos, loaded.error().message);
  }
  std::ofstream(dir / "model.toml") << base + "\n[tokens]\nprompts = [[1, 2]]\ngenerate = 4\n";
  const auto untrained = model::load_model(dir / "model.toml", registry());
  REQUIRE_FALSE(untrained.ok());
  CHECK(untrained.error().message.find("greedy tokens need trained weights") != std::string::npos);
  std::ofstream(dir / "model.toml")
      << std::regex_replace(base, std::regex("hidden_rel_l2 = 0.1"), "hidden_rel_l2 = -0.1");
  const auto negative = model::load_model(dir / "model.toml", registry());
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.error().message.find("`hidden_rel_l2` must be a positive number") !=
        std::string::npos);
  // Prompts are fed in lockstep: every prompt must have the same length.
  std::string stories_text = [] {
    std::ifstream in(kModels / "stories260K.toml");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  stories_text = std::regex_replace(stories_text, std::regex("\\[1, 37\\]"), "[1, 37, 5]");
  stories_text = std::regex_replace(stories_text, std::regex("weights = \"tasks/"),
                                    "weights = \"" + std::string(CRUCIBLE_SOURCE_DIR) + "/tasks/");
  std::ofstream(dir / "model.toml") << stories_text;
  const auto ragged = model::load_model(dir / "model.toml", registry());
  REQUIRE_FALSE(ragged.ok());
  CHECK_MESSAGE(
      ragged.error().message.find("every prompt must have the same length") != std::string::npos,
      ragged.error().message);
  std::filesystem::remove_all(dir);
}
