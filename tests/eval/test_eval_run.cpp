// crucible eval: loading folders and JSONL, selection, in-process and server scoring, resume.
#include <doctest/doctest.h>

#include <atomic>
#include <set>

#include "env/cli/eval.hpp"
#include "tests/env/server_fixture.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;

namespace {

const std::string kRmsNormSource =
    testing::read_file(CRUCIBLE_SOURCE_DIR "/tasks/llm/rms_norm/solution.cu");

std::string jsonl_line(const core::Value& record) { return record.dump() + "\n"; }

// Counts calls and asks the run to stop after `stop_after` samples, as Ctrl-C would.
class StoppingScorer final : public env::Scorer {
 public:
  StoppingScorer(std::atomic<bool>* stop, std::size_t stop_after)
      : stop_(stop), stop_after_(stop_after) {}
  core::Value score(const env::Sample& sample, const tasks::Task& task, std::size_t) override {
    const std::size_t n = ++calls;
    if (stop_ != nullptr && n >= stop_after_) stop_->store(true);
    core::Value result{{"status", n % 2 == 0 ? "ok" : "incorrect"}, {"message", ""}};
    if (n % 2 == 0) result["speedup"] = 1.5;
    return env::make_result_record(sample, task, result, 0.0, 1, where(), 0.0);
  }
  std::string where() const override { return "test"; }
  std::atomic<std::size_t> calls{0};

 private:
  std::atomic<bool>* stop_;
  std::size_t stop_after_;
};

env::Sample make_sample(std::string id, std::string task, std::string source) {
  env::Sample sample;
  sample.sample_id = std::move(id);
  sample.task = std::move(task);
  sample.source = std::move(source);
  return sample;
}

std::vector<env::Sample> numbered_samples(std::size_t n) {
  std::vector<env::Sample> samples;
  for (std::size_t i = 0; i < n; ++i) {
    samples.push_back(make_sample("s" + std::to_string(i), "llm/rms_norm", "// sample"));
  }
  return samples;
}

}  // namespace

TEST_CASE("eval input: a folder maps <task-id>.cu and <task-id>/<name>.cu to tasks, skips others") {
  const auto& registry = testing::shared_registry();
  const auto dir = testing::fresh_dir("folder");
  testing::write_file(dir / "llm" / "rms_norm.cu", kRmsNormSource);
  testing::write_file(dir / "llm" / "rms_norm" / "second.cu", "// second");
  testing::write_file(dir / "llm" / "not_a_task.cu", "// nothing");
  testing::write_file(dir / "llm" / "notes.txt", "not a solution");
  std::vector<std::string> skipped;
  auto samples = env::load_samples(dir, registry, &skipped);
  REQUIRE(samples.ok());
  REQUIRE(samples->size() == 2);
  CHECK((*samples)[0].sample_id == "llm/rms_norm");
  CHECK((*samples)[0].task == "llm/rms_norm");
  CHECK((*samples)[0].source == kRmsNormSource);
  CHECK((*samples)[1].sample_id == "llm/rms_norm/second");
  CHECK((*samples)[1].task == "llm/rms_norm");
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find("not_a_task.cu") != std::string::npos);
}

TEST_CASE("eval input: JSONL records, default sample ids, and errors that name the line") {
  const auto& registry = testing::shared_registry();
  const auto dir = testing::fresh_dir("jsonl");
  testing::write_file(dir / "good.jsonl",
                      jsonl_line({{"task", "llm/rms_norm"},
                                  {"source", "a"},
                                  {"sample_id", "x"},
                                  {"meta", {{"model", "m1"}}}}) +
                          "\n" + jsonl_line({{"task", "llm/rms_norm"}, {"source", "b"}}));
  auto samples = env::load_samples(dir / "good.jsonl", registry);
  REQUIRE(samples.ok());
  REQUIRE(samples->size() == 2);
  CHECK((*samples)[0].sample_id == "x");
  CHECK((*samples)[0].meta["model"] == "m1");
  CHECK((*samples)[1].sample_id == "llm/rms_norm#3");

  testing::write_file(dir / "bad.jsonl",
                      jsonl_line({{"task", "llm/rms_norm"}, {"source", "a"}}) + "{not json\n");
  auto bad = env::load_samples(dir / "bad.jsonl", registry);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("bad.jsonl:2: not a JSON object") != std::string::npos);

  testing::write_file(dir / "missing.jsonl", jsonl_line({{"task", "llm/rms_norm"}}));
  auto missing = env::load_samples(dir / "missing.jsonl", registry);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("`task` and either a string `source` or a `completion`") !=
        std::string::npos);

  testing::write_file(
      dir / "twice.jsonl",
      jsonl_line({{"task", "llm/rms_norm"}, {"source", "a"}, {"sample_id", 7}}) +
          jsonl_line({{"task", "llm/rms_norm"}, {"source", "b"}, {"sample_id", 7}}));
  auto twice = env::load_samples(dir / "twice.jsonl", registry);
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error().message.find("'7' is used twice") != std::string::npos);
}

TEST_CASE("eval selection: all, a category or a task id; unknown selectors and tasks are errors") {
  const auto& registry = testing::shared_registry();
  const std::vector<env::Sample> samples = numbered_samples(3);
  for (const auto& selection :
       std::vector<std::vector<std::string>>{{}, {"all"}, {"llm"}, {"llm/rms_norm"}}) {
    auto kept = env::select_samples(samples, selection, registry);
    REQUIRE(kept.ok());
    CHECK(kept->size() == 3);
  }
  auto unknown_selector = env::select_samples(samples, {"nope"}, registry);
  REQUIRE_FALSE(unknown_selector.ok());
  CHECK(unknown_selector.error().message.find("neither a task id nor a category") !=
        std::string::npos);
  auto unknown_task = env::select_samples({make_sample("z", "llm/nope", "")}, {"all"}, registry);
  REQUIRE_FALSE(unknown_task.ok());
  CHECK(unknown_task.error().code == core::ErrorCode::kUnknownTask);
}

TEST_CASE("eval run: a folder scored in-process without compile workers is all infra_error") {
  const auto& registry = testing::shared_registry();
  const auto in = testing::fresh_dir("in");
  testing::write_file(in / "llm" / "rms_norm.cu", kRmsNormSource);
  testing::write_file(in / "llm" / "rms_norm" / "copy.cu", kRmsNormSource);
  auto samples = env::load_samples(in, registry);
  REQUIRE(samples.ok());
  const auto pipeline = testing::no_gpu_pipeline(false);
  auto scorer = env::make_pipeline_scorer(pipeline, rewards::default_reward_spec(), 3);
  env::EvalOptions options;
  options.out_dir = testing::fresh_dir("out");
  options.quiet = true;
  auto outcome = env::run_eval(*samples, registry, *scorer, options, {{"input", in.string()}});
  REQUIRE_MESSAGE(outcome.ok(), outcome.error().message);
  CHECK(outcome->scored == 2);
  CHECK_FALSE(outcome->interrupted);
  auto records = env::read_results(options.out_dir / "results.jsonl");
  REQUIRE(records.ok());
  REQUIRE(records->size() == 2);
  for (const auto& record : *records) {
    CHECK(record["status"] == "infra_error");
    CHECK(record["infra"] == true);
    CHECK(record["seed"] == 3);
    CHECK(record["scored_by"] == "in-process");
    CHECK(record["category"] == "llm");
    CHECK(record["result"].contains("stages"));
  }
  const auto summary = core::Value::parse(testing::read_file(options.out_dir / "summary.json"));
  CHECK(summary["overall"]["infra_errors"] == 2);
  CHECK(summary["overall"]["scored"] == 0);
  CHECK(summary["run"]["samples_recorded"] == 2);
  CHECK(std::filesystem::file_size(options.out_dir / "report.md") > 0);
  CHECK(std::filesystem::file_size(options.out_dir / "report.html") > 0);

  // The same folder again without --resume is refused instead of mixing two runs.
  auto again = env::run_eval(*samples, registry, *scorer, options, {});
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message.find("--resume") != std::string::npos);
}

TEST_CASE("eval run: JSONL scored in-process with real compile workers gives each status") {
  const auto& registry = testing::shared_registry();
  const auto dir = testing::fresh_dir("compile");
  testing::write_file(
      dir / "samples.jsonl",
      jsonl_line({{"task", "llm/rms_norm"}, {"source", kRmsNormSource}, {"sample_id", "good"}}) +
          jsonl_line({{"task", "llm/rms_norm"},
                      {"source",
                       "// @launch k<<<1, 1>>>(out)\nextern \"C\" __global__ void "
                       "k(float* out) { out[0] = undeclared_name; }\n"},
                      {"sample_id", "broken"}}) +
          jsonl_line({{"task", "llm/rms_norm"},
                      {"source", "int main() { return 0; }\n"},
                      {"sample_id", "no_kernel"}}));
  auto samples = env::load_samples(dir / "samples.jsonl", registry);
  REQUIRE(samples.ok());
  const auto pipeline = testing::no_gpu_pipeline(true);
  auto scorer = env::make_pipeline_scorer(pipeline, rewards::default_reward_spec(), 1);
  env::EvalOptions options;
  options.out_dir = dir / "out";
  options.quiet = true;
  options.workers = 2;
  auto outcome = env::run_eval(*samples, registry, *scorer, options, {});
  REQUIRE_MESSAGE(outcome.ok(), outcome.error().message);
  auto records = env::read_results(options.out_dir / "results.jsonl");
  REQUIRE(records.ok());
  std::map<std::string, std::string> status;
  for (const auto& r : *records) status[r["sample_id"]] = r["status"];
  CHECK(status["good"] == "infra_error");  // compiled; the GPU stage is unavailable here
  CHECK(status["broken"] == "compile_error");
  CHECK(status["no_kernel"] == "invalid_action");
  const auto& overall = outcome->summary["overall"];
  CHECK(overall["scored"] == 2);  // the infra_error sample takes no part
  CHECK(overall["correct"] == 0);
  CHECK(overall["infra_errors"] == 1);
  CHECK(overall["geomean_speedup_all"].get<double>() == doctest::Approx(1.0));
}

TEST_CASE("eval run: an interrupted run keeps what was scored and --resume finishes the rest") {
  const auto& registry = testing::shared_registry();
  const auto samples = numbered_samples(10);
  env::EvalOptions options;
  options.out_dir = testing::fresh_dir("resume");
  options.quiet = true;
  options.workers = 1;
  std::atomic<bool> stop{false};
  options.stop = &stop;
  StoppingScorer first(&stop, 4);
  auto interrupted = env::run_eval(samples, registry, first, options, {});
  REQUIRE(interrupted.ok());
  CHECK(interrupted->interrupted);
  CHECK(interrupted->scored == 4);
  CHECK(interrupted->remaining == 6);
  CHECK(interrupted->summary["run"]["interrupted"] == true);
  CHECK(interrupted->summary["overall"]["scored"] == 4);

  // A record torn by a kill in mid-write is dropped, and its sample scored again.
  {
    std::ofstream results(options.out_dir / "results.jsonl", std::ios::app);
    results << R"({"sample_id": "s4", "status": "o)";
  }
  stop = false;
  options.resume = true;
  StoppingScorer second(nullptr, 0);
  auto resumed = env::run_eval(samples, registry, second, options, {});
  REQUIRE_MESSAGE(resumed.ok(), resumed.error().message);
  CHECK(resumed->already_done == 4);
  CHECK(resumed->scored == 6);
  CHECK(second.calls == 6);
  CHECK_FALSE(resumed->interrupted);
  std::size_t torn = 99;
  auto records = env::read_results(options.out_dir / "results.jsonl", &torn);
  REQUIRE(records.ok());
  CHECK(torn == 0);
  std::set<std::string> ids;
  for (const auto& r : *records) ids.insert(r["sample_id"].get<std::string>());
  CHECK(records->size() == 10);
  CHECK(ids.size() == 10);
  CHECK(resumed->summary["overall"]["scored"] == 10);

  // Resuming a finished run scores nothing.
  StoppingScorer third(nullptr, 0);
  auto nothing_left = env::run_eval(samples, registry, third, options, {});
  REQUIRE(nothing_left.ok());
  CHECK(third.calls == 0);
  CHECK(nothing_left->already_done == 10);
}

TEST_CASE("eval run: --server scores through a running server's score op") {
  const auto& registry = testing::shared_registry();
  testing::RunningServer server;
  auto scorer = env::make_server_scorer(server.endpoint(), 2, nullptr, 5, std::chrono::seconds(30));
  REQUIRE(scorer.ok());
  env::EvalOptions options;
  options.out_dir = testing::fresh_dir("server");
  options.quiet = true;
  options.workers = 2;
  auto outcome = env::run_eval(numbered_samples(3), registry, **scorer, options, {});
  REQUIRE_MESSAGE(outcome.ok(), outcome.error().message);
  auto records = env::read_results(options.out_dir / "results.jsonl");
  REQUIRE(records.ok());
  REQUIRE(records->size() == 3);
  for (const auto& r : *records) {
    CHECK(r["scored_by"] == server.endpoint());
    // "// sample" declares no kernel: the server's validate stage refuses it.
    CHECK(r["status"] == "invalid_action");
    CHECK(r["seed"] == 5);
  }
  CHECK(outcome->summary["overall"]["scored"] == 3);
}

TEST_CASE("eval run: an unreachable server gives infra_error records, never a made-up score") {
  const auto& registry = testing::shared_registry();
  auto scorer =
      env::make_server_scorer("tcp://127.0.0.1:1", 1, nullptr, 1, std::chrono::milliseconds(300));
  REQUIRE(scorer.ok());
  env::EvalOptions options;
  options.out_dir = testing::fresh_dir("unreachable");
  options.quiet = true;
  auto outcome = env::run_eval(numbered_samples(1), registry, **scorer, options, {});
  REQUIRE(outcome.ok());
  CHECK(outcome->summary["overall"]["infra_errors"] == 1);
  CHECK(outcome->summary["infra_errors"][0]["message"].get<std::string>().find("no reply") !=
        std::string::npos);
}
