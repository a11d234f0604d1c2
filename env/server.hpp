// The crucible server: ZeroMQ ROUTER front end, episodes, a worker pool running the pipeline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "core/curve_keys.hpp"
#include "core/protocol.hpp"
#include "core/result.hpp"
#include "core/value.hpp"
#include "env/pipeline.hpp"
#include "tasks/registry.hpp"

namespace zmq {
class context_t;
}

namespace crucible::env {

struct ServerOptions {
  // ZeroMQ endpoint. tcp on a loopback address, ipc:// or inproc:// are always allowed; any
  // other tcp address needs CurveZMQ keys (curve_keys and allowed_client_keys) or, on a closed
  // network, allow_remote (insecure: anyone who reaches the port is served).
  std::string bind = "tcp://127.0.0.1:5555";
  bool allow_remote = false;
  // CurveZMQ: with a key pair every tcp/ipc connection is encrypted and authenticated, and only
  // clients whose public key is in allowed_client_keys (Z85) are let in (a ZAP handler);
  // others get no reply. In-process fronts (inproc) are not affected.
  std::optional<core::CurveKeyPair> curve_keys;
  std::vector<std::string> allowed_client_keys;
  core::ProtocolLimits limits;
  std::filesystem::path log_path;  // trajectory log; required
  bool log_sync = true;            // fdatasync each record before its reply
  int workers = 0;                 // pipeline threads; 0 = one per core, at least 2
  std::size_t max_queued = 4096;   // step/score requests waiting for a worker before `busy`
  std::uint32_t default_max_steps = 8;
  std::chrono::seconds episode_idle_timeout{1800};
  std::size_t max_episodes = 100000;
  std::size_t max_options_bytes = 4096;        // a reset's `options` map, msgpack-encoded
  std::size_t max_episode_bytes = 256u << 20;  // what all open episodes together may hold
  std::chrono::seconds drain_timeout{30};      // on shutdown, how long in-flight work may finish
  std::string arch = "sm_90a";                 // compile target reported by hello
  core::Value gpus = core::Value::array();     // from runner::probe_gpus, reported by hello
};

class Server {
 public:
  // Binds the socket and opens the log. The registry must outlive the server. Errors: kIo
  // (bind or log failure), kInvalidArgument (non-loopback bind without allow_remote).
  static core::Result<std::unique_ptr<Server>> create(ServerOptions options,
                                                      const tasks::Registry& registry,
                                                      Pipeline pipeline);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The endpoint actually bound (a tcp port of 0 or * is resolved).
  const std::string& endpoint() const;
  // The ROUTER also binds this inproc:// endpoint, reachable only through context(): an
  // in-process front (env/http_front.hpp) connects DEALER sockets there and sends ordinary
  // protocol frames, so it gets the same limits and errors. Sockets made on context() must be
  // closed before the server is destroyed.
  const std::string& inproc_endpoint() const;
  zmq::context_t& context();
  // Serves until stop(); then stops accepting work (new requests get `shutting_down`), lets
  // in-flight work finish within drain_timeout, flushes the log and returns.
  void run();
  // Async-signal-safe and thread-safe: only sets a flag the loop polls.
  void stop();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True for tcp endpoints on 127.0.0.0/8, localhost or ::1, and for ipc:// and inproc://.
bool is_local_endpoint(std::string_view endpoint);

// Checks the shape of a bind endpoint (tcp://HOST:PORT with PORT 0-65535 or *, ipc://PATH,
// inproc://NAME) before ZeroMQ sees it. Errors: kInvalidArgument, saying what is wrong.
core::Status check_endpoint(std::string_view endpoint);

}  // namespace crucible::env
