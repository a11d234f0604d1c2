// LLM completions as eval input: source extraction held to the table the Python client shares,
// completion rows scored from their source, and rows without source recorded, never dropped.
#include <doctest/doctest.h>

#include <atomic>
#include <set>

#include "core/checksum.hpp"
#include "env/cli/completion.hpp"
#include "env/cli/eval.hpp"
#include "tests/env/server_fixture.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;
using core::Value;

namespace {

const std::string kKernel =
    "// @launch k<<<1, 1>>>(out)\nextern \"C\" __global__ void k(float* out) { out[0] = 1; }\n";
const std::string kOtherKernel =
    "// @launch k2<<<1, 1>>>(out)\nextern \"C\" __global__ void k2(float* out) { out[0] = 2; }\n";

// Records the source of every sample it is asked to score.
class RecordingScorer final : public env::Scorer {
 public:
  Value score(const env::Sample& sample, const tasks::Task& task, std::size_t) override {
    {
      std::lock_guard lock(mutex_);
      sources[sample.sample_id] = sample.source;
    }
    return env::make_result_record(sample, task, Value{{"status", "incorrect"}, {"message", ""}},
                                   -0.5, 1, where(), 0.0);
  }
  std::string where() const override { return "test"; }
  std::map<std::string, std::string> sources;

 private:
  std::mutex mutex_;
};

std::string line(const Value& record) { return record.dump() + "\n"; }

}  // namespace

TEST_CASE("completion table: every shared case extracts what the Python client extracts") {
  const auto table =
      Value::parse(testing::read_file(CRUCIBLE_SOURCE_DIR "/tests/eval/completion_cases.json"));
  REQUIRE(table["cases"].size() >= 40);
  std::size_t sources = 0, errors = 0, refused = 0;
  for (const auto& c : table["cases"]) {
    CAPTURE(c["name"].get<std::string>());
    const auto which =
        c.value("which", "last") == "first" ? env::SourceBlock::kFirst : env::SourceBlock::kLast;
    auto text = env::completion_text(c["completion"]);
    if (c.value("not_a_completion", false)) {
      CHECK_FALSE(text.ok());
      ++refused;
      continue;
    }
    REQUIRE_MESSAGE(text.ok(), text.error().message);
    auto source = env::extract_source(*text, which);
    if (c.contains("source")) {
      REQUIRE_MESSAGE(source.ok(), source.error().message);
      CHECK(*source == c["source"].get<std::string>());
      ++sources;
    } else {
      REQUIRE_FALSE(source.ok());
      CHECK(source.error().message == c["error"].get<std::string>());
      ++errors;
    }
  }
  // The table covers all three outcomes.
  CHECK(sources > 30);
  CHECK(errors >= 5);
  CHECK(refused >= 1);
}

TEST_CASE("completion: the first or last block is picked and a blank block is never the source") {
  const std::string text = "```cuda\n" + kKernel + "```\nthen\n```cpp\n\n  \n```\n```c++\n" +
                           kOtherKernel + "```\n```cuda\n   \n```\n";
  CHECK(*env::extract_source(text) == kOtherKernel);
  CHECK(*env::extract_source(text, env::SourceBlock::kFirst) == kKernel);
  auto thinking = env::extract_source("<Think>```cuda\n" + kKernel + "```</think>I give up.");
  REQUIRE_FALSE(thinking.ok());
  CHECK(thinking.error().message ==
        "the completion holds no ```cuda code block and no kernel source");
}

TEST_CASE("eval input: completion rows are scored from their source; rows without one are kept") {
  const auto& registry = testing::shared_registry();
  const auto dir = testing::fresh_dir("completions");
  const std::string chat_text = "```cuda\n" + kKernel + "```\n```cuda\n" + kOtherKernel + "```\n";
  testing::write_file(
      dir / "in.jsonl",
      line({{"task", "llm/rms_norm"},
            {"sample_id", "text"},
            {"completion", "<think>plan</think>\n```cuda\n" + kKernel + "```"},
            {"meta", {{"model", "m1"}}}}) +
          line(
              {{"task", "llm/rms_norm"},
               {"sample_id", "chat"},
               {"completion", Value::array({Value{{"role", "user"}, {"content", "write it"}},
                                            Value{{"role", "assistant"}, {"content", chat_text}}})},
               {"meta", {{"model", "m1"}}}}) +
          line({{"task", "llm/rms_norm"},
                {"sample_id", "refusal"},
                {"completion", "I cannot write CUDA."},
                {"meta", {{"model", "m2"}}}}) +
          line({{"task", "llm/rms_norm"},
                {"sample_id", "python"},
                {"completion", "```python\nprint(1)\n```"}}) +
          line({{"task", "llm/rms_norm"}, {"sample_id", "plain"}, {"source", kKernel}}));

  for (const auto which : {env::SourceBlock::kLast, env::SourceBlock::kFirst}) {
    CAPTURE(which == env::SourceBlock::kFirst);
    auto samples = env::load_samples(dir / "in.jsonl", registry, nullptr, which);
    REQUIRE_MESSAGE(samples.ok(), samples.error().message);
    REQUIRE(samples->size() == 5);
    CHECK((*samples)[0].source == kKernel);
    CHECK((*samples)[1].source == (which == env::SourceBlock::kLast ? kOtherKernel : kKernel));
    CHECK((*samples)[0].from_completion);
    CHECK_FALSE((*samples)[4].from_completion);
    CHECK((*samples)[2].no_source ==
          "no CUDA source in the completion: the completion holds no ```cuda code block and no "
          "kernel source");
    CHECK((*samples)[3].no_source ==
          "no CUDA source in the completion: the completion's code blocks are not CUDA/C++ "
          "(python)");
  }

  auto samples = env::load_samples(dir / "in.jsonl", registry);
  REQUIRE(samples.ok());
  RecordingScorer scorer;
  env::EvalOptions options;
  options.out_dir = dir / "out";
  options.quiet = true;
  options.seed = 9;
  auto spec = rewards::parse_reward_spec(Value{{"penalty", {{"invalid_action", -3.0}}}});
  REQUIRE(spec.ok());
  options.reward_spec = *spec;
  auto outcome = env::run_eval(*samples, registry, scorer, options, {});
  REQUIRE_MESSAGE(outcome.ok(), outcome.error().message);
  // Only the rows with a source reach the scorer, each with the extracted text.
  CHECK(scorer.sources.size() == 3);
  CHECK(scorer.sources["text"] == kKernel);
  CHECK(scorer.sources["chat"] == kOtherKernel);
  CHECK(scorer.sources.count("refusal") == 0);

  auto records = env::read_results(options.out_dir / "results.jsonl");
  REQUIRE(records.ok());
  REQUIRE(records->size() == 5);  // every row is in the results, none dropped
  std::map<std::string, Value> by_id;
  for (const auto& record : *records) by_id[record["sample_id"].get<std::string>()] = record;
  for (const char* id : {"refusal", "python"}) {
    CAPTURE(id);
    const auto& record = by_id[id];
    CHECK(record["status"] == "invalid_action");
    CHECK(record["message"].get<std::string>().starts_with("no CUDA source in the completion: "));
    CHECK(record["reward"].get<double>() == -3.0);
    CHECK(record["seed"] == 9);
    CHECK(record["source_from"] == "completion");
    CHECK(record["source_bytes"] == 0);
  }
  CHECK(by_id["text"]["source_sha256"] == core::sha256_hex(kKernel));
  CHECK(by_id["text"]["source_from"] == "completion");
  CHECK(by_id["plain"]["source_from"] == "source");
  // They count: 5 scored, none correct, and m2's only sample is its refusal.
  const auto& summary = outcome->summary;
  CHECK(summary["overall"]["scored"] == 5);
  CHECK(summary["overall"]["statuses"]["invalid_action"] == 2);
  CHECK(summary["models"]["m2"]["scored"] == 1);
  CHECK(summary["models"]["m2"]["statuses"]["invalid_action"] == 1);
}

TEST_CASE(
    "eval input: a row with both source and completion, or a completion of no text shape, "
    "is refused with its line") {
  const auto& registry = testing::shared_registry();
  const auto dir = testing::fresh_dir("completion-bad");
  const struct {
    Value record;
    std::string message;
  } rows[] = {
      {{{"task", "llm/rms_norm"}, {"source", "x"}, {"completion", "y"}},
       "bad.jsonl:1: a record gives `source` or `completion`, not both"},
      {{{"task", "llm/rms_norm"}, {"completion", 42}},
       "bad.jsonl:1: `completion`: a completion must be a string, a chat message or a list of "
       "messages, got a number"},
      {{{"task", "llm/rms_norm"}, {"completion", nullptr}}, "got null"},
      {{{"task", "llm/rms_norm"}}, "either a string `source` or a `completion`"},
      {{{"task", "llm/rms_norm"}, {"source", 5}}, "either a string `source` or a `completion`"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.record.dump());
    testing::write_file(dir / "bad.jsonl", line(row.record));
    auto samples = env::load_samples(dir / "bad.jsonl", registry);
    REQUIRE_FALSE(samples.ok());
    CHECK(samples.error().message.find(row.message) != std::string::npos);
  }
}

#ifdef CRUCIBLE_EXE
TEST_CASE("eval CLI: --first-block scores a completion's first block, the default its last") {
  const auto dir = testing::fresh_dir("cli-completion");
  testing::write_file(
      dir / "in.jsonl",
      line({{"task", "llm/rms_norm"},
            {"sample_id", "two-blocks"},
            {"completion", "```cuda\n" + kKernel + "```\n```cuda\n" + kOtherKernel + "```\n"}}) +
          line({{"task", "llm/rms_norm"}, {"sample_id", "none"}, {"completion", "Sorry, no."}}));
  for (const std::string flag : {"", "--first-block "}) {
    CAPTURE(flag);
    const auto out = dir / (flag.empty() ? "last" : "first");
    std::string output;
    const int rc = testing::run_command(
        std::string(CRUCIBLE_EXE) + " --home '" CRUCIBLE_SOURCE_DIR "' eval --no-compile " + flag +
            "-o '" + out.string() + "' '" + (dir / "in.jsonl").string() + "'",
        &output);
    // The row without source is judged (invalid_action), so something was measured.
    CHECK_MESSAGE(rc == 0, output);
    auto records = env::read_results(out / "results.jsonl");
    REQUIRE(records.ok());
    REQUIRE(records->size() == 2);
    for (const auto& record : *records) {
      if (record["sample_id"] == "none") {
        CHECK(record["status"] == "invalid_action");
        continue;
      }
      CHECK(record["source_sha256"] == core::sha256_hex(flag.empty() ? kOtherKernel : kKernel));
    }
    const auto summary = Value::parse(testing::read_file(out / "summary.json"));
    CHECK(summary["run"]["completion_block"] == (flag.empty() ? "last" : "first"));
  }
}
#endif
