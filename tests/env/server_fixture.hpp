// A real crucible server on a free loopback port, run on a thread, for integration tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>

#include "env/server.hpp"
#include "env/stages.hpp"
#include "tasks/registry.hpp"

namespace crucible::testing {

inline const tasks::Registry& shared_registry() {
  static const tasks::Registry registry = [] {
    auto loaded = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
    if (!loaded) throw std::runtime_error("registry: " + loaded.error().message);
    return std::move(loaded).value();
  }();
  return registry;
}

// The pipeline of a server without a GPU; `compile` starts real compile workers (slower to
// start, so only tests that compile ask for it).
inline env::Pipeline no_gpu_pipeline(bool compile = false) {
  env::PipelineOptions options;
  options.home = CRUCIBLE_SOURCE_DIR;
  options.gpus.reason = "no CUDA device on this server";
  options.compile = compile;
  options.compile_options.worker_exe = CRUCIBLE_BINARY_DIR "/bin/crucible-compile-worker";
  options.compile_options.workers = 1;
  return env::build_pipeline(options);
}

class RunningServer {
 public:
  explicit RunningServer(env::ServerOptions options = {},
                         env::Pipeline pipeline = no_gpu_pipeline()) {
    static int counter = 0;
    log_path_ =
        std::filesystem::temp_directory_path() /
        ("crucible-server-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)) /
        "trajectories.log";
    std::filesystem::remove_all(log_path_.parent_path());
    // The default endpoint becomes a free port; a test that names its own keeps it.
    if (options.bind == env::ServerOptions{}.bind) options.bind = "tcp://127.0.0.1:*";
    options.log_path = log_path_;
    options.log_sync = false;
    if (options.workers == 0) options.workers = 2;
    auto server = env::Server::create(options, shared_registry(), std::move(pipeline));
    if (!server) throw std::runtime_error("server: " + server.error().message);
    server_ = std::move(server).value();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~RunningServer() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }
  const std::string& endpoint() const { return server_->endpoint(); }
  const std::filesystem::path& log_path() const { return log_path_; }

 private:
  std::filesystem::path log_path_;
  std::unique_ptr<env::Server> server_;
  std::thread thread_;
};

}  // namespace crucible::testing
