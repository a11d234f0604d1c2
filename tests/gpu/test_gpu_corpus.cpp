// GPU suite: a real server (compile workers + GPU runner) scores a corpus of llm/rms_norm kernels,
// each of which must end with its expected status; after every crash or hang the next step on
// the same server must succeed. Without a CUDA device the suite reports itself skipped (exit 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

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

TEST_CASE("gpu corpus: every rms_norm kernel ends with its expected status") {
  testing::RunningServer server({}, gpu_pipeline());
  auto client = connect(server);
  const auto hello = client.hello();
  REQUIRE(hello.ok());
  REQUIRE((*hello)["stages"]["gpu"] == true);
  const auto correct = read_file(CRUCIBLE_SOURCE_DIR "/tests/gpu/kernels/correct.cu");

  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(CRUCIBLE_SOURCE_DIR "/tests/gpu/kernels")) {
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    const std::string source = read_file(path);
    const std::string want = expected_status(source);
    REQUIRE_FALSE(want.empty());
    const auto started = std::chrono::steady_clock::now();
    const Value result = score(client, source);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    CAPTURE(name);
    CAPTURE(result.dump());
    CHECK(result["status"] == want);
    std::printf("%-28s %-15s %6.2f s  reward %+.3f  %s\n", name.c_str(),
                result["status"].get<std::string>().c_str(), seconds,
                result["reward"]["total"].get<double>(),
                result["message"].get<std::string>().substr(0, 100).c_str());
    if (want == "ok") {
      CHECK(result["speedup"].get<double>() > 0.0);
      CHECK(result["reward"]["total"].get<double>() > 0.0);
    } else {
      CHECK(result["reward"]["total"].get<double>() <= 0.0);
    }
    if (want == "runtime_error" || want == "timeout") {
      // The runner was replaced: the very next step on the same server must be served.
      const auto recovery_started = std::chrono::steady_clock::now();
      const Value next = score(client, correct);
      const double recovery =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - recovery_started).count();
      CHECK(next["status"] == "ok");
      std::printf("%-28s %-15s %6.2f s  (next step after %s)\n", "  correct.cu",
                  next["status"].get<std::string>().c_str(), recovery, name.c_str());
    }
  }
}

TEST_CASE("gpu corpus: the reference scored against itself has a speedup near 1") {
  testing::RunningServer server({}, gpu_pipeline());
  auto client = connect(server);
  const auto reference = read_file(CRUCIBLE_SOURCE_DIR "/kernels/llm/rms_norm.cu");
  const Value result = score(client, reference);
  CAPTURE(result.dump());
  REQUIRE(result["status"] == "ok");
  CHECK(result["speedup"].get<double>() > 0.9);
  CHECK(result["speedup"].get<double>() < 1.1);
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
