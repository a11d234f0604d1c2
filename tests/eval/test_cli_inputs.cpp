// The crucible CLI on hostile input: odd log records and results, deep JSON, bad options, failed
// writes.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <functional>
#include <regex>
#include <sstream>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/msgpack_codec.hpp"
#include "env/cli/eval.hpp"
#include "env/cli/replay.hpp"
#include "env/trajectory_log.hpp"
#include "tests/env/server_fixture.hpp"
#include "tests/eval/eval_test_support.hpp"

using namespace crucible;
using core::Value;

namespace {

// A step record as `crucible serve` logs it, with a source that declares no kernel (the validate
// stage answers it without compiling).
Value good_step(int step) {
  const auto spec = rewards::default_reward_spec();
  rewards::Measurement m;
  m.status = core::StepStatus::kOk;
  m.speedup = 2.0;
  const auto reward = rewards::compute_reward(spec, m);
  return Value{{"kind", "step"},
               {"task", "llm/rms_norm"},
               {"seed", 11},
               {"source", "int main() { return 0; }\n"},
               {"plan", nullptr},
               {"reward_spec", rewards::reward_spec_to_value(spec)},
               {"result", {{"status", "ok"}, {"message", ""}, {"speedup", 2.0}}},
               {"reward", reward.total},
               {"episode", "ep-cli"},
               {"step", step}};
}

Value edited(const std::function<void(Value&)>& edit) {
  Value record = good_step(2);
  edit(record);
  return record;
}

struct BadRecord {
  Value record;
  std::string expected;  // what the message about it must say
};

// Checksum-valid records of the wrong shape: each must be reported by its field, never thrown on.
std::vector<BadRecord> bad_records() {
  return {
      {Value(5), "not a map but an integer"},
      {Value::array({1, 2}), "not a map but an array"},
      {Value("step"), "not a map but a string"},
      {edited([](Value& r) { r["task"] = 5; }), "field 'task' must be a string, got integer"},
      {edited([](Value& r) { r.erase("task"); }), "missing field 'task'"},
      {edited([](Value& r) { r["result"] = "x"; }), "field 'result' must be a map, got string"},
      {edited([](Value& r) { r.erase("result"); }), "missing field 'result'"},
      {edited([](Value& r) { r["result"]["status"] = 5; }),
       "field 'result.status' must be a string, got integer"},
      {edited([](Value& r) { r["result"].erase("status"); }), "missing field 'result.status'"},
      {edited([](Value& r) { r["result"]["status"] = "bogus"; }),
       "field 'result.status' is 'bogus', not a step status"},
      {edited([](Value& r) { r["result"]["speedup"] = "fast"; }),
       "field 'result.speedup' must be a number, got string"},
      {edited([](Value& r) { r["result"]["speedup"] = -2.0; }),
       "field 'result.speedup' must be a positive finite number"},
      {edited([](Value& r) { r["reward"] = "x"; }), "field 'reward' must be a number, got string"},
      {edited([](Value& r) { r.erase("reward"); }), "missing field 'reward'"},
      {edited([](Value& r) { r["seed"] = -1; }), "field 'seed' must be a non-negative integer"},
      {edited([](Value& r) { r["seed"] = "x"; }),
       "field 'seed' must be a non-negative integer, got string"},
      {edited([](Value& r) { r["source"] = 5; }), "field 'source' must be a string, got integer"},
      {edited([](Value& r) { r["plan"] = 5; }),
       "field 'plan' must be an array of launches or a map, got integer"},
      {edited([](Value& r) { r["reward_spec"] = "x"; }),
       "field 'reward_spec' must be a map, got string"},
      {edited([](Value& r) { r["episode"] = Value::array(); }),
       "field 'episode' must be a string or an integer, got array"},
      {edited([](Value& r) { r["step"] = "x"; }), "field 'step' must be an integer, got string"},
  };
}

std::filesystem::path write_log(const std::vector<Value>& records,
                                const std::string& name = "log") {
  const auto path = testing::fresh_dir(name) / "trajectories.log";
  auto log = env::TrajectoryLog::open(path, false);
  REQUIRE(log.ok());
  for (const auto& record : records) REQUIRE((*log)->append(record).ok());
  return path;
}

// Bytes one record takes in a log: sync marker, length, checksum, payload.
std::size_t record_bytes(const Value& record) { return 12 + core::encode_msgpack(record).size(); }

constexpr std::size_t kLogHeaderBytes = 16;

std::string deep_json(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("replay: records of the wrong shape are reported by record and field, never thrown on") {
  const auto pipeline = testing::no_gpu_pipeline(false);
  for (const auto& bad : bad_records()) {
    CAPTURE(bad.record.dump());
    auto loaded = env::load_log(write_log({good_step(1), bad.record, good_step(3)}));
    REQUIRE(loaded.ok());
    REQUIRE(loaded->records.size() == 3);

    const auto rescored = env::rescore_log(loaded->records, rewards::default_reward_spec());
    REQUIRE(rescored["steps"].size() == 3);
    CHECK(rescored["summary"]["malformed"] == 1);
    CHECK(rescored["summary"]["steps"] == 3);
    const auto& step = rescored["steps"][1];
    CHECK(step["index"] == 1);
    REQUIRE(step.contains("malformed"));
    CHECK(step["malformed"].get<std::string>().find(bad.expected) != std::string::npos);
    CHECK_FALSE(step.contains("new_reward"));
    // The good records around it are re-scored as usual.
    CHECK(rescored["steps"][0]["new_reward"].get<double>() == doctest::Approx(1.5));
    CHECK(rescored["steps"][2]["new_reward"].get<double>() == doctest::Approx(1.5));
    CHECK(rescored["summary"]["mean_new"].get<double>() == doctest::Approx(1.5));
    CHECK(env::format_replay(rescored).find("malformed: " + bad.expected) != std::string::npos);

    const auto remeasured =
        env::remeasure_log(loaded->records, testing::shared_registry(), pipeline, 2);
    REQUIRE(remeasured["steps"].size() == 3);
    CHECK(remeasured["summary"]["malformed"] == 1);
    CHECK(remeasured["summary"]["compared"] == 2);
    CHECK(remeasured["steps"][1]["malformed"].get<std::string>().find(bad.expected) !=
          std::string::npos);
    CHECK(remeasured["steps"][0]["new_status"] == "invalid_action");
    CHECK(env::format_replay(remeasured).find("malformed: " + bad.expected) != std::string::npos);
  }
}

TEST_CASE("eval results: a results.jsonl record of the wrong type is refused by line and field") {
  const Value good{{"sample_id", "a"}, {"task", "llm/rms_norm"}, {"category", "llm"},
                   {"status", "ok"},   {"message", ""},          {"speedup", 1.5}};
  struct Case {
    std::string line;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"5", ":2: not a JSON object but a number"},
      {"[1]", ":2: not a JSON object but an array"},
      {R"({"sample_id": 5, "status": "ok"})", ":2: field 'sample_id' must be a string, got number"},
      {R"({"status": "ok"})", ":2: missing field 'sample_id'"},
      {R"({"sample_id": "b", "status": 5})", ":2: field 'status' must be a string, got number"},
      {R"({"sample_id": "b"})", ":2: missing field 'status'"},
      {R"({"sample_id": "b", "status": "ok", "task": 5})",
       ":2: field 'task' must be a string, got number"},
      {R"({"sample_id": "b", "status": "ok", "category": []})",
       ":2: field 'category' must be a string, got array"},
      {R"({"sample_id": "b", "status": "infra_error", "message": {}})",
       ":2: field 'message' must be a string, got object"},
      {R"({"sample_id": "b", "status": "ok", "speedup": "x"})",
       ":2: field 'speedup' must be a number, got string"},
      {R"({"sample_id": "b", "status": "ok", "meta": )" + deep_json(100000) + "}",
       ":2: nested deeper than 64"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.expected);
    const auto dir = testing::fresh_dir("results");
    testing::write_file(dir / "results.jsonl", good.dump() + "\n" + c.line + "\n");
    auto records = env::read_results(dir / "results.jsonl");
    REQUIRE_FALSE(records.ok());
    CHECK(records.error().message.find("results.jsonl" + c.expected) != std::string::npos);
  }
  // Only the last line can be torn by an interruption; a broken line before it is damage.
  const auto dir = testing::fresh_dir("results-middle");
  testing::write_file(dir / "results.jsonl",
                      good.dump() + "\n{\"sample_id\": \"b\", \"sta\n" +
                          Value{{"sample_id", "c"}, {"status", "ok"}}.dump() + "\n");
  auto middle = env::read_results(dir / "results.jsonl");
  REQUIRE_FALSE(middle.ok());
  CHECK(middle.error().message.find("results.jsonl:2: not JSON") != std::string::npos);
}

TEST_CASE("eval input: a JSONL line nested 100000 deep is refused with its line, not a crash") {
  const auto dir = testing::fresh_dir("deep");
  testing::write_file(dir / "deep.jsonl",
                      Value{{"task", "llm/rms_norm"}, {"source", "x"}}.dump() + "\n" +
                          R"({"task": "llm/rms_norm", "source": "y", "meta": )" +
                          deep_json(100000) + "}\n");
  auto samples = env::load_samples(dir / "deep.jsonl", testing::shared_registry());
  REQUIRE_FALSE(samples.ok());
  CHECK(samples.error().message.find("deep.jsonl:2: nested deeper than 64") != std::string::npos);
  // 64 levels are fine.
  testing::write_file(dir / "ok.jsonl", R"({"task": "llm/rms_norm", "source": "y", "meta": )" +
                                            deep_json(63) + "}\n");
  auto ok = env::load_samples(dir / "ok.jsonl", testing::shared_registry());
  REQUIRE_MESSAGE(ok.ok(), ok.error().message);
  CHECK(ok->size() == 1);
  // Brackets inside strings are text, not nesting.
  testing::write_file(dir / "text.jsonl",
                      Value{{"task", "llm/rms_norm"}, {"source", deep_json(1000)}}.dump() + "\n");
  auto text = env::load_samples(dir / "text.jsonl", testing::shared_registry());
  REQUIRE_MESSAGE(text.ok(), text.error().message);
  CHECK((*text)[0].source == deep_json(1000));
}

#ifdef CRUCIBLE_EXE
namespace {

// `crucible --home <source tree> ARGS`, stopped after `timeout_s` (exit 124) so that a command
// that blocks fails the test instead of hanging it.
int run_crucible(const std::string& args, std::string* output, int timeout_s = 60) {
  return testing::run_command("timeout " + std::to_string(timeout_s) + " " + CRUCIBLE_EXE +
                                  " --home '" CRUCIBLE_SOURCE_DIR "' " + args,
                              output);
}

std::string shell_quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

const std::string kExampleLog = CRUCIBLE_SOURCE_DIR "/examples/trajectories/trajectories.log";

// What the exported module at `module` says for every case of `task`: a Python script imports
// it as `op` and runs `body` (lines indented for a loop over the cases' symbol dicts as
// `symbols`, appending one value a case to `out`); the printed JSON list, one entry a case.
Value per_case_from_module(const std::filesystem::path& dir, const std::filesystem::path& module,
                           const tasks::Task& task, const std::string& body) {
  Value cases = Value::array();
  for (const auto& c : task.cases) cases.push_back(Value(c.symbols));
  testing::write_file(dir / "cases.json", cases.dump());
  testing::write_file(dir / "per_case.py",
                      "import importlib.util, json, sys\n"
                      "spec = importlib.util.spec_from_file_location('op', sys.argv[1])\n"
                      "op = importlib.util.module_from_spec(spec)\n"
                      "spec.loader.exec_module(op)\n"
                      "out = []\n"
                      "for symbols in json.load(open(sys.argv[2])):\n" +
                          body + "print(json.dumps(out))\n");
  std::string output;
  REQUIRE(testing::run_command("python3 " + shell_quoted(dir / "per_case.py") + " " +
                                   shell_quoted(module) + " " + shell_quoted(dir / "cases.json"),
                               &output) == 0);
  return Value::parse(output.substr(output.find('[')));
}

}  // namespace

TEST_CASE("replay CLI: wrong-shape records are named by record and field, the rest replayed") {
  std::vector<Value> records{good_step(0)};
  for (const auto& bad : bad_records()) records.push_back(bad.record);
  records.push_back(good_step(99));
  const auto log = write_log(records, "cli-shapes");
  const auto out = log.parent_path() / "replay.json";
  for (const std::string mode : {"--rescore ", ""}) {
    CAPTURE(mode);
    std::string output;
    const int rc = run_crucible(
        "replay " + mode + "-j 2 -o " + shell_quoted(out) + " " + shell_quoted(log), &output, 120);
    CHECK_MESSAGE(rc == 3, output);
    const auto all = bad_records();
    for (std::size_t i = 0; i < all.size(); ++i) {
      CAPTURE(all[i].expected);
      CHECK(output.find(log.string() + ": record " + std::to_string(i + 1) + ": " +
                        all[i].expected) != std::string::npos);
    }
    const auto replay = Value::parse(testing::read_file(out), nullptr, false);
    REQUIRE(replay.is_object());
    CHECK(replay["summary"]["steps"] == records.size());
    CHECK(replay["summary"]["malformed"] == all.size());
    CHECK(replay["log"]["read"]["skipped"] == Value::array());
    CHECK_FALSE(replay["steps"][0].contains("malformed"));
    CHECK_FALSE(replay["steps"][records.size() - 1].contains("malformed"));
  }
}

TEST_CASE("eval CLI: --resume over a results.jsonl record of the wrong type exits 2 naming it") {
  const auto dir = testing::fresh_dir("cli-resume");
  testing::write_file(
      dir / "in.jsonl",
      Value{{"task", "llm/rms_norm"}, {"source", "x"}, {"sample_id", "a"}}.dump() + "\n");
  for (const std::string line : {R"({"sample_id": 5})", R"({"sample_id": "a", "status": 5})",
                                 R"({"sample_id": "a", "status": "ok", "category": 7})", "[]"}) {
    CAPTURE(line);
    std::filesystem::remove_all(dir / "out");
    testing::write_file(dir / "out" / "results.jsonl", line + "\n");
    std::string output;
    const int rc = run_crucible("eval --no-compile --resume -o " + shell_quoted(dir / "out") + " " +
                                    shell_quoted(dir / "in.jsonl"),
                                &output);
    CHECK_MESSAGE(rc == 2, output);
    CHECK(output.find("crucible eval: " + (dir / "out" / "results.jsonl").string() + ":1: ") !=
          std::string::npos);
  }
}

TEST_CASE("eval CLI: deep JSON in the input or in --reward exits 2 with a message, no crash") {
  const auto dir = testing::fresh_dir("cli-deep");
  testing::write_file(dir / "deep.jsonl", R"({"task": "llm/rms_norm", "source": "x", "meta": )" +
                                              deep_json(100000) + "}\n");
  std::string output;
  int rc = run_crucible(
      "eval --no-compile -o " + shell_quoted(dir / "out") + " " + shell_quoted(dir / "deep.jsonl"),
      &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("deep.jsonl:1: nested deeper than 64") != std::string::npos);

  testing::write_file(dir / "reward.json", "{\"preset\": " + deep_json(100000) + "}");
  testing::write_file(dir / "in.jsonl", Value{{"task", "llm/rms_norm"}, {"source", "x"}}.dump());
  rc = run_crucible("eval --no-compile --reward " + shell_quoted(dir / "reward.json") + " -o " +
                        shell_quoted(dir / "out2") + " " + shell_quoted(dir / "in.jsonl"),
                    &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("--reward") != std::string::npos);
  CHECK(output.find("nested deeper than 64") != std::string::npos);
  rc = run_crucible("replay --rescore -o - --reward " + shell_quoted(dir / "reward.json") + " " +
                        shell_quoted(kExampleLog),
                    &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("nested deeper than 64") != std::string::npos);
}

TEST_CASE("CLI options: each numeric option refuses values outside its range and says the range") {
  const auto dir = testing::fresh_dir("cli-options");
  testing::write_file(dir / "in.jsonl",
                      Value{{"task", "llm/rms_norm"}, {"source", "int main() {}"}}.dump() + "\n");
  const std::string serve = "serve --no-compile --bind ipc://" + (dir / "s.sock").string() +
                            " --log " + shell_quoted(dir / "t.log") + " ";
  const std::string eval = "eval --no-compile -o " + shell_quoted(dir / "out") + " " +
                           shell_quoted(dir / "in.jsonl") + " ";
  const std::string replay = "replay --rescore -o - " + shell_quoted(kExampleLog) + " ";
  struct Case {
    std::string args;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {serve + "--idle-timeout 99999999999", {"--idle-timeout", "1 to 31536000", "1 year"}},
      {serve + "--idle-timeout 0", {"--idle-timeout", "1 to 31536000"}},
      {serve + "--idle-timeout -3", {"--idle-timeout", "1 to 31536000"}},
      {serve + "--max-frame-bytes 0", {"--max-frame-bytes", "1024 to 1073741824"}},
      {serve + "--max-frame-bytes 4294967296", {"--max-frame-bytes", "1024 to 1073741824"}},
      {serve + "--max-source-bytes 0", {"--max-source-bytes", "1 to 1073741824"}},
      {serve + "--max-source-bytes -1", {"--max-source-bytes", "1 to 1073741824"}},
      {serve + "--max-source-bytes 2000000", {"--max-source-bytes", "--max-frame-bytes"}},
      {serve + "--max-frame-bytes 4096 --max-source-bytes 4000",
       {"--max-source-bytes 4000", "--max-frame-bytes 4096"}},
      {serve + "--workers -1", {"--workers", "0 to 1024"}},
      {serve + "--workers 100000", {"--workers", "0 to 1024"}},
      {serve + "--compile-workers -1", {"--compile-workers", "0 to 256"}},
      {serve + "--runners-per-gpu 0", {"--runners-per-gpu", "1 to 16"}},
      {serve + "--runners-per-gpu 17", {"--runners-per-gpu", "1 to 16"}},
      {serve + "--max-steps 0", {"--max-steps", "1 to 10000"}},
      {serve + "--max-steps -1", {"--max-steps", "1 to 10000"}},
      {serve + "--kernel-timeout-ms 0", {"--kernel-timeout-ms", "1 to 600000"}},
      {serve + "--kernel-timeout-ms -5", {"--kernel-timeout-ms", "1 to 600000"}},
      {serve + "--kernel-timeout-ms nan", {"--kernel-timeout-ms", "1 to 600000"}},
      {serve + "--kernel-timeout-ms inf", {"--kernel-timeout-ms", "1 to 600000"}},
      {serve + "--time-cap-ms nan", {"--time-cap-ms", "1 to 600000"}},
      {serve + "--time-cap-ms 0", {"--time-cap-ms", "1 to 600000"}},
      {serve + "--target-ci nan", {"--target-ci", "above 0 and at most 1"}},
      {serve + "--target-ci inf", {"--target-ci", "above 0 and at most 1"}},
      {serve + "--target-ci 0", {"--target-ci", "above 0 and at most 1"}},
      {serve + "--target-ci -0.1", {"--target-ci", "above 0 and at most 1"}},
      {serve + "--target-ci 2", {"--target-ci", "above 0 and at most 1"}},
      {eval + "--timeout -5", {"--timeout", "1 to 86400"}},
      {eval + "--timeout 0", {"--timeout", "1 to 86400"}},
      {eval + "--seed -1", {"--seed", "0 to 18446744073709551615"}},
      {eval + "--seed 99999999999999999999", {"--seed", "0 to 18446744073709551615"}},
      {eval + "-j 0", {"--jobs", "1 to 256"}},
      {eval + "-j -1", {"--jobs", "1 to 256"}},
      {eval + "--compile-workers -1", {"--compile-workers", "0 to 256"}},
      {eval + "--target-ci nan", {"--target-ci", "above 0 and at most 1"}},
      {eval + "--server tcp://127.0.0.1:99999 --timeout 1",
       {"--server 'tcp://127.0.0.1:99999' is not a ZeroMQ endpoint"}},
      {eval + "--server garbage", {"--server 'garbage' is not a ZeroMQ endpoint"}},
      {replay + "--rows -1", {"--rows", "0 to 1000000"}},
      {replay + "-j 0", {"--jobs", "1 to 64"}},
      {replay + "--kernel-timeout-ms inf", {"--kernel-timeout-ms", "1 to 600000"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    std::filesystem::remove_all(dir / "out");
    std::string output;
    const int rc = run_crucible(c.args, &output, 10);
    CHECK_MESSAGE(rc == 2, output);
    for (const auto& text : c.expected)
      CHECK_MESSAGE(output.find(text) != std::string::npos, output);
    // Refused before anything started.
    CHECK(output.find("infra_error") == std::string::npos);
    CHECK(output.find("listening") == std::string::npos);
  }
}

TEST_CASE("serve CLI: a --bind that is not a ZeroMQ endpoint is refused before the server starts") {
  const auto dir = testing::fresh_dir("cli-bind");
  for (const std::string bind :
       {"garbage", "tcp://127.0.0.1", "tpc://127.0.0.1:5555", "ipc://", "tcp://127.0.0.1:99999"}) {
    CAPTURE(bind);
    std::string output;
    const int rc = run_crucible(
        "serve --no-compile --bind '" + bind + "' --log " + shell_quoted(dir / "t.log"), &output,
        10);
    CHECK_MESSAGE(rc == 2, output);
    CHECK(output.find("--bind '" + bind + "' is not a ZeroMQ endpoint") != std::string::npos);
    CHECK(output.find("--allow-remote") == std::string::npos);
    CHECK(output.find("infra_error") == std::string::npos);  // no GPU probe: nothing started
  }
}

TEST_CASE("serve CLI: the HTTP front's token and TLS flags are checked before anything starts") {
  const auto dir = testing::fresh_dir("cli-http-auth");
  std::string output;
  CHECK(run_crucible("keys token " + shell_quoted(dir / "token"), &output) == 0);
  CHECK(output.find("wrote ") != std::string::npos);
  CHECK((std::filesystem::status(dir / "token").permissions() &
         (std::filesystem::perms::group_all | std::filesystem::perms::others_all)) ==
        std::filesystem::perms::none);
  CHECK(run_crucible("keys token " + shell_quoted(dir / "token"), &output) == 2);
  CHECK(output.find("exists; not overwritten") != std::string::npos);
  const std::string log = " --log " + shell_quoted(dir / "t.log");
  const std::string tls = std::string(" --http-cert ") + CRUCIBLE_SOURCE_DIR +
                          "/tests/env/tls/cert.pem --http-key " + CRUCIBLE_SOURCE_DIR +
                          "/tests/env/tls/key.pem";
  const std::string token = " --http-token-file " + shell_quoted(dir / "token");
  const std::vector<std::pair<std::string, std::string>> refused = {
      // A remote front needs a token and TLS (or --insecure): neither, or only one of them.
      {"--http 0.0.0.0:0", "needs a bearer token and TLS"},
      {"--http 0.0.0.0:0" + token, "needs a bearer token and TLS"},
      {"--http 0.0.0.0:0" + tls, "needs a bearer token and TLS"},
      {"--http 127.0.0.1:0 --http-cert " + shell_quoted(dir / "token"), "go together"},
      {token, "give --http HOST:PORT too"},
      {"--http 127.0.0.1:0 --http-token-file " + shell_quoted(dir / "missing"),
       "--http-token-file cannot read token file"},
  };
  for (const auto& [flags, needle] : refused) {
    CAPTURE(flags);
    const int rc = run_crucible("serve --no-compile " + flags + log, &output, 10);
    CHECK_MESSAGE(rc == 2, output);
    CHECK_MESSAGE(output.find(needle) != std::string::npos, output);
    CHECK(output.find("listening") == std::string::npos);  // refused before starting
  }
}

TEST_CASE(
    "model CLI: show lists the call sites, plan evaluates a candidate at each, generate "
    "decodes") {
  std::string output;
  CHECK(run_crucible("model show llama3_8b --set num_seqs=64 --set context=2048", &output) == 0);
  CHECK(output.find("one step at context 2048, num_seqs 64: 386 calls at 14 call sites") !=
        std::string::npos);
  CHECK(output.find("gate_up_proj   llm/linear") != std::string::npos);
  CHECK(output.find("an estimate") != std::string::npos);
  const std::string linear = std::string(CRUCIBLE_SOURCE_DIR) + "/kernels/llm/linear.cu";
  CHECK(run_crucible("model plan llama3_8b " + linear +
                         " --task llm/linear --set num_seqs=8 --set context=512",
                     &output) == 0);
  CHECK(output.find("lm_head (1 calls a step; in_features=4096 num_tokens=8 "
                    "out_features=128256)") != std::string::npos);
  CHECK(output.find("the plan holds at every call site of llm/linear") != std::string::npos);
  // A plan that cannot launch at some sites (a block of out_features threads) says where.
  const auto dir = testing::fresh_dir("cli-model-plan");
  testing::write_file(dir / "wide.cu",
                      "// @launch wide<<<num_tokens, out_features>>>(out, input, weight, "
                      "num_tokens, in_features, out_features)\n"
                      "extern \"C\" __global__ void wide() {}\n");
  CHECK(run_crucible("model plan llama3_8b " + shell_quoted(dir / "wide.cu") +
                         " --task llm/linear --set num_seqs=8 --set context=512",
                     &output) == 1);
  CHECK(output.find("k_proj (32 calls a step; in_features=4096 num_tokens=8 "
                    "out_features=1024)\n  wide grid (8, 1, 1) block (1024, 1, 1)") !=
        std::string::npos);
  CHECK(output.find("q_proj (32 calls a step; in_features=4096 num_tokens=8 "
                    "out_features=4096)\n  cannot run here: ") != std::string::npos);
  CHECK(output.find("the plan fails at 5 of 7 call sites of llm/linear") != std::string::npos);
  // A task the model never calls, a variable left out, a bad setting: usage errors.
  CHECK(run_crucible("model plan llama3_8b " + linear +
                         " --task llm/moe_sum --set num_seqs=8 "
                         "--set context=512",
                     &output) == 2);
  CHECK(output.find("never calls llm/moe_sum") != std::string::npos);
  CHECK(run_crucible("model show llama3_8b --set num_seqs=8", &output) == 2);
  CHECK(output.find("variable 'context'") != std::string::npos);
  CHECK(run_crucible("model show llama3_8b --set num_seqs=x", &output) == 2);
  CHECK(output.find("not NAME=VALUE") != std::string::npos);
  // Greedy tokens from the step's float64 oracle: one line per sequence, its first token first.
  CHECK(run_crucible("model generate stories260K --tokens 8 --first 1 --first 400", &output) == 0);
  const std::regex line(R"((\d+):( \d+){8})");
  std::istringstream lines(output);
  int sequences = 0;
  for (std::string text; std::getline(lines, text);) {
    if (std::regex_match(text, line)) ++sequences;
  }
  CHECK_MESSAGE(sequences == 2, output);
  CHECK(run_crucible("model generate llama3_8b", &output) == 2);
  CHECK(output.find("synthetic weights") != std::string::npos);
}

TEST_CASE("export-op CLI: the exported op's launch plan is the server's on every case") {
  // The module evaluates the plan's expressions itself (Python, at every call); on every case of
  // these tasks (conditions, templates, cdiv and min, workspaces, thread-block clusters) it must
  // launch exactly what the server's evaluation launches. PyTorch, when installed, also
  // registers the op at import.
  const auto dir = testing::fresh_dir("cli-export-op");
  for (const char* id :
       {"llm/rms_norm", "llm/linear", "llm/paged_decode_attention", "llm/moe_align_block_size",
        "ssm/chunk_gated_delta_rule", "diffusion/conv2d_3x3"}) {
    CAPTURE(id);
    const tasks::Task* task = testing::shared_registry().find(id);
    REQUIRE(task != nullptr);
    const auto module = dir / (std::string(task->id.substr(task->id.find('/') + 1)) + ".py");
    std::string output;
    REQUIRE(run_crucible("export-op " + std::string(id) + " " +
                             shell_quoted(std::filesystem::path(CRUCIBLE_SOURCE_DIR) /
                                          task->reference_path) +
                             " -o " + shell_quoted(module),
                         &output) == 0);
    CHECK(output.find("torch.ops.crucible.") != std::string::npos);
    const Value python =
        per_case_from_module(dir, module, *task,
                             "    launches = [[l['kernel'], l['grid'], l['block'], l['smem'],\n"
                             "                 l['cluster']] for l in op.plan(symbols)]\n"
                             "    spaces = [op.evaluate(w['count'], symbols) * w['element_bytes']\n"
                             "              for w in op.PLAN['workspaces']]\n"
                             "    out.append([launches, spaces])\n");
    REQUIRE(python.size() == task->cases.size());
    const auto context = action::make_plan_context(*task);
    const auto plan = action::parse_launch_plan(task->reference_source, context);
    REQUIRE(plan.ok());
    for (std::size_t i = 0; i < task->cases.size(); ++i) {
      CAPTURE(task->cases[i].name);
      const auto concrete = action::evaluate_plan(*plan, task->cases[i].symbols, context);
      REQUIRE(concrete.ok());
      Value launches = Value::array();
      for (const auto& launch : concrete->launches) {
        launches.push_back(Value::array(
            {plan->launches[launch.launch].name_expression, Value(launch.grid), Value(launch.block),
             launch.smem_bytes, launch.has_cluster ? Value(launch.cluster) : Value(nullptr)}));
      }
      CHECK(python[i][0] == launches);
      CHECK(python[i][1] == Value(concrete->workspace_bytes));
    }
  }
  // A plan that does not fit the task, and a name that is not an identifier, are refused.
  std::string output;
  CHECK(run_crucible("export-op llm/moe_sum " + std::string(CRUCIBLE_SOURCE_DIR) +
                         "/kernels/llm/rms_norm.cu -o " + shell_quoted(dir / "x.py"),
                     &output) == 2);
  CHECK(output.find("crucible export-op: the launch plan: ") != std::string::npos);
  CHECK(run_crucible("export-op llm/rms_norm " + std::string(CRUCIBLE_SOURCE_DIR) +
                         "/kernels/llm/rms_norm.cu --name 9lives -o " + shell_quoted(dir / "x.py"),
                     &output) == 2);
  CHECK(output.find("'9lives' is not a Python identifier") != std::string::npos);
}

TEST_CASE("export-op CLI: the exported op's tensor maps are the server's on every case") {
  // tests/gpu/kernels/tensor_map_rows.cu reads rms_norm's rows through a @tensormap; the module
  // evaluates the map's figures itself before encoding it with the driver.
  const auto dir = testing::fresh_dir("cli-export-op-tensor-map");
  const tasks::Task* task = testing::shared_registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const std::string source_path =
      std::string(CRUCIBLE_SOURCE_DIR) + "/tests/gpu/kernels/tensor_map_rows.cu";
  std::string output;
  REQUIRE(run_crucible("export-op llm/rms_norm " + shell_quoted(source_path) + " -o " +
                           shell_quoted(dir / "rows.py"),
                       &output) == 0);
  const Value python = per_case_from_module(
      dir, dir / "rows.py", *task,
      "    shapes = {t['name']: [symbols[d] if d in symbols else int(d)\n"
      "                          for d in t['shape']] for t in op.TASK['tensors']}\n"
      "    out.append(op.tensor_map_figures(symbols, shapes))\n");
  REQUIRE(python.size() == task->cases.size());
  const auto context = action::make_plan_context(*task);
  const auto plan = action::parse_launch_plan(testing::read_file(source_path), context);
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  for (std::size_t i = 0; i < task->cases.size(); ++i) {
    CAPTURE(task->cases[i].name);
    const auto concrete = action::evaluate_plan(*plan, task->cases[i].symbols, context);
    REQUIRE_MESSAGE(concrete.ok(), concrete.error().message);
    REQUIRE(python[i].size() == 1);
    const auto& map = concrete->tensor_maps.at(0);
    const Value& got = python[i][0];
    CHECK(got["tensor"] == "input");
    CHECK(got["dims"] == Value::array({map.dims[0], map.dims[1]}));
    CHECK(got["stride_bytes"] == Value::array({map.stride_bytes[0]}));
    CHECK(got["box"] == Value::array({map.box[0], map.box[1]}));
    CHECK(got["swizzle"] == map.swizzle);
  }
}

TEST_CASE("serve CLI: the open-file soft limit is raised to the hard limit and logged") {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max <= 256) {
    MESSAGE("hard open-file limit too low to lower the soft one below it; skipped");
    return;
  }
  const auto dir = testing::fresh_dir("cli-nofile");
  std::string output;
  testing::run_command("ulimit -Sn 256 && timeout -s INT 3 " + std::string(CRUCIBLE_EXE) +
                           " --home '" CRUCIBLE_SOURCE_DIR "' serve --no-compile --bind ipc://" +
                           (dir / "s.sock").string() + " --log " + shell_quoted(dir / "t.log"),
                       &output);
  CHECK_MESSAGE(output.find("open files: soft limit raised from 256 to ") != std::string::npos,
                output);
  if (limit.rlim_max != RLIM_INFINITY) {
    CHECK(output.find("raised from 256 to " + std::to_string(limit.rlim_max)) != std::string::npos);
  }
}

TEST_CASE("export and replay CLI: a failed write exits 2 with the reason, never 'written'") {
  std::string output;
  int rc = run_crucible("export -o /dev/full " + shell_quoted(kExampleLog), &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible export: cannot write /dev/full: No space left on device") !=
        std::string::npos);
  CHECK(output.find("exported") == std::string::npos);

  // stdout on a full disk: the group's own redirection sends stdout to /dev/full.
  rc = testing::run_command("{ timeout 60 " + std::string(CRUCIBLE_EXE) + " export " +
                                shell_quoted(kExampleLog) + " > /dev/full; }",
                            &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("cannot write standard output: No space left on device") != std::string::npos);

  rc = run_crucible("replay --rescore -o /dev/full " + shell_quoted(kExampleLog), &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible replay: cannot write /dev/full: No space left on device") !=
        std::string::npos);
  CHECK(output.find("replay written") == std::string::npos);
}

TEST_CASE("export, replay and eval CLI: a FIFO or a device is refused up front, not read") {
  const auto dir = testing::fresh_dir("cli-fifo");
  const auto fifo = dir / "log.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string output;
  int rc = run_crucible("export " + shell_quoted(fifo), &output, 10);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible export: " + fifo.string() + " is not a regular file") !=
        std::string::npos);
  rc = run_crucible("replay --rescore -o - " + shell_quoted(fifo), &output, 10);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible replay: " + fifo.string() + " is not a regular file") !=
        std::string::npos);
  rc = run_crucible("eval --no-compile -o " + shell_quoted(dir / "out") + " " + shell_quoted(fifo),
                    &output, 10);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible eval: " + fifo.string() + " is not a regular file") !=
        std::string::npos);
  rc =
      run_crucible("eval --no-compile -o " + shell_quoted(dir / "out") + " /dev/zero", &output, 10);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("/dev/zero is not a regular file") != std::string::npos);
}

TEST_CASE("eval CLI: an input that holds no sample exits 2 saying nothing was scored") {
  const auto dir = testing::fresh_dir("cli-empty");
  std::filesystem::create_directories(dir / "empty-folder");
  testing::write_file(dir / "only-strangers" / "not_a_task.cu", "// no task of this name");
  testing::write_file(dir / "empty.jsonl", "");
  testing::write_file(dir / "blank.jsonl", "\n   \n\t\n\n");
  for (const std::string input : {"empty-folder", "only-strangers", "empty.jsonl", "blank.jsonl"}) {
    CAPTURE(input);
    std::filesystem::remove_all(dir / "out");
    std::string output;
    const int rc = run_crucible(
        "eval --no-compile -o " + shell_quoted(dir / "out") + " " + shell_quoted(dir / input),
        &output);
    CHECK_MESSAGE(rc == 2, output);
    CHECK(output.find("crucible eval: nothing was scored: " + (dir / input).string() +
                      " holds no sample") != std::string::npos);
  }
  // A selection that matches none of the samples is the same: nothing to score.
  testing::write_file(dir / "one.jsonl",
                      Value{{"task", "llm/rms_norm"}, {"source", "x"}}.dump() + "\n");
  std::string output;
  const int rc = run_crucible("eval --no-compile -t llm/linear -o " + shell_quoted(dir / "out") +
                                  " " + shell_quoted(dir / "one.jsonl"),
                              &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible eval: nothing was scored: no sample of ") != std::string::npos);
}

TEST_CASE("eval CLI: a run in which every sample was an infra_error exits 4 and says so") {
  const auto dir = testing::fresh_dir("cli-nothing-measured");
  // With --no-compile every sample that gets past validation is the server's infra_error.
  testing::write_file(dir / "one.jsonl", Value{{"task", "llm/rms_norm"},
                                               {"source",
                                                "extern \"C\" __global__ void k() {}\n"
                                                "// @launch k<<<1, 1>>>()\n"}}
                                                 .dump() +
                                             "\n");
  std::string output;
  const int rc = run_crucible(
      "eval --no-compile -o " + shell_quoted(dir / "out") + " " + shell_quoted(dir / "one.jsonl"),
      &output);
  CHECK_MESSAGE(rc == 4, output);
  // The message says why: every sample was the server's failure, and which failure.
  CHECK(output.find("crucible eval: nothing was measured: every sample (1) was an infra_error, "
                    "the server's fault, not the samples': the compile stage is disabled on "
                    "this server (1)") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "out" / "summary.json"));  // the reasons are still written
  // The run records the GPUs it drove: none on this machine.
  const auto summary = Value::parse(testing::read_file(dir / "out" / "summary.json"));
  CHECK(summary["run"]["gpus"] == Value::array());
}

TEST_CASE("eval and serve CLI: --gpus naming a GPU this machine lacks exits 2 saying which exist") {
  const auto dir = testing::fresh_dir("cli-gpus");
  testing::write_file(dir / "one.jsonl",
                      Value{{"task", "llm/rms_norm"}, {"source", "// none\n"}}.dump() + "\n");
  std::string output;
  // This machine has no GPU: no list of ordinals can be met, and the error says so.
  int rc = run_crucible("eval --no-compile --gpus 0 -o " + shell_quoted(dir / "out") + " " +
                            shell_quoted(dir / "one.jsonl"),
                        &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible eval: --gpus \"0\": there is no GPU 0") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "out" / "summary.json"));  // nothing was run
  rc = run_crucible("serve --no-compile --gpus 0,x --log " + shell_quoted(dir / "t.log"), &output,
                    10);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("crucible serve: --gpus \"0,x\": ") != std::string::npos);
  // With --server the GPUs are the server's to choose.
  rc = run_crucible("eval --server tcp://127.0.0.1:5555 --gpus 0 -o " + shell_quoted(dir / "o2") +
                        " " + shell_quoted(dir / "one.jsonl"),
                    &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("with --server, start the server with --gpus") != std::string::npos);
}

TEST_CASE(
    "CLI: crucible with no command, or tasks with no subcommand, prints its help and exits 0") {
  std::string output;
  CHECK(testing::run_command(std::string(CRUCIBLE_EXE), &output) == 0);
  for (const char* command : {"serve", "tasks", "export", "eval", "replay"}) {
    CAPTURE(command);
    CHECK(output.find(std::string("  ") + command) != std::string::npos);
  }
  CHECK(output.find("Exit status") != std::string::npos);
  CHECK(testing::run_command(std::string(CRUCIBLE_EXE) + " tasks", &output) == 0);
  for (const char* command : {"list", "show", "new", "check"}) {
    CAPTURE(command);
    CHECK(output.find(std::string("  ") + command) != std::string::npos);
  }
  // eval with neither an input nor compare is a usage error that says what to give.
  CHECK(run_crucible("eval", &output) == 2);
  CHECK(output.find("crucible eval: give INPUT") != std::string::npos);
}

TEST_CASE("tasks show: the agent's view hides the hidden cases, --all lists them") {
  std::string output;
  REQUIRE(run_crucible("tasks show llm/rms_norm --all --json", &output) == 0);
  const auto full = Value::parse(output);
  std::vector<std::string> hidden, visible;
  for (const auto& c : full["cases"]) {
    (c.value("hidden", false) ? hidden : visible).push_back(c["name"].get<std::string>());
  }
  REQUIRE(hidden.size() >= 5);
  REQUIRE_FALSE(visible.empty());
  for (const std::string flags : {"", " --json"}) {
    CAPTURE(flags);
    std::string agent, all;
    REQUIRE(run_crucible("tasks show llm/rms_norm" + flags, &agent) == 0);
    REQUIRE(run_crucible("tasks show llm/rms_norm --all" + flags, &all) == 0);
    for (const auto& name : hidden) {
      CAPTURE(name);
      CHECK(agent.find(name) == std::string::npos);
      CHECK(all.find(name) != std::string::npos);
    }
    for (const auto& name : visible) CHECK(agent.find(name) != std::string::npos);
  }
  // The JSON agent view is the one an agent receives from the `task` op: no case is hidden.
  REQUIRE(run_crucible("tasks show llm/rms_norm --json", &output) == 0);
  for (const auto& c : Value::parse(output)["cases"]) CHECK_FALSE(c.value("hidden", false));
}

TEST_CASE("eval CLI: an output file that cannot be written exits 2 with the file and the reason") {
  const auto dir = testing::fresh_dir("cli-eval-write");
  testing::write_file(dir / "in.jsonl",
                      Value{{"task", "llm/rms_norm"}, {"source", "int main() {}"}}.dump() + "\n");
  std::filesystem::create_directories(dir / "out");
  // The report is written to report.md.tmp, then renamed: here that file is a full disk.
  std::filesystem::create_symlink("/dev/full", dir / "out" / "report.md.tmp");
  std::string output;
  int rc = run_crucible(
      "eval --no-compile -o " + shell_quoted(dir / "out") + " " + shell_quoted(dir / "in.jsonl"),
      &output);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("report.md") != std::string::npos);
  CHECK(output.find("No space left on device") != std::string::npos);

  // A results.jsonl that is not a regular file is refused rather than read without end.
  std::filesystem::create_directories(dir / "out2");
  std::filesystem::create_symlink("/dev/zero", dir / "out2" / "results.jsonl");
  rc = run_crucible("eval --no-compile --resume -o " + shell_quoted(dir / "out2") + " " +
                        shell_quoted(dir / "in.jsonl"),
                    &output, 10);
  CHECK_MESSAGE(rc == 2, output);
  CHECK(output.find("results.jsonl is not a regular file") != std::string::npos);
}

TEST_CASE("export CLI: damaged ranges are listed one by one, every good record exported, exit 3") {
  std::vector<Value> records;
  for (int i = 0; i < 6; ++i) records.push_back(good_step(i));
  records[0] = Value(5);  // any shape exports: export does not interpret records
  const auto log = write_log(records, "cli-damage");
  std::string bytes = testing::read_file(log);
  // Flip a payload byte of record 1 and of record 3; cut record 5 in half (a torn tail).
  std::vector<std::size_t> start{kLogHeaderBytes};
  for (const auto& record : records) start.push_back(start.back() + record_bytes(record));
  bytes[start[1] + 12 + 3] ^= 0x20;
  bytes[start[3] + 12 + 3] ^= 0x20;
  bytes.resize(start[5] + record_bytes(records[5]) / 2);
  testing::write_file(log, bytes);

  const auto out = log.parent_path() / "out.jsonl";
  std::string output;
  const int rc = run_crucible("export -o " + shell_quoted(out) + " " + shell_quoted(log), &output);
  CHECK_MESSAGE(rc == 3, output);
  const std::string exported = testing::read_file(out);
  CHECK(count_of(exported, "\n") == 3);  // records 0, 2 and 4
  CHECK(exported.starts_with("5\n"));
  const auto range = [&](std::size_t from, std::size_t to, const std::string& rest) {
    return "bytes " + std::to_string(from) + "-" + std::to_string(to - 1) + " (" +
           std::to_string(to - from) + " bytes" + rest;
  };
  CHECK(output.find(range(start[1], start[2], "): checksum mismatch")) != std::string::npos);
  CHECK(output.find(range(start[3], start[4], "): checksum mismatch")) != std::string::npos);
  CHECK(output.find(range(start[5], bytes.size(), "")) != std::string::npos);
  CHECK(output.find("short record payload") != std::string::npos);
  CHECK(output.find("exported 3 records") != std::string::npos);
  CHECK(output.find("torn tail of " + std::to_string(bytes.size() - start[5]) + " bytes") !=
        std::string::npos);
  CHECK(output.find("2 damaged ranges") != std::string::npos);

  // An undamaged log still exits 0.
  const int clean =
      run_crucible("export -o " + shell_quoted(out) + " " + shell_quoted(kExampleLog), &output);
  CHECK_MESSAGE(clean == 0, output);
}

TEST_CASE("replay CLI: damaged ranges are listed, kept in log.read.skipped, good steps replayed") {
  std::vector<Value> records;
  for (int i = 0; i < 4; ++i) records.push_back(good_step(i));
  const auto log = write_log(records, "cli-replay-damage");
  std::string bytes = testing::read_file(log);
  const std::size_t second = kLogHeaderBytes + record_bytes(records[0]);
  bytes[second + 12 + 5] ^= 0x01;
  testing::write_file(log, bytes);
  const auto out = log.parent_path() / "replay.json";
  std::string output;
  const int rc =
      run_crucible("replay --rescore -o " + shell_quoted(out) + " " + shell_quoted(log), &output);
  CHECK_MESSAGE(rc == 3, output);
  CHECK(output.find("bytes " + std::to_string(second) + "-") != std::string::npos);
  CHECK(output.find("checksum mismatch") != std::string::npos);
  const auto replay = Value::parse(testing::read_file(out), nullptr, false);
  REQUIRE(replay.is_object());
  CHECK(replay["summary"]["steps"] == 3);
  const auto& skipped = replay["log"]["read"]["skipped"];
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0]["offset"] == second);
  CHECK(skipped[0]["bytes"] == record_bytes(records[1]));
  CHECK(skipped[0]["reason"] == "checksum mismatch");
  CHECK(replay["log"]["read"]["torn_tail"] == false);
}
#endif
