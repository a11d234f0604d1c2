// The server under faults and hostile input: a log that cannot be written, replies that must
// stay valid UTF-8 whatever the request held, episodes that try to pin memory, odd binds.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>
#include <random>
#include <zmq.hpp>

#include "clients/cpp/client.hpp"
#include "core/msgpack_codec.hpp"
#include "core/text.hpp"
#include "env/trajectory_log.hpp"
#include "server_fixture.hpp"

using namespace crucible;
using core::ErrorCode;
using core::Op;
using core::Value;
using testing::RunningServer;

namespace {

clients::Client connect_to(const std::string& endpoint) {
  clients::ClientOptions options;
  options.endpoint = endpoint;
  options.timeout = std::chrono::milliseconds(20000);
  auto client = clients::Client::connect(options);
  REQUIRE(client.ok());
  return std::move(client).value();
}

// A source the validate stage refuses on any machine: the agent's fault, so it counts.
constexpr const char* kNoLaunch = "__global__ void k() {}\n";

// Every string and key in `value` is valid UTF-8; messages are one line.
void check_text(const Value& value, const std::string& where) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    CHECK_MESSAGE(core::is_valid_utf8(text), where);
  } else if (value.is_array()) {
    for (const auto& item : value) check_text(item, where);
  } else if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      CHECK_MESSAGE(core::is_valid_utf8(key), where);
      if (key == "message" && item.is_string()) {
        const auto& text = item.get_ref<const std::string&>();
        CHECK_MESSAGE(text.find_first_of("\r\n") == std::string::npos, where << ": " << text);
      }
      check_text(item, where + "." + key);
    }
  }
}

class FileSizeCap {
 public:
  explicit FileSizeCap(std::uint64_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit capped = saved_;
    capped.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &capped) == 0);
  }
  ~FileSizeCap() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace

TEST_CASE("server faults: a step that cannot be logged costs the episode nothing") {
  RunningServer server;
  auto client = connect_to(server.endpoint());
  const auto reset = client.reset("llm/rms_norm", 7, 1);
  REQUIRE(reset.ok());
  const std::string episode = (*reset)["episode"];
  {
    // The log cannot grow (a full disk, as far as the server can tell).
    FileSizeCap cap(std::filesystem::file_size(server.log_path()));
    const auto lost = client.step(episode, kNoLaunch);
    REQUIRE_FALSE(lost.ok());
    CHECK(lost.error().code == ErrorCode::kInternal);
    CHECK(lost.error().message.find("could not be logged") != std::string::npos);
    CHECK(lost.error().message.find("did not count") != std::string::npos);
  }
  // The budget of one step is still whole, and the unlogged step is nobody's best.
  const auto counted = client.step(episode, kNoLaunch);
  REQUIRE(counted.ok());
  CHECK((*counted)["result"]["status"] == "invalid_action");
  CHECK((*counted)["truncated"] == true);
  CHECK((*counted)["best"]["step"] == (*counted)["step"]);
  const auto stats = client.stats();
  REQUIRE(stats.ok());
  CHECK((*stats)["log"]["failed_appends"] == 1);
  CHECK((*stats)["log"]["records"] == 1);
  CHECK_FALSE((*stats)["log"].contains("path"));

  server.stop();
  std::vector<Value> records;
  auto report = env::read_trajectory_log(server.log_path(), [&](Value&& record) {
    records.push_back(std::move(record));
    return true;
  });
  REQUIRE(report.ok());
  CHECK(report->skipped.empty());
  REQUIRE(records.size() == 1);
  CHECK(records[0]["step"] == (*counted)["step"]);
}

TEST_CASE("server faults: 3,000 hostile requests, and every reply is valid one-line UTF-8") {
  RunningServer server;
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 10000);
  socket.connect(server.endpoint());
  auto client = connect_to(server.endpoint());
  const auto reset = client.reset("llm/rms_norm", 1, 10000);
  REQUIRE(reset.ok());
  const std::string episode = (*reset)["episode"];

  std::mt19937_64 rng(2026);
  const std::string dash = "\xE2\x80\x94";
  const std::string pieces[] = {
      dash, "\xC3\xA9", "\xF0\x9F\x98\x80", "\xE2\x80", "\xFF", "\n", "\r", "x", "<<<", ">>>",
      "(",  ",",        "@launch",          " "};
  const auto random_text = [&](std::size_t max_pieces) {
    std::string text;
    const std::size_t n = rng() % max_pieces;
    for (std::size_t i = 0; i < n; ++i) {
      if (rng() % 4 == 0) {
        text.push_back(static_cast<char>(rng()));
      } else {
        text += pieces[rng() % std::size(pieces)];
      }
    }
    return text;
  };
  // Sources that put multi-byte characters exactly where messages cut or quote text.
  const auto hostile_source = [&]() {
    switch (rng() % 6) {
      case 0:
        return "// @launch rms_norm_kernel<<<num_tokens, 256>>>(out, input " + dash +
               " weight, epsilon, hidden_size)\n";
      case 1:
        return "// @launch " + std::string(rng() % 50, 'k') + dash + random_text(8) +
               "<<<1, 32>>>()\n";
      case 2:
        return "// @launch k<" + random_text(6) + "><<<1, 32>>>(out)\n";
      case 3:
        return "// @launch k<<<" + std::string(rng() % 130, '1') + dash + ", 32>>>(out)\n";
      case 4:
        return "// @workspace w" + random_text(5) + " float[" + random_text(5) + "]\n";
      default:
        return "// comment " + dash + " near\n// @launch " + random_text(12) + "\n";
    }
  };
  for (int i = 0; i < 3000; ++i) {
    Value request = core::make_request(i, Op::kHello);
    switch (i % 6) {
      case 0:
        request["op"] = std::string(rng() % 70, 'o') + random_text(6);
        break;
      case 1:
        request["op"] = "step";
        request["episode"] = std::string(rng() % 66, 'e') + random_text(4);
        request["source"] = "x";
        break;
      case 2:
        request["op"] = "step";
        request["episode"] = episode;
        request["source"] = hostile_source();
        break;
      case 3:
        request["op"] = "score";
        request["task"] = "llm/rms_norm";
        request["source"] = hostile_source();
        break;
      case 4:
        request["op"] = "task";
        request["task"] = random_text(10);
        break;
      default:
        request["op"] = "score";
        request["task"] = "llm/rms_norm";
        request["source"] = hostile_source();
        request["plan"] = Value::array({Value{{"kernel", random_text(10)},
                                              {"grid", Value::array({random_text(4)})},
                                              {"block", 32},
                                              {"args", Value::array({random_text(5)})}}});
        break;
    }
    const std::string frame = core::encode_msgpack(request);
    socket.send(zmq::buffer(frame), zmq::send_flags::none);
    zmq::message_t reply;
    REQUIRE(socket.recv(reply).has_value());
    // Decode as a strict client would: a str that is not UTF-8 is a dropped reply.
    auto decoded = core::decode_msgpack(reply.to_string_view(), core::DecodeLimits{});
    REQUIRE(decoded.ok());
    CHECK((*decoded)["id"] == i);
    check_text(*decoded, "reply " + std::to_string(i));
  }
}

TEST_CASE("server faults: an episode cannot pin unbounded memory") {
  env::ServerOptions options;
  options.max_episode_bytes = 64 * 1024;
  RunningServer server(options);
  auto client = connect_to(server.endpoint());
  Value big = Value::object();
  big["note"] = std::string(8000, 'n');
  const auto refused = client.call(Op::kReset, Value{{"task", "llm/rms_norm"}, {"options", big}});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kTooLarge);
  CHECK(refused.error().message.find("an episode keeps at most 4096") != std::string::npos);

  // Small episodes fill the cap, then reset answers busy; closing one makes room again.
  std::vector<std::string> open;
  std::optional<core::Error> busy;
  for (int i = 0; i < 1000 && !busy; ++i) {
    const auto reset = client.reset("llm/rms_norm");
    if (reset.ok()) {
      open.push_back((*reset)["episode"]);
    } else {
      busy = reset.error();
    }
  }
  REQUIRE(busy.has_value());
  CHECK(busy->code == ErrorCode::kBusy);
  CHECK(busy->message.find("close some first") != std::string::npos);
  REQUIRE_FALSE(open.empty());
  const auto stats = client.stats();
  REQUIRE(stats.ok());
  CHECK((*stats)["episode_bytes"].get<std::size_t>() <= 64 * 1024);
  REQUIRE(client.close(open.back()).ok());
  CHECK(client.reset("llm/rms_norm").ok());
}

TEST_CASE("server faults: localhost and [::1] bind; a malformed endpoint says what is wrong") {
  for (const std::string bind : {"tcp://localhost:0", "tcp://[::1]:0"}) {
    CAPTURE(bind);
    env::ServerOptions options;
    options.bind = bind;
    RunningServer server(options);
    auto client = connect_to(server.endpoint());
    CHECK(client.hello().ok());
  }
  struct Row {
    std::string bind;
    std::string needle;
  };
  const Row rows[] = {{"garbage", "must start with tcp://, ipc:// or inproc://"},
                      {"tcp://127.0.0.1", "a tcp address is HOST:PORT"},
                      {"tcp://127.0.0.1:99999", "the port must be 0-65535 or *"},
                      {"tcp://127.0.0.1:http", "the port must be 0-65535 or *"},
                      {"ipc://", "the address is empty"}};
  for (const auto& row : rows) {
    CAPTURE(row.bind);
    env::ServerOptions options;
    options.bind = row.bind;
    options.log_path = std::filesystem::temp_directory_path() / "crucible-bad-bind.log";
    auto server =
        env::Server::create(options, testing::shared_registry(), testing::no_gpu_pipeline());
    REQUIRE_FALSE(server.ok());
    CHECK(server.error().message.find("is not a ZeroMQ endpoint") != std::string::npos);
    CHECK(server.error().message.find(row.needle) != std::string::npos);
    CHECK(server.error().message.find("--allow-remote") == std::string::npos);
  }
}

TEST_CASE("server faults: a protocol version of 2^64-1 is quoted as sent") {
  RunningServer server;
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 10000);
  socket.connect(server.endpoint());
  Value request = core::make_request(1, Op::kHello);
  request["v"] = std::numeric_limits<std::uint64_t>::max();
  const std::string frame = core::encode_msgpack(request);
  socket.send(zmq::buffer(frame), zmq::send_flags::none);
  zmq::message_t reply;
  REQUIRE(socket.recv(reply).has_value());
  auto decoded = core::decode_msgpack(reply.to_string_view(), core::DecodeLimits{});
  REQUIRE(decoded.ok());
  CHECK((*decoded)["error"]["code"] == "unsupported_version");
  const std::string message = (*decoded)["error"]["message"];
  CHECK(message.find("18446744073709551615") != std::string::npos);
  CHECK(message.find("-1") == std::string::npos);
}
