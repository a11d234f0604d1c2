// C++ client for the crucible protocol: one DEALER socket, pipelined requests, typed helpers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/curve_keys.hpp"
#include "core/protocol.hpp"
#include "core/result.hpp"
#include "core/value.hpp"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace crucible::clients {

struct ClientOptions {
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::chrono::milliseconds timeout{120000};  // per request, from submit to reply
  std::size_t max_reply_bytes = 64u << 20;
  // A request tag (docs/protocol.md) sent with every reset and score, under the keys of a
  // tag the request carries itself; steps carry their episode's on the server.
  core::Value tag = nullptr;
  // CurveZMQ, for a server started with keys: its public key and this client's key pair (all
  // Z85; core/curve_keys.hpp reads them from the files `crucible keys new` writes). A server
  // that does not know this client's public key never answers.
  std::string curve_server_key;
  std::optional<core::CurveKeyPair> curve_keys;
};

class Client;

// A reply that may not have arrived yet. get() waits for it (driving the client's socket, so
// replies to other requests that arrive first are kept for their own futures).
class Future {
 public:
  Future() = default;
  std::uint64_t id() const { return id_; }
  // The reply map on success; on an error reply, its code and message; kTimeout when the
  // request's deadline passes; kIo when the socket fails. Call at most once.
  core::Result<core::Value> get();

 private:
  friend class Client;
  Future(Client* client, std::uint64_t id) : client_(client), id_(id) {}
  Client* client_ = nullptr;
  std::uint64_t id_ = 0;
};

// Not thread-safe, like the ZeroMQ socket it owns: use one Client per thread. Movable.
class Client {
 public:
  static core::Result<Client> connect(ClientOptions options);
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // Sends {v, id, op, ...fields} now and returns a future for the reply. Pipelining: submit
  // many, then get() them in any order.
  Future submit(core::Op op, core::Value fields = core::Value::object());
  // submit + get.
  core::Result<core::Value> call(core::Op op, core::Value fields = core::Value::object());

  core::Result<core::Value> hello();
  core::Result<core::Value> tasks(std::optional<std::string> category = std::nullopt);
  core::Result<core::Value> task(const std::string& id);
  core::Result<core::Value> reset(const std::string& task,
                                  std::optional<std::uint64_t> seed = std::nullopt,
                                  std::optional<std::uint32_t> max_steps = std::nullopt,
                                  core::Value reward = nullptr, core::Value options = nullptr);
  core::Result<core::Value> step(const std::string& episode, const std::string& source,
                                 core::Value plan = nullptr);
  core::Result<core::Value> score(const std::string& task, const std::string& source,
                                  core::Value plan = nullptr,
                                  std::optional<std::uint64_t> seed = std::nullopt);
  core::Result<core::Value> close(const std::string& episode);
  core::Result<core::Value> stats();

  const ClientOptions& options() const { return options_; }

 private:
  friend class Future;
  explicit Client(ClientOptions options);
  core::Result<core::Value> wait_for(std::uint64_t id);
  // Receives one reply, waiting at most `budget`; files it under its id. False on timeout.
  core::Status receive_one(std::chrono::milliseconds budget, bool* got);

  struct Pending {
    std::chrono::steady_clock::time_point deadline;
    std::optional<core::Result<core::Value>> reply;
  };
  ClientOptions options_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Pending> pending_;
};

}  // namespace crucible::clients
