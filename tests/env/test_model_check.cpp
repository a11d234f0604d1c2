// The server's half of the model check: the `model` field resolved against the models, and the
// GPU stage's job carrying every reference the model calls with its plans evaluated at each call
// site of each step (checked against a scripted runner that answers with what it received); a
// plan that does not hold at a model's call site is reported, never sent.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "env/model_option.hpp"
#include "env/pipeline.hpp"
#include "env/stages.hpp"
#include "server_fixture.hpp"

using namespace crucible;
using core::Value;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const tasks::Task& task(const std::string& id) {
  const auto* found = testing::shared_registry().find(id);
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("model option: names, variables and defaults resolve; mistakes are named") {
  env::ModelCatalog catalog(testing::shared_registry());
  const auto& silu = task("llm/silu_and_mul");
  const auto by_name = catalog.resolve("llama3_8b", silu);
  REQUIRE_MESSAGE(by_name.ok(), by_name.error().message);
  CHECK(by_name->file == "llama3_8b.toml");
  CHECK(by_name->variables.at("num_seqs") == 64);
  CHECK(by_name->variables.at("context") == 2048);
  const auto by_map = catalog.resolve(Value{{"name", "llama3_8b"}, {"num_seqs", 8}}, silu);
  REQUIRE(by_map.ok());
  CHECK(by_map->variables.at("num_seqs") == 8);
  CHECK(by_map->variables.at("context") == 2048);
  CHECK(by_map->to_value() ==
        Value{{"name", "llama3_8b"}, {"variables", {{"context", 2048}, {"num_seqs", 8}}}});
  const auto expect = [&](const Value& field, const tasks::Task& t, const std::string& needle) {
    const auto resolved = catalog.resolve(field, t);
    REQUIRE_FALSE(resolved.ok());
    CHECK(resolved.error().code == core::ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(resolved.error().message.find(needle) != std::string::npos,
                  resolved.error().message);
  };
  expect("llama4", silu,
         "no model 'llama4' on this server (models: llama3_8b, llama3_8b_prefill, stories260K)");
  expect("../models/llama3_8b", silu, "no model");
  expect("llama3_8b", task("llm/rms_norm"), "model llama3_8b never calls llm/rms_norm");
  expect(Value{{"name", "llama3_8b"}, {"batch", 4}}, silu, "no variable 'batch'");
  expect(Value{{"name", "llama3_8b"}, {"context", 0}}, silu,
         "'context' must be a positive integer");
  expect(Value{{"num_seqs", 4}}, silu, "needs a string 'name'");

  // The prefill step: its own variables and defaults, and the prefill attention it calls.
  const auto& prefill = task("llm/flash_attn_varlen_prefill");
  const auto chunk = catalog.resolve(
      Value{{"name", "llama3_8b_prefill"}, {"prompt", 1024}, {"context", 8192}}, prefill);
  REQUIRE_MESSAGE(chunk.ok(), chunk.error().message);
  CHECK(chunk->file == "llama3_8b_prefill.toml");
  CHECK(chunk->variables ==
        std::map<std::string, std::int64_t>{{"num_seqs", 1}, {"prompt", 1024}, {"context", 8192}});
  CHECK(catalog.resolve("llama3_8b_prefill", silu).ok());
  expect("llama3_8b_prefill", task("llm/paged_decode_attention"),
         "model llama3_8b_prefill never calls llm/paged_decode_attention");
  expect("llama3_8b", prefill, "model llama3_8b never calls llm/flash_attn_varlen_prefill");

  // The reference step's final hidden states on request: a boolean, for at most 2^20 values.
  const auto rows =
      catalog.resolve(Value{{"name", "llama3_8b"}, {"num_seqs", 2}, {"hidden_states", true}}, silu);
  REQUIRE_MESSAGE(rows.ok(), rows.error().message);
  CHECK(rows->hidden_states);
  CHECK(rows->to_value()["hidden_states"] == true);
  CHECK_FALSE(by_map->hidden_states);
  CHECK_FALSE(by_map->to_value().contains("hidden_states"));
  expect(Value{{"name", "llama3_8b"}, {"hidden_states", 1}}, silu,
         "'hidden_states' must be true or false");
  expect(Value{{"name", "llama3_8b"}, {"num_seqs", 512}, {"hidden_states", true}}, silu,
         "hidden_states returns at most 2^20 values (num_seqs * hidden)");
}

TEST_CASE("model check: the job carries every reference and the plans at each call site") {
  env::PipelineOptions options;
  options.home = CRUCIBLE_SOURCE_DIR;
  options.gpus.gpus = {runner::GpuInfo{0, "scripted", 9, 0}};
  options.compile_options.worker_exe = CRUCIBLE_BINARY_DIR "/bin/crucible-compile-worker";
  options.compile_options.workers = 1;
  options.runner_options.runner_exe = CRUCIBLE_BINARY_DIR "/bin/test_scripted_runner";
  const env::Pipeline pipeline = env::build_pipeline(options);
  env::ModelCatalog catalog(testing::shared_registry());
  const auto& silu = task("llm/silu_and_mul");
  const std::string solution = read_text(CRUCIBLE_SOURCE_DIR "/tasks/llm/silu_and_mul/solution.cu");
  env::StepJob job{&silu,
                   solution,
                   nullptr,
                   1,
                   rewards::default_reward_spec(),
                   nullptr,
                   catalog.resolve("stories260K", silu).value()};
  const auto result = pipeline.run(job);
  REQUIRE_MESSAGE(result.status == core::StepStatus::kOk, result.message);
  // An ok step's message states its speedup and interval.
  CHECK(result.message ==
        "correct on every case; 1.000x the reference's speed (95 % interval 0.990x to 1.010x)");
  const Value& model = result.model;
  REQUIRE_MESSAGE(model.contains("steps"), model.dump());
  CHECK(model["model"] == "stories260K.toml");
  // The timed step (the defaults), then 2 + 48 - 1 decoding steps of 8 sequences.
  REQUIRE(model["steps"].size() == 50);
  CHECK(model["steps"][0] == Value{{"context", 256}, {"num_seqs", 8}});
  CHECK(model["steps"][1] == Value{{"context", 1}, {"num_seqs", 8}});
  CHECK(model["steps"][49] == Value{{"context", 49}, {"num_seqs", 8}});
  // Every task the step calls, one plan per call site per step: linear has 7 sites, the norm 3.
  const Value& cases = model["reference_cases"];
  CHECK(cases.size() == 6);
  CHECK(cases["llm/linear"] == 7 * 50);
  CHECK(cases["llm/fused_add_rms_norm"] == 3 * 50);
  CHECK(cases["llm/silu_and_mul"] == 50);
  CHECK(model["candidate_cases"] == 50);
  // Without the option, no check.
  job.model.reset();
  CHECK(pipeline.run(job).model.is_null());

  // A plan that holds on every case of the task but not at the model's shape (8 tokens of
  // d = 172, which no case has) is reported with the call site, and the runner gets no check.
  std::string narrow = solution;
  const std::string launch = "<<<cdiv(num_tokens * d, 256), 256>>>";
  REQUIRE(narrow.find(launch) != std::string::npos);
  narrow.replace(narrow.find(launch), launch.size(),
                 "<<<cdiv(num_tokens * d, 256), 256 * min(1, max(0, d - 172) + max(0, 172 - d) + "
                 "max(0, num_tokens - 8) + max(0, 8 - num_tokens))>>>");
  env::StepJob broken{&silu,
                      narrow,
                      nullptr,
                      1,
                      rewards::default_reward_spec(),
                      nullptr,
                      catalog.resolve("stories260K", silu).value()};
  const auto refused = pipeline.run(broken);
  CHECK_MESSAGE(refused.status == core::StepStatus::kOk, refused.message);
  REQUIRE(refused.model.contains("error"));
  CHECK_MESSAGE(refused.model["error"].get<std::string>().find(
                    "the launch plan does not hold at call site activation of model stories260K") !=
                    std::string::npos,
                refused.model.dump());
  CHECK_FALSE(refused.to_value()["model"].contains("steps"));

  // llm/linear promises multiples of 8; stories260K's down projection reads 172 features, so a
  // candidate GEMM is not placed in that model (it would be judged outside its task).
  const auto& linear = task("llm/linear");
  env::StepJob gemm{&linear,
                    read_text(CRUCIBLE_SOURCE_DIR "/tasks/llm/linear/solution.cu"),
                    nullptr,
                    1,
                    rewards::default_reward_spec(),
                    nullptr,
                    catalog.resolve("stories260K", linear).value()};
  const auto outside = pipeline.run(gemm);
  REQUIRE_MESSAGE(outside.status == core::StepStatus::kOk, outside.message);
  REQUIRE(outside.model.contains("error"));
  CHECK_MESSAGE(outside.model["error"].get<std::string>().find(
                    "call site down_proj of model stories260K (in_features=172, num_tokens=8, "
                    "out_features=64) is outside what llm/linear promises (in_features and "
                    "out_features are multiples of 8)") != std::string::npos,
                outside.model.dump());
  // At Llama-3-8B's shapes the same candidate is placed.
  gemm.model = catalog.resolve("llama3_8b", linear).value();
  CHECK(pipeline.run(gemm).model.contains("steps"));
}
