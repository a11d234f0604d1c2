// Integration: the HTTP front of a real server, driven with cpp-httplib's client and raw sockets.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "clients/cpp/client.hpp"
#include "core/msgpack_codec.hpp"
#include "env/http_front.hpp"
#include "server_fixture.hpp"

using namespace crucible;
using core::ErrorCode;
using core::Value;

namespace {

constexpr const char* kKernel = R"(
extern "C" __global__ void copy_kernel(__nv_bfloat16* out, const __nv_bfloat16* input) {}
// @launch copy_kernel<<<num_tokens, 256>>>(out, input)
)";

// A real server with its HTTP front on a free loopback port; the server's loop runs on a thread.
class FrontedServer {
 public:
  explicit FrontedServer(env::ServerOptions options = {},
                         env::Pipeline pipeline = testing::no_gpu_pipeline(), int threads = 8,
                         const std::function<void(env::HttpFrontOptions&)>& configure = {}) {
    static int counter = 0;
    log_dir_ =
        std::filesystem::temp_directory_path() /
        ("crucible-http-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(log_dir_);
    options.bind = "tcp://127.0.0.1:*";
    options.log_path = log_dir_ / "trajectories.log";
    options.log_sync = false;
    if (options.workers == 0) options.workers = 2;
    auto server = env::Server::create(options, testing::shared_registry(), std::move(pipeline));
    if (!server) throw std::runtime_error("server: " + server.error().message);
    server_ = std::move(server).value();
    env::HttpFrontOptions front;
    front.address = {"127.0.0.1", 0};
    front.limits = options.limits;
    front.threads = threads;
    if (configure) configure(front);
    auto started = env::HttpFront::start(front, *server_);
    if (!started) throw std::runtime_error("front: " + started.error().message);
    front_ = std::move(started).value();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~FrontedServer() {
    stop_server();
    front_->stop();
    std::filesystem::remove_all(log_dir_);
  }
  // Stops the server's loop (it drains first); the front keeps listening.
  void stop_server() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }
  void request_stop() { server_->stop(); }
  env::HttpFront& front() { return *front_; }
  std::uint16_t port() const { return front_->port(); }
  const std::string& zmq_endpoint() const { return server_->endpoint(); }
  httplib::Client client() const {
    httplib::Client client("127.0.0.1", front_->port());
    client.set_read_timeout(60, 0);
    client.set_write_timeout(10, 0);
    return client;
  }

 private:
  std::filesystem::path log_dir_;
  std::unique_ptr<env::Server> server_;
  std::unique_ptr<env::HttpFront> front_;
  std::thread thread_;
};

Value json_of(const httplib::Result& result) {
  REQUIRE(result);
  INFO(result->body);
  const Value body = Value::parse(result->body, nullptr, false);
  REQUIRE_FALSE(body.is_discarded());
  return body;
}

// The status, and for an error the wire code and a phrase of its message.
void check_error(const httplib::Result& result, int status, const std::string& code,
                 const std::string& needle = "") {
  REQUIRE(result);
  INFO(result->body);
  CHECK(result->status == status);
  const Value body = json_of(result);
  REQUIRE(body.contains("error"));
  CHECK(body["error"]["code"] == code);
  const std::string message = body["error"]["message"].get<std::string>();
  CHECK_FALSE(message.empty());
  CHECK_MESSAGE(message.find(needle) != std::string::npos, message);
}

httplib::Result post_json(httplib::Client& client, const std::string& path, const Value& body) {
  return client.Post(path.c_str(), core::to_json_text(body), "application/json");
}

// Sends raw bytes on a fresh connection and returns what comes back until it closes or a second
// passes without a byte.
std::string raw_exchange(std::uint16_t port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  timeval timeout{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  // Not half-closed: httplib writes nothing to a peer that has shut its side.
  std::string reply;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

// Prometheus text exposition 0.0.4, read strictly: every family's HELP and TYPE come before its
// samples, once; every sample line is NAME{LABELS} VALUE with a number. Returns the samples.
std::map<std::string, double> parse_exposition(const std::string& text) {
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (\S+))");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|untyped))");
  std::map<std::string, double> samples;
  std::set<std::string> typed;
  std::set<std::string> finished;
  std::string current;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    if (line.starts_with("# HELP ")) continue;
    std::smatch match;
    if (line.starts_with("# TYPE ")) {
      REQUIRE(std::regex_match(line, match, kType));
      const std::string family = match[1];
      CHECK(typed.insert(family).second);
      if (!current.empty()) finished.insert(current);
      current = family;
      continue;
    }
    REQUIRE(std::regex_match(line, match, kSample));
    const std::string name = match[1];
    CHECK(name == current);
    CHECK(finished.count(name) == 0);
    const std::string value = match[5];
    double number = 0;
    if (value == "NaN" || value == "+Inf" || value == "-Inf") {
      number = std::nan("");
    } else {
      std::size_t used = 0;
      number = std::stod(value, &used);
      CHECK(used == value.size());
    }
    const std::string key = line.substr(0, line.rfind(' '));
    CHECK_MESSAGE(samples.count(key) == 0, "duplicate sample " << key);
    samples[key] = number;
  }
  CHECK(text.ends_with("\n"));
  return samples;
}

// A stage that takes its time, to hold requests in flight; `started` counts the runs begun.
class SlowStage final : public env::Stage {
 public:
  SlowStage(int ms, std::shared_ptr<std::atomic<int>> started)
      : ms_(ms), started_(std::move(started)) {}
  std::string_view name() const override { return "slow"; }
  bool available() const override { return true; }
  bool run(const env::StepJob&, env::StepArtifacts&, env::StepResult&) override {
    if (started_) ++*started_;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return true;
  }

 private:
  int ms_;
  std::shared_ptr<std::atomic<int>> started_;
};

// A stage with counters shaped like the compile and GPU pools' (scalars, text, per-worker lists).
class CountingStage final : public env::Stage {
 public:
  std::string_view name() const override { return "counting"; }
  bool available() const override { return true; }
  bool run(const env::StepJob&, env::StepArtifacts&, env::StepResult&) override { return true; }
  Value stats() const override {
    return Value{{"jobs", 12},
                 {"queue_depth", 3},
                 {"toolchain", "nvrtc 12.4"},
                 {"worker_pids", {101, 102}},
                 {"runners",
                  {{{"device", 0}, {"busy", true}, {"utilisation", 0.5}},
                   {{"device", 3}, {"busy", false}, {"utilisation", 0.25}}}}};
  }
};

// Polls /metrics until `sample` reaches `at_least` (10 s at most), so that a test acts once the
// server is in the state it needs rather than after a fixed sleep a loaded machine can outrun.
void wait_for_sample(httplib::Client& client, const std::string& sample, double at_least) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double value = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto metrics = client.Get("/metrics");
    if (metrics && metrics->status == 200) {
      const auto samples = parse_exposition(metrics->body);
      const auto it = samples.find(sample);
      if (it != samples.end()) value = it->second;
      if (value >= at_least) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL(sample << " stayed at " << value << ", under " << at_least);
}

env::Pipeline slow_pipeline(int ms, std::shared_ptr<std::atomic<int>> started = nullptr) {
  env::Pipeline pipeline;
  pipeline.add(std::make_unique<SlowStage>(ms, std::move(started)));
  pipeline.add(std::make_unique<env::UnavailableStage>("gpu", "no CUDA device on this server"));
  return pipeline;
}

}  // namespace

TEST_CASE("http front: wire error codes map to one HTTP status each") {
  const std::vector<std::pair<ErrorCode, int>> table = {
      {ErrorCode::kBadRequest, 400},     {ErrorCode::kUnsupportedVersion, 400},
      {ErrorCode::kUnknownOp, 400},      {ErrorCode::kInvalidArgument, 400},
      {ErrorCode::kTooLarge, 413},       {ErrorCode::kUnknownTask, 404},
      {ErrorCode::kUnknownEpisode, 404}, {ErrorCode::kEpisodeDone, 409},
      {ErrorCode::kBusy, 503},           {ErrorCode::kShuttingDown, 503},
      {ErrorCode::kInternal, 500},       {ErrorCode::kIo, 500},
      {ErrorCode::kTimeout, 504}};
  for (const auto& [code, status] : table) {
    INFO(core::error_code_name(code));
    CHECK(env::http_status_of(code) == status);
  }
}

TEST_CASE("http front: addresses are HOST:PORT, and a remote one needs allow_remote") {
  const auto local = env::parse_http_address("127.0.0.1:8080", false);
  REQUIRE(local.ok());
  CHECK(local->host == "127.0.0.1");
  CHECK(local->port == 8080);
  const auto named = env::parse_http_address("localhost:0", false);
  REQUIRE(named.ok());
  CHECK(named->host == "127.0.0.1");
  const auto v6 = env::parse_http_address("[::1]:9000", false);
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");

  for (const char* remote : {"0.0.0.0:8080", "10.1.2.3:80", "[::]:8080", "example.com:80"}) {
    INFO(remote);
    const auto refused = env::parse_http_address(remote, false);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::kInvalidArgument);
    CHECK(refused.error().message.find("--allow-remote") != std::string::npos);
    CHECK(env::parse_http_address(remote, true).ok());
  }
  for (const char* malformed : {"8080", ":8080", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:x",
                                "[::1:80", "::1:80", "a b:80"}) {
    INFO(malformed);
    const auto refused = env::parse_http_address(malformed, true);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("not an HTTP address") != std::string::npos);
  }
}

TEST_CASE("http front: a front on a busy port fails to start with the reason") {
  FrontedServer server;
  env::ServerOptions options;
  options.bind = "tcp://127.0.0.1:*";
  options.log_path = std::filesystem::temp_directory_path() /
                     ("crucible-http-test-port-" + std::to_string(::getpid())) / "t.log";
  options.log_sync = false;
  options.workers = 1;
  auto second =
      env::Server::create(options, testing::shared_registry(), testing::no_gpu_pipeline());
  REQUIRE(second.ok());
  env::HttpFrontOptions front;
  front.address = {"127.0.0.1", server.port()};
  const auto clash = env::HttpFront::start(front, **second);
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.error().code == ErrorCode::kIo);
  CHECK(clash.error().message.find("cannot serve HTTP on http://127.0.0.1:") != std::string::npos);
  std::filesystem::remove_all(options.log_path.parent_path());
}

TEST_CASE("http front: healthz, hello, tasks, task, stats and schema describe the server") {
  FrontedServer server;
  auto client = server.client();

  const auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  const Value healthz = json_of(health);
  // No GPU here: the server serves, but cannot run every stage.
  CHECK(healthz["status"] == "degraded");
  CHECK(healthz["stages"]["validate"] == true);
  CHECK(healthz["stages"]["gpu"] == false);
  CHECK(healthz["tasks"].get<int>() > 0);

  const auto hello = client.Get("/hello?client=doctest");
  REQUIRE(hello);
  CHECK(hello->status == 200);
  CHECK(hello->get_header_value("Content-Type") == "application/json");
  const Value hello_body = json_of(hello);
  CHECK(hello_body["server"] == "crucible");
  CHECK(hello_body["protocol"] == 1);
  CHECK_FALSE(hello_body.contains("id"));
  CHECK(hello_body["limits"]["max_frame_bytes"] == 1u << 20);

  const Value tasks = json_of(client.Get("/tasks"));
  std::set<std::string> ids;
  for (const auto& task : tasks["tasks"]) ids.insert(task["id"].get<std::string>());
  CHECK(ids.count("llm/rms_norm") == 1);
  const Value llm = json_of(client.Get("/tasks?category=llm"));
  REQUIRE_FALSE(llm["tasks"].empty());
  for (const auto& task : llm["tasks"]) CHECK(task["category"] == "llm");
  CHECK(llm["tasks"].size() < tasks["tasks"].size());

  const Value task = json_of(client.Get("/tasks/llm/rms_norm"));
  CHECK(task["task"]["id"] == "llm/rms_norm");
  CHECK(task["task"]["reference"]["source"].get<std::string>().find("__global__") !=
        std::string::npos);
  // The id may be percent-encoded as one path segment.
  CHECK(json_of(client.Get("/tasks/llm%2Frms_norm"))["task"]["id"] == "llm/rms_norm");
  check_error(client.Get("/tasks/llm/no_such_task"), 404, "unknown_task", "llm/no_such_task");

  const Value stats = json_of(client.Get("/stats"));
  CHECK(stats["requests"].get<std::uint64_t>() >= 7);
  CHECK(stats["errors"]["unknown_task"] == 1);

  const Value schema = json_of(client.Get("/schema"));
  for (const char* key : {"action", "observation", "state", "reset", "score"}) {
    INFO(key);
    REQUIRE(schema.contains(key));
    CHECK(schema[key]["type"] == "object");
  }
  CHECK(schema["action"]["required"] == Value::array({"source"}));
  CHECK(schema["state"]["required"] == Value::array({"episode_id", "step_count"}));
  CHECK(schema["observation"]["properties"]["result"]["properties"]["status"]["enum"].size() == 9);
}

TEST_CASE("http front: reset -> step -> state -> close, a step answered infra_error truthfully") {
  FrontedServer server;
  auto client = server.client();

  const auto reset =
      post_json(client, "/reset", Value{{"task", "llm/rms_norm"}, {"seed", 7}, {"max_steps", 3}});
  REQUIRE(reset);
  CHECK(reset->status == 200);
  const Value opened = json_of(reset);
  const std::string episode = opened["episode_id"].get<std::string>();
  CHECK(episode.starts_with("ep-"));
  CHECK(opened["reward"].is_null());
  CHECK(opened["done"] == false);
  CHECK(opened["observation"]["task"]["id"] == "llm/rms_norm");
  CHECK(opened["observation"]["step"] == 0);
  CHECK(opened["observation"]["max_steps"] == 3);
  CHECK(opened["observation"]["reward_spec"]["preset"] == "default");
  // Reply fields the front does not place (none from this server) would be here.
  CHECK(opened["metadata"] == Value::object());

  const Value fresh = json_of(client.Get(("/state?episode_id=" + episode).c_str()));
  CHECK(fresh["episode_id"] == episode);
  CHECK(fresh["step_count"] == 0);
  CHECK(fresh["task"] == "llm/rms_norm");
  CHECK(fresh["max_steps"] == 3);
  CHECK(fresh["done"] == false);
  CHECK(fresh["last_step"].is_null());

  // OpenEnv's shape: the action in its own map. Without a compile stage the step cannot be
  // measured, and says so; infra_error is the server's fault and uses no budget.
  const auto step =
      post_json(client, "/step", Value{{"episode_id", episode}, {"action", {{"source", kKernel}}}});
  REQUIRE(step);
  CHECK(step->status == 200);
  const Value stepped = json_of(step);
  CHECK(stepped["episode_id"] == episode);
  const Value& result = stepped["observation"]["result"];
  CHECK(result["status"] == "infra_error");
  CHECK(result["message"] == "the compile stage is disabled on this server");
  CHECK(result["reward"]["infra"] == true);
  CHECK(stepped["observation"]["step"] == 1);
  CHECK(stepped["observation"]["best"].is_null());
  CHECK(stepped["reward"] == result["reward"]["total"]);
  CHECK(stepped["done"] == false);
  CHECK(stepped["terminated"] == false);
  CHECK(stepped["truncated"] == false);
  CHECK(stepped["metadata"] == Value::object());

  // The wire's own names work too.
  const Value wire =
      json_of(post_json(client, "/step", Value{{"episode", episode}, {"source", kKernel}}));
  CHECK(wire["observation"]["step"] == 2);
  CHECK(wire["observation"]["result"]["status"] == "infra_error");

  const Value after = json_of(client.Get(("/state?episode_id=" + episode).c_str()));
  CHECK(after["step_count"] == 2);
  CHECK(after["last_step"]["status"] == "infra_error");
  CHECK(after["last_step"]["step"] == 2);
  CHECK(after["done"] == false);

  const auto close = post_json(client, "/close", Value{{"episode_id", episode}});
  REQUIRE(close);
  CHECK(close->status == 200);
  const Value closed = json_of(close);
  CHECK(closed["episode_id"] == episode);
  // infra_error steps give their place in the budget back: none counted.
  CHECK(closed["steps"] == 0);
  CHECK(closed["best"].is_null());

  check_error(client.Get(("/state?episode_id=" + episode).c_str()), 404, "unknown_episode",
              episode);
  check_error(post_json(client, "/close", Value{{"episode_id", episode}}), 404, "unknown_episode",
              episode);
  check_error(client.Get("/state"), 400, "bad_request", "episode_id");
}

TEST_CASE("http front: an episode's budget ends, then steps get 409 episode_done") {
  FrontedServer server;
  auto client = server.client();
  const Value opened =
      json_of(post_json(client, "/reset", Value{{"task", "llm/rms_norm"}, {"max_steps", 1}}));
  const std::string episode = opened["episode_id"].get<std::string>();
  // No kernel at all: invalid_action, the agent's fault, which uses the budget.
  const Value first = json_of(post_json(
      client, "/step", Value{{"episode_id", episode}, {"action", {{"source", "int x;"}}}}));
  CHECK(first["observation"]["result"]["status"] == "invalid_action");
  CHECK(first["truncated"] == true);
  CHECK(first["done"] == true);
  check_error(post_json(client, "/step",
                        Value{{"episode_id", episode}, {"action", {{"source", "int x;"}}}}),
              409, "episode_done", "1 of 1");
  const Value state = json_of(client.Get(("/state?episode_id=" + episode).c_str()));
  CHECK(state["done"] == true);
  CHECK(state["truncated"] == true);
}

TEST_CASE("http front: every wire error comes back with its code, message and HTTP status") {
  env::ServerOptions options;
  options.limits.max_frame_bytes = 64 * 1024;
  options.limits.max_source_bytes = 16 * 1024;
  FrontedServer server(options);
  auto client = server.client();

  check_error(post_json(client, "/reset", Value{{"task", "llm/nope"}}), 404, "unknown_task",
              "llm/nope");
  check_error(post_json(client, "/reset", Value::object()), 400, "bad_request",
              "missing field 'task'");
  check_error(client.Post("/reset", "", "application/json"), 400, "bad_request",
              "missing field 'task'");
  check_error(post_json(client, "/reset", Value{{"task", "llm/rms_norm"}, {"max_steps", 0}}), 400,
              "invalid_argument", "max_steps");
  check_error(post_json(client, "/reset", Value{{"task", "llm/rms_norm"}, {"seed", -1}}), 400,
              "invalid_argument", "seed");
  check_error(post_json(client, "/step", Value{{"episode_id", "ep-0000"}, {"source", kKernel}}),
              404, "unknown_episode", "ep-0000");
  check_error(post_json(client, "/step", Value{{"episode_id", "ep-0000"}, {"source", 12}}), 400,
              "bad_request", "field 'source' must be a string");
  check_error(post_json(client, "/step", Value{{"episode_id", "ep-0000"}, {"action", "x"}}), 400,
              "bad_request", "field 'action' must be a map");
  check_error(post_json(client, "/step",
                        Value{{"episode_id", "ep-0"}, {"episode", "ep-1"}, {"source", kKernel}}),
              400, "bad_request", "given twice");
  check_error(
      post_json(
          client, "/step",
          Value{{"episode_id", "ep-0"}, {"source", kKernel}, {"action", {{"source", kKernel}}}}),
      400, "bad_request", "given twice");
  // A source over --max-source-bytes in a body within the frame limit: the wire's too_large.
  check_error(post_json(client, "/step",
                        Value{{"episode_id", "ep-0000"}, {"source", std::string(20000, 'x')}}),
              413, "too_large", "source");

  // The same request gets the same error over ZeroMQ.
  clients::ClientOptions zmq_options;
  zmq_options.endpoint = server.zmq_endpoint();
  auto zmq_client = clients::Client::connect(zmq_options);
  REQUIRE(zmq_client.ok());
  const auto over_zmq = zmq_client->reset("llm/rms_norm", std::nullopt, 0u);
  REQUIRE_FALSE(over_zmq.ok());
  const Value over_http =
      json_of(post_json(client, "/reset", Value{{"task", "llm/rms_norm"}, {"max_steps", 0}}));
  CHECK(over_http["error"]["message"] == over_zmq.error().message);
}

TEST_CASE("http front: bodies over --max-frame-bytes are refused 413, announced or chunked") {
  env::ServerOptions options;
  options.limits.max_frame_bytes = 64 * 1024;
  options.limits.max_source_bytes = 16 * 1024;
  FrontedServer server(options);

  // The server answers 413 and closes while the client may still be writing the body; a client
  // whose write lost that race sees a reset instead of the reply (on a loaded machine), so it
  // tries again, on a new connection: the reply must come.
  const auto until_answered = [](const auto& post) {
    auto result = post();
    for (int attempt = 1; attempt < 5 && !result; ++attempt) result = post();
    return result;
  };
  {
    // Announced: Content-Length is over the limit.
    const std::string body(64 * 1024 + 1, ' ');
    check_error(until_answered([&] {
                  auto client = server.client();
                  return client.Post("/step", body, "application/json");
                }),
                413, "too_large", "65536");
  }
  {
    // No Content-Length: the body is counted as it arrives.
    check_error(until_answered([&] {
                  auto client = server.client();
                  std::size_t sent = 0;
                  return client.Post(
                      "/score",
                      [&](std::size_t, httplib::DataSink& sink) {
                        const std::string piece(8192, ' ');
                        sink.write(piece.data(), piece.size());
                        sent += piece.size();
                        if (sent >= 128 * 1024) sink.done();
                        return true;
                      },
                      "application/json");
                }),
                413, "too_large", "65536");
  }
  {
    // Within the body limit, but its frame is not: floats take 9 bytes in msgpack, 4 here.
    auto client = server.client();
    Value many = Value::array();
    for (int i = 0; i < 4000; ++i) many.push_back(0.1);
    const Value body{{"task", "llm/rms_norm"}, {"options", {{"a", many}, {"b", many}}}};
    REQUIRE(core::to_json_text(body).size() < 64 * 1024);
    check_error(post_json(client, "/reset", body), 413, "too_large", "exceeds the limit of 65536");
  }
  {
    // Nesting: over the wire's 16 levels in the frame, and far over it in the body.
    auto client = server.client();
    Value deep = Value::object();
    for (int i = 0; i < 16; ++i) deep = Value{{"d", deep}};
    const Value body{{"task", "llm/rms_norm"}, {"options", deep}};
    check_error(post_json(client, "/reset", body), 413, "too_large",
                "msgpack nesting deeper than 16");
    const std::string bomb = std::string(30000, '[') + std::string(30000, ']');
    check_error(client.Post("/reset", bomb, "application/json"), 413, "too_large", "deep");
  }
  {
    auto client = server.client();
    const auto gzip =
        client.Post("/reset", {{"Content-Encoding", "gzip"}}, "{}", "application/json");
    check_error(gzip, 415, "bad_request", "Content-Encoding");
  }
  auto client = server.client();
  CHECK(client.Get("/healthz")->status == 200);
}

TEST_CASE("http front: malformed JSON, wrong shapes, unknown routes and methods get clear 4xx") {
  FrontedServer server;
  auto client = server.client();
  check_error(client.Post("/reset", "{\"task\": ", "application/json"), 400, "bad_request",
              "the body is not valid JSON: parse error at line 1");
  check_error(client.Post("/reset", "{task: 1}", "application/json"), 400, "bad_request",
              "not valid JSON");
  check_error(client.Post("/step", "\"\xff\xfe\"", "application/json"), 400, "bad_request",
              "not valid JSON");
  check_error(client.Post("/reset", "[1, 2]", "application/json"), 400, "bad_request",
              "must be a JSON object, got array");
  check_error(client.Post("/score", "{\"x\": 1}", "application/json"), 400, "bad_request", "items");
  check_error(client.Post("/score", "{\"items\": 3}", "application/json"), 400, "bad_request",
              "must be a list");

  check_error(client.Get("/nowhere"), 404, "unknown_op", "/healthz");
  check_error(client.Post("/nowhere", "{}", "application/json"), 404, "unknown_op", "POST");
  const auto get_reset = client.Get("/reset");
  check_error(get_reset, 405, "bad_request", "takes POST");
  CHECK(get_reset->get_header_value("Allow") == "POST");
  const auto post_tasks = client.Post("/tasks", "{}", "application/json");
  check_error(post_tasks, 405, "bad_request", "takes GET");
  CHECK(post_tasks->get_header_value("Allow") == "GET");
  check_error(client.Delete("/step"), 405, "bad_request", "takes POST");
}

TEST_CASE("http front: /score runs a batch concurrently and answers each item in order") {
  env::ServerOptions options;
  options.workers = 4;
  FrontedServer server(options, slow_pipeline(600));
  auto client = server.client();

  Value items = Value::array();
  for (int i = 0; i < 4; ++i) items.push_back(Value{{"task", "llm/rms_norm"}, {"source", kKernel}});
  items.push_back(Value{{"task", "llm/nope"}, {"source", kKernel}});
  items.push_back(Value{{"task", "llm/rms_norm"}});
  items.push_back(Value{{"task", "llm/rms_norm"}, {"action", {{"source", kKernel}}}});
  items.push_back(7);
  const auto started = std::chrono::steady_clock::now();
  const Value batch = json_of(post_json(client, "/score", items));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const Value& results = batch["results"];
  REQUIRE(results.size() == 8);
  for (int i : {0, 1, 2, 3, 6}) {
    INFO(i);
    CHECK(results[i]["ok"] == true);
    CHECK(results[i]["task"] == "llm/rms_norm");
    CHECK(results[i]["result"]["status"] == "infra_error");
    CHECK(results[i]["result"]["message"] == "no CUDA device on this server");
    CHECK(results[i]["reward"] == results[i]["result"]["reward"]["total"]);
  }
  CHECK(results[4]["ok"] == false);
  CHECK(results[4]["status"] == 404);
  CHECK(results[4]["error"]["code"] == "unknown_task");
  CHECK(results[5]["status"] == 400);
  CHECK(results[5]["error"]["message"] == "missing field 'source'");
  CHECK(results[7]["status"] == 400);
  CHECK(results[7]["error"]["message"].get<std::string>().starts_with("item 7: "));
  // Five slow items on four workers: two rounds of 0.6 s, not five.
  CHECK_MESSAGE(seconds < 2.4, seconds);

  // {"items": [...]} is the same batch.
  const Value wrapped = json_of(
      post_json(client, "/score", Value{{"items", {{{"task", "llm/nope"}, {"source", kKernel}}}}}));
  REQUIRE(wrapped["results"].size() == 1);
  CHECK(wrapped["results"][0]["error"]["code"] == "unknown_task");
  CHECK(json_of(post_json(client, "/score", Value::array()))["results"].empty());
}

TEST_CASE("http front: a full queue is 503 busy with Retry-After, and a draining server 503") {
  env::ServerOptions options;
  options.workers = 1;
  options.max_queued = 1;
  auto started = std::make_shared<std::atomic<int>>(0);
  FrontedServer server(options, slow_pipeline(1500, started));
  auto client = server.client();
  const Value opened = json_of(post_json(client, "/reset", Value{{"task", "llm/rms_norm"}}));
  const std::string episode = opened["episode_id"].get<std::string>();

  // One score takes the only worker; once it runs, a batch of three fills the one place in the
  // queue with its first item and is refused the other two.
  const auto one_score = [&] {
    auto other = server.client();
    Value items = Value::array();
    items.push_back(Value{{"task", "llm/rms_norm"}, {"source", kKernel}});
    return json_of(post_json(other, "/score", items));
  };
  Value first_reply;
  std::thread first([&] { first_reply = one_score(); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (started->load() < 1 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(started->load() == 1);
  Value batch_reply;
  std::thread batch([&] {
    auto other = server.client();
    Value items = Value::array();
    for (int i = 0; i < 3; ++i)
      items.push_back(Value{{"task", "llm/rms_norm"}, {"source", kKernel}});
    batch_reply = json_of(post_json(other, "/score", items));
  });
  wait_for_sample(client, "crucible_errors_total{code=\"busy\"}", 2);
  const auto busy = post_json(client, "/step", Value{{"episode_id", episode}, {"source", kKernel}});
  check_error(busy, 503, "busy", "retry later");
  CHECK(busy->get_header_value("Retry-After") == "1");

  // Stop while the batch is still running: the server drains and refuses new work.
  server.request_stop();
  // The loop notices the stop within one poll: ask until it answers so (the batch's queued
  // item keeps it draining for over a second).
  auto draining = client.Get("/hello");
  for (int i = 0; i < 500 && draining && draining->status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    draining = client.Get("/hello");
  }
  check_error(draining, 503, "shutting_down", "shutting down");
  CHECK(draining->get_header_value("Retry-After") == "5");
  const auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 503);
  CHECK(json_of(health)["status"] == "unhealthy");
  first.join();
  batch.join();
  CHECK(first_reply["results"][0]["result"]["status"] == "infra_error");
  std::size_t busy_items = 0;
  for (const auto& item : batch_reply["results"]) {
    if (item["ok"] == true) {
      CHECK(item["result"]["status"] == "infra_error");
    } else {
      CHECK(item["status"] == 503);
      CHECK(item["error"]["code"] == "busy");
      ++busy_items;
    }
  }
  CHECK(busy_items == 2);

  // Once the server's loop has returned, a request waits until the front stops, then is told.
  server.stop_server();
  std::optional<httplib::Result> late;
  std::thread waiting([&] {
    auto other = server.client();
    late.emplace(other.Get("/tasks"));
  });
  // Time for the request to reach the front (a loaded machine gets a second).
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  server.front().stop();
  waiting.join();
  REQUIRE(late.has_value());
  check_error(*late, 503, "shutting_down", "shutting down");
}

TEST_CASE("http front: steps may not take the threads /healthz and /metrics need") {
  // Five threads: one may wait on a step or score, four stay free.
  FrontedServer server({}, slow_pipeline(1500), 5);
  Value batch_reply;
  std::thread batch([&] {
    auto other = server.client();
    batch_reply = json_of(post_json(
        other, "/score", Value::array({Value{{"task", "llm/rms_norm"}, {"source", kKernel}}})));
  });
  auto client = server.client();
  // The batch holds the one thread steps may take once the server has its item.
  wait_for_sample(client, "crucible_inflight", 1);
  const auto refused = post_json(
      client, "/score", Value::array({Value{{"task", "llm/rms_norm"}, {"source", kKernel}}}));
  check_error(refused, 503, "busy", "the HTTP front has 1 steps and scores waiting");
  CHECK(refused->get_header_value("Retry-After") == "1");
  CHECK(client.Get("/healthz")->status == 200);
  CHECK(client.Get("/metrics")->status == 200);
  batch.join();
  CHECK(batch_reply["results"][0]["ok"] == true);
}

TEST_CASE("http front: /metrics is Prometheus text with the server's counters") {
  FrontedServer server;
  auto client = server.client();
  (void)client.Get("/tasks/llm/nope");
  (void)post_json(client, "/score",
                  Value::array({Value{{"task", "llm/rms_norm"}, {"source", kKernel}}}));
  const auto metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4"));
  const auto samples = parse_exposition(metrics->body);
  CHECK(samples.at("crucible_requests_total") >= 3);
  CHECK(samples.at("crucible_replies_total") >= 2);
  CHECK(samples.at("crucible_errors_total{code=\"unknown_task\"}") == 1);
  CHECK(samples.at("crucible_errors_total{code=\"busy\"}") == 0);
  CHECK(samples.at("crucible_step_statuses_total{status=\"infra_error\"}") == 1);
  CHECK(samples.at("crucible_step_statuses_total{status=\"ok\"}") == 0);
  CHECK(samples.at("crucible_scores_total") == 1);
  CHECK(samples.at("crucible_inflight") == 0);
  CHECK(samples.at("crucible_episodes_open") == 0);
  CHECK(samples.at("crucible_stage_available{stage=\"validate\"}") == 1);
  CHECK(samples.at("crucible_stage_available{stage=\"gpu\"}") == 0);
  CHECK(samples.at("crucible_log_records_total") == 1);
  CHECK(samples.at("crucible_http_responses_total{code=\"404\"}") == 1);
  CHECK(samples.at("crucible_http_in_flight") == 1);  // this very request
}

TEST_CASE("http front: a stage's pool counters become gauges, per worker where it lists them") {
  env::Pipeline pipeline;
  pipeline.add(std::make_unique<CountingStage>());
  FrontedServer server({}, std::move(pipeline));
  auto client = server.client();
  const auto samples = parse_exposition(client.Get("/metrics")->body);
  CHECK(samples.at("crucible_pool_counting_jobs") == 12);
  CHECK(samples.at("crucible_pool_counting_queue_depth") == 3);
  CHECK(samples.at("crucible_pool_counting_runners_busy{index=\"0\",device=\"0\"}") == 1);
  CHECK(samples.at("crucible_pool_counting_runners_busy{index=\"1\",device=\"3\"}") == 0);
  CHECK(samples.at("crucible_pool_counting_runners_utilisation{index=\"1\",device=\"3\"}") ==
        doctest::Approx(0.25));
  // Text and lists of numbers have no sample.
  for (const auto& [name, value] : samples) CHECK(name.find("toolchain") == std::string::npos);
  CHECK(samples.count("crucible_pool_counting_worker_pids") == 0);
}

TEST_CASE("http front: 1,000 hostile requests from a fixed seed, and the front still answers") {
  env::ServerOptions options;
  options.limits.max_frame_bytes = 16 * 1024;
  options.limits.max_source_bytes = 4 * 1024;
  FrontedServer server(options);
  std::mt19937 rng(20240611);
  const std::vector<std::string> paths = {"/reset",  "/step",    "/score", "/close",       "/state",
                                          "/tasks/", "/healthz", "/x",     "/tasks/%ff%00"};
  const std::vector<std::string> pieces = {"{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"",
                                           ":",
                                           ",",
                                           "null",
                                           "1e999",
                                           "-",
                                           "\\u0000",
                                           "\\ud800",
                                           "\"task\"",
                                           "\"source\"",
                                           "\"episode_id\"",
                                           "\"action\"",
                                           "{}",
                                           "[]",
                                           "\xc3",
                                           "\"llm/rms_norm\"",
                                           "true",
                                           "18446744073709551616"};
  auto client = server.client();
  for (int i = 0; i < 1000; ++i) {
    std::string body;
    const int count = static_cast<int>(rng() % 24);
    for (int k = 0; k < count; ++k) body += pieces[rng() % pieces.size()];
    const std::string& path = paths[rng() % paths.size()];
    const auto result = (rng() % 4 == 0) ? client.Get(path.c_str())
                                         : client.Post(path.c_str(), body, "application/json");
    REQUIRE(result);
    INFO(path << " " << body << " -> " << result->body);
    CHECK(result->status >= 200);
    CHECK(result->status < 500);
    CHECK_FALSE(Value::parse(result->body, nullptr, false).is_discarded());
  }
  // Raw bytes that are not HTTP, or barely: each gets a JSON refusal (or, for bytes that are not
  // a request at all, nothing), never a crash.
  const std::vector<std::pair<std::string, std::string>> raw = {
      {"GARBAGE\r\n\r\n", "HTTP/1.1 400"},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n", "HTTP/1.1 414"},
      {"POST /reset HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "HTTP/1.1 400"},
      {"POST /reset HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n{}",
       "is not a byte count"},
      {"POST /reset HTTP/1.1\r\nContent-Length: -5\r\n\r\n{}", "is not a byte count"},
      {"POST /step HTTP/1.1\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n",
       "HTTP/1.1 413"},
      {"GET /healthz HTTP/1.1\r\nHost: x\r\n", ""},
      {std::string("\x00\x01\x02\xff", 4), ""}};
  for (const auto& [bytes, expected] : raw) {
    const std::string reply = raw_exchange(server.port(), bytes);
    INFO(bytes.substr(0, 80) << " -> " << reply.substr(0, 300));
    CHECK(reply.find(expected) != std::string::npos);
    if (reply.starts_with("HTTP/1.1 4"))
      CHECK(reply.find("{\"error\":{\"code\":") != std::string::npos);
  }
  const auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("http front: with a token, every request but /healthz needs the bearer header") {
  const std::string token(64, 'a');
  FrontedServer server({}, testing::no_gpu_pipeline(), 8,
                       [&](env::HttpFrontOptions& front) { front.token = token; });
  auto client = server.client();
  const auto check_refused = [](const httplib::Result& result, const std::string& needle) {
    REQUIRE(result);
    INFO(result->body);
    CHECK(result->status == 401);
    CHECK(result->get_header_value("WWW-Authenticate") == "Bearer realm=\"crucible\"");
    const Value body = json_of(result);
    CHECK(body["error"]["code"] == "unauthorized");
    CHECK(body["error"]["message"].get<std::string>().find(needle) != std::string::npos);
  };
  check_refused(client.Get("/hello"), "needs `Authorization: Bearer <token>`");
  check_refused(client.Get("/metrics"), "needs `Authorization: Bearer <token>`");
  check_refused(post_json(client, "/reset", Value{{"task", "llm/rms_norm"}}),
                "needs `Authorization: Bearer <token>`");
  // A wrong token, one a character short, one a character long, or another scheme.
  for (const std::string& header : {"Bearer " + std::string(64, 'b'), "Bearer " + token.substr(1),
                                    "Bearer " + token + "a", "Basic " + token, token}) {
    INFO(header);
    check_refused(client.Get("/hello", {{"Authorization", header}}), "does not carry");
  }
  // The liveness probe stays open; everything else works with the token.
  CHECK(client.Get("/healthz")->status == 200);
  const httplib::Headers authorized = {{"Authorization", "Bearer " + token}};
  CHECK(client.Get("/hello", authorized)->status == 200);
  CHECK(client.Get("/hello", {{"Authorization", "bearer " + token}})->status == 200);
  const auto opened =
      client.Post("/reset", authorized, core::to_json_text(Value{{"task", "llm/rms_norm"}}),
                  "application/json");
  REQUIRE(opened);
  CHECK(opened->status == 200);
  const auto metrics = client.Get("/metrics", authorized);
  REQUIRE(metrics);
  const auto samples = parse_exposition(metrics->body);
  CHECK(samples.at("crucible_http_responses_total{code=\"401\"}") == 8);
}

TEST_CASE("http front: HTTPS with a certificate, refused in plain HTTP") {
  const std::filesystem::path tls = std::filesystem::path(CRUCIBLE_SOURCE_DIR) / "tests/env/tls";
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  CHECK(env::http_front_has_tls());
  FrontedServer server({}, testing::no_gpu_pipeline(), 8, [&](env::HttpFrontOptions& front) {
    front.tls_cert = tls / "cert.pem";
    front.tls_key = tls / "key.pem";
  });
  CHECK(server.front().url() == "https://127.0.0.1:" + std::to_string(server.port()));
  httplib::SSLClient secure("127.0.0.1", server.port());
  secure.set_ca_cert_path((tls / "cert.pem").c_str());
  secure.enable_server_certificate_verification(true);
  secure.set_connection_timeout(10, 0);
  const auto hello = secure.Get("/hello");
  REQUIRE(hello);
  CHECK(hello->status == 200);
  CHECK(json_of(hello)["protocol"].is_number());
  // Plain HTTP gets no answer from a TLS port.
  auto plain = server.client();
  plain.set_read_timeout(5, 0);
  CHECK_FALSE(plain.Get("/hello"));
  // A client that trusts another certificate refuses this server.
  httplib::SSLClient wary("127.0.0.1", server.port());
  wary.set_ca_cert_path((tls / "README.md").c_str());
  wary.enable_server_certificate_verification(true);
  CHECK_FALSE(wary.Get("/hello"));
#else
  CHECK_FALSE(env::http_front_has_tls());
#endif
  // A key that is not the certificate's (or no TLS in this build) fails start with the reason.
  auto registry_server = env::Server::create(
      [] {
        env::ServerOptions options;
        options.bind = "tcp://127.0.0.1:*";
        options.log_path = std::filesystem::temp_directory_path() /
                           ("crucible-http-tls-" + std::to_string(::getpid()) + ".log");
        options.log_sync = false;
        return options;
      }(),
      testing::shared_registry(), testing::no_gpu_pipeline());
  REQUIRE(registry_server.ok());
  env::HttpFrontOptions broken;
  broken.address = {"127.0.0.1", 0};
  broken.tls_cert = tls / "cert.pem";
  broken.tls_key = tls / "cert.pem";
  const auto refused = env::HttpFront::start(broken, **registry_server);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kInvalidArgument);
  const std::string message = refused.error().message;
  CHECK_MESSAGE((message.find("cannot load the TLS certificate") != std::string::npos ||
                 message.find("has no TLS") != std::string::npos),
                message);
  broken.tls_key.clear();
  CHECK(env::HttpFront::start(broken, **registry_server).error().message.find("both") !=
        std::string::npos);
}
