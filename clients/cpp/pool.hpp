// A client over several crucible servers, the C++ twin of the Python client's Pool: `score`
// (and the other stateless ops) goes to the least-loaded server that is up and is retried on
// another if that one is lost; an episode stays on the server that opened it, its id carrying
// the server's index ("s<index>/<server's id>"). Not thread-safe, like Client.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "clients/cpp/client.hpp"

namespace crucible::clients {

struct PoolOptions {
  ClientOptions client;  // every server's client; `endpoint` is replaced by each endpoint
  // How stale a server's load (its `stats`) may be before it is asked again, and how long a
  // lost server waits before it is tried again.
  std::chrono::milliseconds refresh{2000};
};

// What the pool knows of one server.
struct PoolServer {
  std::string endpoint;
  bool up = true;
  double load = 0;         // the server's inflight plus its pools' queue depths, last seen
  std::string last_error;  // why it was marked down, if it was
};

class Pool {
 public:
  // Connects a client to each endpoint (ZeroMQ connects lazily: nothing is sent yet).
  static core::Result<Pool> connect(const std::vector<std::string>& endpoints,
                                    PoolOptions options = {});

  // Any op. hello, tasks, task, stats and score go to the least-loaded server that is up and
  // move on to the next when the chosen one is lost (a timeout or a transport error, not an
  // error reply); reset does too and prefixes the episode id; step and close go to the
  // episode's server and, when it is lost, fail with kIo naming it ("server lost"; never retried:
  // a step is not idempotent). An id without this pool's prefix is kUnknownEpisode.
  core::Result<core::Value> call(core::Op op, core::Value fields = core::Value::object());

  core::Result<core::Value> score(const std::string& task, const std::string& source);
  core::Result<core::Value> reset(const std::string& task);
  core::Result<core::Value> step(const std::string& episode, const std::string& source);
  core::Result<core::Value> close(const std::string& episode);

  const std::vector<PoolServer>& servers() const { return servers_; }

 private:
  explicit Pool(PoolOptions options) : options_(std::move(options)) {}
  core::Result<core::Value> call_any(core::Op op, const core::Value& fields);
  core::Result<core::Value> call_episode(core::Op op, core::Value fields);
  void refresh(std::size_t index);
  void mark_down(std::size_t index, const core::Error& error);

  PoolOptions options_;
  std::vector<Client> clients_;
  std::vector<PoolServer> servers_;
  std::vector<std::chrono::steady_clock::time_point> checked_;
  std::size_t next_ = 0;  // round-robin among equally loaded servers
};

}  // namespace crucible::clients
