// Integration: a real server driven over loopback by the C++ client and by raw sockets.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "clients/cpp/client.hpp"
#include "core/msgpack_codec.hpp"
#include "env/trajectory_log.hpp"
#include "server_fixture.hpp"

using namespace crucible;
using core::ErrorCode;
using core::Op;
using core::Value;
using testing::RunningServer;

namespace {

constexpr const char* kKernel = R"(
extern "C" __global__ void copy_kernel(__nv_bfloat16* out, const __nv_bfloat16* input) {}
// @launch copy_kernel<<<num_tokens, 256>>>(out, input)
)";

clients::Client connect(const RunningServer& server, int timeout_ms = 20000) {
  clients::ClientOptions options;
  options.endpoint = server.endpoint();
  options.timeout = std::chrono::milliseconds(timeout_ms);
  auto client = clients::Client::connect(options);
  REQUIRE(client.ok());
  return std::move(client).value();
}

// A raw DEALER for frames the typed client would never send.
struct RawSocket {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  explicit RawSocket(const std::string& endpoint) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvtimeo, 10000);
    socket.connect(endpoint);
  }
  void send(const std::string& bytes) { socket.send(zmq::buffer(bytes), zmq::send_flags::none); }
  Value receive() {
    zmq::message_t message;
    const auto got = socket.recv(message);
    REQUIRE(got.has_value());
    auto value = core::decode_msgpack(message.to_string_view(), core::DecodeLimits{});
    REQUIRE(value.ok());
    return *value;
  }
};

void check_error(const core::Result<Value>& reply, ErrorCode code, const std::string& needle) {
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().code == code);
  CHECK_MESSAGE(reply.error().message.find(needle) != std::string::npos, reply.error().message);
}

// A stage that takes its time, to hold requests in flight.
class SlowStage final : public env::Stage {
 public:
  explicit SlowStage(int ms) : ms_(ms) {}
  std::string_view name() const override { return "slow"; }
  bool available() const override { return true; }
  bool run(const env::StepJob&, env::StepArtifacts&, env::StepResult&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return true;
  }

 private:
  int ms_;
};

// Asks the server (10 s at most) until it holds a step or score, queued or running.
void wait_for_inflight(clients::Client& client) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    const auto stats = client.stats();
    REQUIRE(stats.ok());
    if ((*stats)["inflight"].get<std::uint64_t>() >= 1) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

env::Pipeline slow_pipeline(int ms) {
  env::Pipeline pipeline;
  pipeline.add(std::make_unique<SlowStage>(ms));
  pipeline.add(std::make_unique<env::UnavailableStage>("gpu", "no CUDA device on this server"));
  return pipeline;
}

}  // namespace

TEST_CASE("server: hello, tasks, task and stats describe the server truthfully") {
  RunningServer server;
  auto client = connect(server);
  const auto hello = client.hello();
  REQUIRE(hello.ok());
  CHECK((*hello)["server"] == "crucible");
  CHECK((*hello)["protocol"] == 1);
  CHECK((*hello)["gpus"].empty());
  CHECK((*hello)["stages"]["validate"] == true);
  CHECK((*hello)["stages"]["gpu"] == false);
  CHECK((*hello)["limits"]["max_source_bytes"] == 256 * 1024);

  const auto tasks = client.tasks();
  REQUIRE(tasks.ok());
  bool found = false;
  for (const auto& task : (*tasks)["tasks"]) found |= task["id"] == "llm/rms_norm";
  CHECK(found);
  const auto filtered = client.tasks(std::string("no-such-category"));
  REQUIRE(filtered.ok());
  CHECK((*filtered)["tasks"].empty());

  const auto task = client.task("llm/rms_norm");
  REQUIRE(task.ok());
  CHECK((*task)["task"]["id"] == "llm/rms_norm");
  const std::string view = core::to_json_text((*task)["task"]);
  const auto* full = testing::shared_registry().find("llm/rms_norm");
  REQUIRE(full != nullptr);
  REQUIRE_FALSE(full->hidden_cases().empty());
  for (const auto* hidden : full->hidden_cases()) {
    CHECK_MESSAGE(view.find("\"" + hidden->name + "\"") == std::string::npos, hidden->name);
  }

  const auto stats = client.stats();
  REQUIRE(stats.ok());
  CHECK((*stats)["requests"].get<std::uint64_t>() >= 4);
  CHECK((*stats)["episodes_open"] == 0);
  // Only stages that keep counters appear; this server runs neither a compile pool nor a GPU.
  REQUIRE((*stats).contains("pools"));
  CHECK((*stats)["pools"].is_object());
  CHECK_FALSE((*stats)["pools"].contains("gpu"));
}

TEST_CASE("server: an episode runs reset -> step -> close and every step is logged first") {
  RunningServer server;
  auto client = connect(server);
  const auto reset = client.reset("llm/rms_norm", 7, 2);
  REQUIRE(reset.ok());
  const std::string episode = (*reset)["episode"];
  CHECK((*reset)["max_steps"] == 2);
  CHECK((*reset)["step"] == 0);
  CHECK((*reset)["task"]["id"] == "llm/rms_norm");

  const auto first = client.step(episode, kKernel);
  REQUIRE(first.ok());
  CHECK((*first)["step"] == 1);
  CHECK((*first)["truncated"] == false);
  CHECK((*first)["terminated"] == false);
  // Without a GPU the step is answered truthfully: the server's fault, no penalty.
  CHECK((*first)["result"]["status"] == "infra_error");
  CHECK((*first)["result"]["reward"]["infra"] == true);
  CHECK((*first)["reward"] == 0.0);

  CHECK((*first)["best"].is_null());  // the server's fault never becomes the best

  // The infra_error step gave its place in the budget back: two steps still fit.
  const auto invalid = client.step(episode, "int main() { return 0; }");
  REQUIRE(invalid.ok());
  CHECK((*invalid)["step"] == 2);
  CHECK((*invalid)["result"]["status"] == "invalid_action");
  CHECK((*invalid)["reward"] == -1.0);
  CHECK((*invalid)["truncated"] == false);
  CHECK((*invalid)["best"]["step"] == 2);
  const auto last = client.step(episode, "int main() { return 1; }");
  REQUIRE(last.ok());
  CHECK((*last)["step"] == 3);
  CHECK((*last)["truncated"] == true);
  CHECK((*last)["best"]["step"] == 2);

  check_error(client.step(episode, kKernel), ErrorCode::kEpisodeDone,
              "is over (2 of 2 steps used); call reset for a new one");
  const auto closed = client.close(episode);
  REQUIRE(closed.ok());
  CHECK((*closed)["steps"] == 2);
  check_error(client.step(episode, kKernel), ErrorCode::kUnknownEpisode, "unknown episode");
  check_error(client.close(episode), ErrorCode::kUnknownEpisode, "unknown episode");

  const auto scored = client.score("llm/rms_norm", kKernel, nullptr, 3);
  REQUIRE(scored.ok());
  CHECK((*scored)["task"] == "llm/rms_norm");
  CHECK((*scored)["result"]["status"] == "infra_error");

  server.stop();
  std::vector<Value> records;
  auto report = env::read_trajectory_log(server.log_path(), [&](Value&& record) {
    records.push_back(std::move(record));
    return true;
  });
  REQUIRE(report.ok());
  REQUIRE(records.size() == 4);
  CHECK(records[0]["kind"] == "step");
  CHECK(records[0]["episode"] == episode);
  CHECK(records[0]["seed"] == 7);
  CHECK(records[0]["source"] == kKernel);
  CHECK(records[1]["result"]["status"] == "invalid_action");
  CHECK(records[2]["step"] == 3);
  CHECK(records[3]["kind"] == "score");
  CHECK(records[3]["seed"] == 3);
  CHECK_FALSE(report->torn_tail);
}

TEST_CASE("server: request tags are echoed, inherited by steps, logged, and checked") {
  RunningServer server;
  auto client = connect(server);
  const Value run_tag{{"run", "grpo-7"}, {"rollout", 12}, {"model", "qwen"}};
  const auto reset = client.call(Op::kReset, Value{{"task", "llm/rms_norm"}, {"tag", run_tag}});
  REQUIRE(reset.ok());
  CHECK((*reset)["tag"] == run_tag);
  const std::string episode = (*reset)["episode"];
  const auto inherited = client.step(episode, "int main() { return 0; }");
  REQUIRE(inherited.ok());
  CHECK((*inherited)["tag"] == run_tag);  // no tag of its own: the episode's
  const Value own{{"attempt", -2}};
  const auto tagged = client.call(
      Op::kStep, Value{{"episode", episode}, {"source", "int main() {}"}, {"tag", own}});
  REQUIRE(tagged.ok());
  CHECK((*tagged)["tag"] == own);
  const auto untagged = client.score("llm/rms_norm", "int main() {}");
  REQUIRE(untagged.ok());
  CHECK_FALSE((*untagged).contains("tag"));

  // The client's default tag goes with its resets and scores.
  clients::ClientOptions options;
  options.endpoint = server.endpoint();
  options.tag = Value{{"run", "default"}};
  auto tagging = clients::Client::connect(options);
  REQUIRE(tagging.ok());
  const auto scored = tagging->score("llm/rms_norm", "int main() {}");
  REQUIRE(scored.ok());
  CHECK((*scored)["tag"] == options.tag);

  // Limits answer as data, naming the field; nothing is logged for a refused request.
  Value nine = Value::object();
  for (int i = 0; i < 9; ++i) nine["k" + std::to_string(i)] = i;
  const auto score_with = [&](Value tag) {
    return client.call(Op::kScore,
                       Value{{"task", "llm/rms_norm"}, {"source", "x"}, {"tag", std::move(tag)}});
  };
  check_error(score_with(nine), ErrorCode::kInvalidArgument, "at most 8");
  check_error(score_with(Value{{std::string(33, 'k'), 1}}), ErrorCode::kInvalidArgument,
              "over 32 bytes");
  check_error(score_with(Value{{"note", std::string(257, 'x')}}), ErrorCode::kInvalidArgument,
              "over 256 bytes");
  check_error(score_with(Value{{"", 1}}), ErrorCode::kInvalidArgument, "empty key");
  check_error(score_with(Value{{"flag", true}}), ErrorCode::kBadRequest, "tag.flag");
  check_error(score_with(Value{{"lr", 0.5}}), ErrorCode::kBadRequest, "tag.lr");
  check_error(score_with(Value::array({1, 2})), ErrorCode::kBadRequest, "field 'tag'");
  check_error(client.call(Op::kReset, Value{{"task", "llm/rms_norm"}, {"tag", "run-1"}}),
              ErrorCode::kBadRequest, "field 'tag'");

  server.stop();
  std::vector<Value> records;
  REQUIRE(env::read_trajectory_log(server.log_path(), [&](Value&& record) {
            records.push_back(std::move(record));
            return true;
          }).ok());
  REQUIRE(records.size() == 4);
  CHECK(records[0]["tag"] == run_tag);
  CHECK(records[1]["tag"] == own);
  CHECK_FALSE(records[2].contains("tag"));
  CHECK(records[3]["tag"] == options.tag);
}

TEST_CASE("server: every client-reachable error code comes back with a clear message") {
  env::ServerOptions options;
  options.limits.max_source_bytes = 1024;
  RunningServer server(options);
  auto client = connect(server);

  check_error(client.task("llm/nope"), ErrorCode::kUnknownTask, "unknown task 'llm/nope'");
  check_error(client.reset("llm/nope"), ErrorCode::kUnknownTask, "unknown task 'llm/nope'");
  check_error(client.score("llm/nope", kKernel), ErrorCode::kUnknownTask, "unknown task");
  check_error(client.step("ep-0000", kKernel), ErrorCode::kUnknownEpisode, "unknown episode");
  check_error(client.call(Op::kStep, Value{{"episode", "e"}}), ErrorCode::kBadRequest,
              "missing field 'source'");
  check_error(client.call(Op::kTask, Value{{"task", 5}}), ErrorCode::kBadRequest,
              "field 'task' must be a string, got integer");
  check_error(client.score("llm/rms_norm", std::string(2000, 'x')), ErrorCode::kTooLarge,
              "field 'source' is 2000 bytes; the limit is 1024");
  check_error(client.reset("llm/rms_norm", std::nullopt, 20000), ErrorCode::kInvalidArgument,
              "at most 10000");
  check_error(client.reset("llm/rms_norm", std::nullopt, std::nullopt, Value{{"preset", "x"}}),
              ErrorCode::kInvalidArgument, "unknown preset 'x'");
  check_error(client.reset("llm/rms_norm", std::nullopt, std::nullopt, nullptr,
                           Value{{"stop_on_ok", "yes"}}),
              ErrorCode::kBadRequest, "options.stop_on_ok");

  RawSocket raw(server.endpoint());
  raw.send(core::encode_msgpack(Value{{"v", 1}, {"id", 9}, {"op", "dance"}}));
  auto reply = raw.receive();
  CHECK(reply["id"] == 9);
  CHECK(reply["error"]["code"] == "unknown_op");
  raw.send(core::encode_msgpack(Value{{"v", 3}, {"id", "x"}, {"op", "hello"}}));
  reply = raw.receive();
  CHECK(reply["id"] == "x");
  CHECK(reply["error"]["code"] == "unsupported_version");
  raw.send("\xc1 not msgpack");
  reply = raw.receive();
  CHECK(reply["id"].is_null());
  CHECK(reply["error"]["code"] == "bad_request");
  raw.send(core::encode_msgpack(
      Value{{"v", 1}, {"id", 1}, {"op", "hello"}, {"pad", std::string(2 << 20, 'p')}}));
  reply = raw.receive();
  CHECK(reply["error"]["code"] == "too_large");
  CHECK(reply["id"] == 1);
  raw.socket.send(zmq::str_buffer("part one"), zmq::send_flags::sndmore);
  raw.socket.send(zmq::str_buffer("part two"), zmq::send_flags::none);
  reply = raw.receive();
  CHECK(reply["error"]["code"] == "bad_request");
  CHECK(reply["error"]["message"] ==
        "a request must be one frame holding one msgpack map, got 2 frames");
  // And the server is still answering.
  CHECK(client.hello().ok());
  const auto stats = client.stats();
  REQUIRE(stats.ok());
  CHECK((*stats)["errors"]["unknown_task"] == 3);
  CHECK((*stats)["errors"]["too_large"] == 2);
}

TEST_CASE("server: 64 clients x 16 pipelined requests, every reply matched to its request") {
  RunningServer server;
  constexpr int kClients = 64;
  constexpr int kRequests = 16;
  std::atomic<int> matched{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      clients::ClientOptions options;
      options.endpoint = server.endpoint();
      options.timeout = std::chrono::milliseconds(60000);
      auto client = clients::Client::connect(options);
      if (!client) {
        ++failures;
        return;
      }
      std::vector<std::pair<clients::Future, int>> futures;
      for (int r = 0; r < kRequests; ++r) {
        // Mix cheap ops and pipeline work; the task name carries the request's identity.
        if (r % 2 == 0) {
          futures.emplace_back(client->submit(Op::kTask, Value{{"task", "llm/rms_norm"}}), r);
        } else {
          futures.emplace_back(
              client->submit(Op::kScore, Value{{"task", "llm/rms_norm"},
                                               {"source", std::string(kKernel) + "// " +
                                                              std::to_string(c * 100 + r)},
                                               {"seed", c * 100 + r}}),
              r);
        }
      }
      // Collect in reverse to exercise out-of-order matching.
      for (auto it = futures.rbegin(); it != futures.rend(); ++it) {
        auto reply = it->first.get();
        if (!reply) {
          ++failures;
          continue;
        }
        const bool is_score = it->second % 2 == 1;
        const bool ok = (*reply)["id"] == it->first.id() &&
                        (is_score ? (*reply)["result"]["status"] == "infra_error"
                                  : (*reply)["task"]["id"] == "llm/rms_norm");
        if (ok) {
          ++matched;
        } else {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  CHECK(matched.load() == kClients * kRequests);
  auto client = connect(server);
  const auto stats = client.stats();
  REQUIRE(stats.ok());
  CHECK((*stats)["scores"] == kClients * kRequests / 2);
  CHECK((*stats)["dropped_replies"] == 0);
}

TEST_CASE("server: 1,000 random frames from a fixed seed, and the server still answers") {
  RunningServer server;
  RawSocket raw(server.endpoint());
  std::mt19937_64 rng(20261129);
  int replies = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string frame;
    switch (i % 4) {
      case 0: {  // pure noise
        frame.resize(1 + rng() % 64);
        for (auto& ch : frame) ch = static_cast<char>(rng());
        break;
      }
      case 1: {  // a valid request with bytes flipped
        frame = core::encode_msgpack(Value{
            {"v", 1}, {"id", i}, {"op", "score"}, {"task", "llm/rms_norm"}, {"source", kKernel}});
        for (int k = 0; k < 3; ++k) frame[rng() % frame.size()] = static_cast<char>(rng());
        break;
      }
      case 2: {  // a valid request cut short
        frame = core::encode_msgpack(
            Value{{"v", 1}, {"id", i}, {"op", "reset"}, {"task", "llm/rms_norm"}});
        frame.resize(rng() % frame.size() + 1);
        break;
      }
      default: {  // well-formed msgpack with random field types
        const Value choices[] = {1,   -1,  "x", nullptr, Value::array({1}), Value::object(),
                                 2.5, true};
        Value request{
            {"v", choices[rng() % 8]}, {"id", choices[rng() % 8]}, {"op", choices[rng() % 8]}};
        request["task"] = choices[rng() % 8];
        frame = core::encode_msgpack(request);
      }
    }
    raw.send(frame);
  }
  // Every frame gets exactly one reply (some valid ones are real requests).
  raw.socket.set(zmq::sockopt::rcvtimeo, 20000);
  for (int i = 0; i < 1000; ++i) {
    zmq::message_t message;
    if (!raw.socket.recv(message)) break;
    auto reply = core::decode_msgpack(message.to_string_view(), core::DecodeLimits{});
    REQUIRE(reply.ok());
    CHECK(reply->contains("ok"));
    ++replies;
  }
  CHECK(replies == 1000);
  auto client = connect(server);
  const auto hello = client.hello();
  CHECK(hello.ok());
}

TEST_CASE("server: a client that disconnects mid-request does not disturb the others") {
  RunningServer server({}, slow_pipeline(300));
  auto stayer = connect(server);
  {
    auto leaver = connect(server);
    leaver.submit(Op::kScore, Value{{"task", "llm/rms_norm"}, {"source", kKernel}});
    // Wait (by asking) until the server holds the request (linger 0 would discard one not yet
    // sent), then leave while the score is still running: the reply is left undelivered.
    wait_for_inflight(stayer);
  }
  const auto score = stayer.score("llm/rms_norm", kKernel);
  REQUIRE(score.ok());
  CHECK((*score)["result"]["status"] == "infra_error");
  // The leaver's score finishes on its own time; wait for it by asking.
  Value stats;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    auto reply = stayer.stats();
    REQUIRE(reply.ok());
    stats = *reply;
    if (stats["scores"] == 2 && stats["inflight"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(stats["scores"] == 2);
  CHECK(stats["dropped_replies"] == 1);
}

TEST_CASE("server: a full queue answers busy, and shutdown refuses new work but finishes old") {
  env::ServerOptions options;
  options.max_queued = 2;
  options.workers = 1;
  RunningServer server(options, slow_pipeline(800));
  auto client = connect(server);
  std::vector<clients::Future> futures;
  for (int i = 0; i < 4; ++i) {
    futures.push_back(
        client.submit(Op::kScore, Value{{"task", "llm/rms_norm"}, {"source", kKernel}}));
  }
  int busy = 0;
  int done = 0;
  for (auto& future : futures) {
    auto reply = future.get();
    if (reply.ok()) {
      ++done;
    } else if (reply.error().code == ErrorCode::kBusy) {
      ++busy;
    }
  }
  CHECK(done >= 2);
  CHECK(busy >= 1);
  CHECK(done + busy == 4);

  auto in_flight = client.submit(Op::kScore, Value{{"task", "llm/rms_norm"}, {"source", kKernel}});
  // Wait (by asking, not by sleeping) until the server holds the request, then stop it.
  wait_for_inflight(client);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::thread stopper([&] { server.stop(); });
  // The loop notices the stop within one poll; from then on new requests are refused while the
  // held one finishes.
  core::Result<Value> refused = Value(nullptr);
  while (std::chrono::steady_clock::now() < give_up) {
    refused = client.hello();
    if (!refused.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  check_error(refused, ErrorCode::kShuttingDown, "shutting down");
  const auto finished = in_flight.get();
  REQUIRE(finished.ok());
  CHECK((*finished)["result"]["status"] == "infra_error");
  stopper.join();
}

TEST_CASE("server: a non-loopback bind is refused without keys or --insecure") {
  CHECK(env::is_local_endpoint("tcp://127.0.0.1:5555"));
  CHECK(env::is_local_endpoint("tcp://127.3.2.1:1"));
  CHECK(env::is_local_endpoint("tcp://localhost:5555"));
  CHECK(env::is_local_endpoint("tcp://[::1]:5555"));
  CHECK(env::is_local_endpoint("ipc:///tmp/crucible.sock"));
  CHECK_FALSE(env::is_local_endpoint("tcp://0.0.0.0:5555"));
  CHECK_FALSE(env::is_local_endpoint("tcp://*:5555"));
  CHECK_FALSE(env::is_local_endpoint("tcp://127.evil.com:5555"));
  CHECK_FALSE(env::is_local_endpoint("tcp://10.0.0.1:5555"));
  env::ServerOptions options;
  options.bind = "tcp://0.0.0.0:0";
  options.log_path = std::filesystem::temp_directory_path() / "crucible-refused.log";
  auto server =
      env::Server::create(options, testing::shared_registry(), testing::no_gpu_pipeline());
  REQUIRE_FALSE(server.ok());
  CHECK(server.error().message.find("--insecure") != std::string::npos);
}

TEST_CASE("server: a step compiles for real, then stops truthfully at the missing GPU") {
  RunningServer server({}, testing::no_gpu_pipeline(/*compile=*/true));
  auto client = connect(server, 120000);
  const auto hello = client.hello();
  REQUIRE(hello.ok());
  CHECK((*hello)["stages"]["compile"] == true);

  const std::string good = R"(#include <cuda_bf16.h>
// @launch scale<<<num_tokens, 256>>>(out, input, hidden_size)
extern "C" __global__ void scale(__nv_bfloat16* out, const __nv_bfloat16* input, int hidden_size) {
  const size_t row = blockIdx.x * static_cast<size_t>(hidden_size);
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) out[row + i] = input[row + i];
}
)";
  const auto compiled = client.score("llm/rms_norm", good);
  REQUIRE(compiled.ok());
  const auto& result = (*compiled)["result"];
  CHECK(result["status"] == "infra_error");
  CHECK(result["message"] == "no CUDA device on this server");
  CHECK(result["reward"]["infra"] == true);
  REQUIRE(result["compile"].is_object());
  CHECK(result["stages"].contains("compile"));
  CHECK(result["compile"].dump().find("scale") != std::string::npos);

  // Line 4 of the agent's file holds the error, whatever the server prepends.
  const std::string bad = R"(#include <cuda_bf16.h>
// @launch scale<<<num_tokens, 256>>>(out, input, hidden_size)
extern "C" __global__ void scale(__nv_bfloat16* out, const __nv_bfloat16* input, int hidden_size) {
  out[0] = undeclared_name;
}
)";
  const auto failed = client.score("llm/rms_norm", bad);
  REQUIRE(failed.ok());
  CHECK((*failed)["result"]["status"] == "compile_error");
  CHECK((*failed)["reward"] == -1.0);
  const std::string message = (*failed)["result"]["message"];
  CHECK_MESSAGE(message.find("(4)") != std::string::npos, message);
  CHECK(message.find("undeclared_name") != std::string::npos);

  // A plan that names a kernel the source does not define is refused before compiling... or,
  // for a name the directive parser cannot see, when the compiled module lacks it.
  const auto unknown = client.score("llm/rms_norm",
                                    "// @launch nothere<<<1, 32>>>(out)\n"
                                    "extern \"C\" __global__ void other(float* out) {}\n");
  REQUIRE(unknown.ok());
  CHECK((*unknown)["result"]["status"] != "ok");
  CHECK((*unknown)["result"]["status"] != "infra_error");
}
