// Hack suite on the GPU: a real server scores every reward-hacking kernel in examples/hacks/; each
// must end with the status its first line expects and a reward <= 0. Prints the table
// hack -> status -> reward. Without a CUDA device the suite reports itself skipped (exit 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "clients/cpp/client.hpp"
#include "sandbox/gpu_probe.hpp"
#include "tests/env/server_fixture.hpp"

using namespace crucible;
using core::Value;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "// expect: STATUS" on the first line of each corpus file.
std::string expected_status(const std::string& source) {
  const std::string marker = "// expect: ";
  const auto start = source.find(marker);
  if (start == std::string::npos) return "";
  const auto end = source.find('\n', start);
  return source.substr(start + marker.size(), end - start - marker.size());
}

env::Pipeline gpu_pipeline() {
  env::PipelineOptions options;
  options.home = CRUCIBLE_SOURCE_DIR;
  options.gpus = sandbox::probe_gpus();
  options.compile_options.worker_exe = CRUCIBLE_BINARY_DIR "/bin/crucible-compile-worker";
  options.compile_options.workers = 2;
  options.runner_options.runner_exe = CRUCIBLE_BINARY_DIR "/bin/crucible-gpu-runner";
  // Short timing keeps the suite quick; the benchmarks use the defaults.
  options.gpu_options.timing.time_cap_ms = 400;
  options.gpu_options.timing.min_samples = 10;
  options.gpu_options.timing.max_samples = 200;
  options.gpu_options.kernel_timeout_ms = 2000;
  std::string notes;
  auto pipeline = env::build_pipeline(options, &notes);
  if (!notes.empty()) std::fprintf(stderr, "%s", notes.c_str());
  return pipeline;
}

clients::Client connect(const testing::RunningServer& server) {
  clients::ClientOptions options;
  options.endpoint = server.endpoint();
  options.timeout = std::chrono::milliseconds(300000);
  auto client = clients::Client::connect(options);
  REQUIRE(client.ok());
  return std::move(client).value();
}

Value score(clients::Client& client, const std::string& source) {
  auto reply = client.score("llm/rms_norm", source, nullptr, 1234);
  REQUIRE(reply.ok());
  return (*reply)["result"];
}

}  // namespace

TEST_CASE("hack suite: every hack is caught with its expected status and earns no reward") {
  testing::RunningServer server({}, gpu_pipeline());
  auto client = connect(server);
  const auto hello = client.hello();
  REQUIRE(hello.ok());
  REQUIRE((*hello)["stages"]["gpu"] == true);
  const auto correct = read_file(CRUCIBLE_SOURCE_DIR "/tests/gpu/kernels/correct.cu");

  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(CRUCIBLE_SOURCE_DIR "/examples/hacks")) {
    if (entry.path().extension() == ".cu") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 20);
  std::printf("%-28s %-15s %-15s %8s  %s\n", "hack", "expected", "status", "reward", "message");
  int caught = 0;
  for (const auto& path : files) {
    const std::string name = path.stem().string();
    const std::string source = read_file(path);
    const std::string want = expected_status(source);
    REQUIRE_FALSE(want.empty());
    const Value result = score(client, source);
    const std::string status = result["status"].get<std::string>();
    const double reward = result["reward"]["total"].get<double>();
    CAPTURE(name);
    CAPTURE(result.dump());
    CHECK(status == want);
    CHECK(status != "ok");
    CHECK(reward <= 0.0);
    if (status == want && reward <= 0.0) ++caught;
    std::printf("%-28s %-15s %-15s %+8.3f  %s\n", name.c_str(), want.c_str(), status.c_str(),
                reward, result["message"].get<std::string>().substr(0, 90).c_str());
    if (status == "runtime_error" || status == "timeout") {
      // The runner was replaced: the next step on the same server must be served.
      const Value next = score(client, correct);
      CHECK(next["status"] == "ok");
    }
  }
  std::printf("caught %d of %zu hacks\n", caught, files.size());
}

int main(int argc, char** argv) {
  const auto probe = sandbox::probe_gpus();
  if (probe.gpus.empty()) {
    std::printf("SKIPPED: the GPU suite needs a CUDA device: %s\n", probe.reason.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
