// The HTTP/JSON front: OpenEnv-style endpoints served by the server process over its own socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/protocol.hpp"
#include "core/result.hpp"
#include "env/server.hpp"

namespace crucible::env {

// Where the front listens: a host (IPv4 address, `localhost`, or an IPv6 address without its
// brackets) and a TCP port (0: the system picks one).
struct HttpAddress {
  std::string host;
  std::uint16_t port = 0;
};

// Parses HOST:PORT (`127.0.0.1:8080`, `localhost:8080`, `[::1]:8080`, `0.0.0.0:8080`); PORT is
// 0-65535, and `localhost` becomes 127.0.0.1 (the server binds addresses, not names). A host
// that is not loopback needs allow_remote (the caller's judgement: a token and TLS, or
// --insecure). Errors: kInvalidArgument,
// saying what is wrong.
core::Result<HttpAddress> parse_http_address(std::string_view text, bool allow_remote);

struct HttpFrontOptions {
  HttpAddress address{"127.0.0.1", 8080};
  // The server's limits (ServerOptions::limits): a body over max_frame_bytes is refused with 413
  // before it is read, and every request becomes one frame checked against them.
  core::ProtocolLimits limits;
  // Threads answering HTTP requests. A step holds one for as long as it runs (seconds); at most
  // threads - 4 steps and scores wait at once (more are answered `busy`), so that /healthz and
  // /metrics always find a thread. /score runs a whole batch from one thread.
  int threads = 32;
  // For GET /state: episodes the front saw opened are forgotten after this much idleness, like
  // the server's --idle-timeout, and at most max_episodes are remembered (the least recently
  // used go first).
  std::chrono::seconds episode_idle_timeout{1800};
  std::size_t max_episodes = 100000;
  // Non-empty: every request but GET /healthz must carry `Authorization: Bearer <token>`;
  // others are answered 401 (core::read_token_file reads the file `serve --http-token-file`
  // names).
  std::string token;
  // Both set: HTTPS with this certificate chain and private key (PEM files). start() fails
  // with kInvalidArgument when they cannot be loaded or this build has no TLS.
  std::filesystem::path tls_cert;
  std::filesystem::path tls_key;
};

// Whether this build's HTTP front can serve HTTPS (cpp-httplib built with OpenSSL).
bool http_front_has_tls();

// Serves HTTP on its own threads and turns each request into an ordinary protocol request (a
// msgpack map) sent to the server's ROUTER through Server::inproc_endpoint(); the wire reply
// becomes a JSON body and an HTTP status (docs/protocol.md, "HTTP front"). The server's loop must
// run (Server::run) for requests to be answered. Thread safety: start, stop and the destructor
// from one thread; the front's own threads do the rest.
class HttpFront {
 public:
  // Binds and starts listening. The server must outlive the front (destroy or stop the front
  // first: its sockets live in the server's ZeroMQ context). Errors: kInvalidArgument (a
  // non-loopback address without allow_remote was given to parse_http_address; the address is
  // taken as given here), kIo (the port cannot be bound).
  static core::Result<std::unique_ptr<HttpFront>> start(HttpFrontOptions options, Server& server);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // The port actually bound (a port of 0 is resolved), and "http://HOST:PORT" (https with TLS).
  std::uint16_t port() const;
  std::string url() const;

  // Stops accepting connections; requests still waiting for the server are answered 503
  // `shutting_down`. Returns when the front's threads have finished. Idempotent.
  void stop();

  class Impl;

 private:
  explicit HttpFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The HTTP status a wire error code is answered with: bad_request, unsupported_version,
// unknown_op and invalid_argument 400; too_large 413; unknown_task and unknown_episode 404;
// episode_done 409; busy and shutting_down 503 (with Retry-After); timeout 504; internal and
// io 500.
int http_status_of(core::ErrorCode code);

}  // namespace crucible::env
