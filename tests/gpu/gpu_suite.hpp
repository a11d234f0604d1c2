// Shared by the GPU suites: a server with the full pipeline, a client, and the `// expect:`
// convention of the kernel corpora. A suite's main() calls gpu_suite_main, which reports the
// suite skipped (exit 77) where there is no CUDA device.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "clients/cpp/client.hpp"
#include "core/text_file.hpp"
#include "runner/gpu_probe.hpp"
#include "tests/env/server_fixture.hpp"

namespace crucible::testing {

inline std::string read_file(const std::filesystem::path& path) {
  auto text = core::read_text_file(path);
  REQUIRE_MESSAGE(text.ok(), "cannot read " << path);
  return std::move(text).value();
}

// "// expect: STATUS" on the first line of each corpus file.
inline std::string expected_status(const std::string& source) {
  const std::string marker = "// expect: ";
  const auto start = source.find(marker);
  if (start == std::string::npos) return "";
  const auto end = source.find('\n', start);
  return source.substr(start + marker.size(), end - start - marker.size());
}

// "// task: ID" on the second line names the task a hack targets; without it, llm/rms_norm.
inline std::string hack_task(const std::string& source) {
  const std::string marker = "\n// task: ";
  const auto start = source.find(marker);
  if (start == std::string::npos || start != source.find('\n')) return "llm/rms_norm";
  const auto end = source.find('\n', start + 1);
  return source.substr(start + marker.size(), end - start - marker.size());
}

inline env::Pipeline gpu_pipeline() {
  env::PipelineOptions options;
  options.home = CRUCIBLE_SOURCE_DIR;
  options.gpus = runner::probe_gpus();
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

// A client of `server`, once the server says it has a GPU stage.
inline clients::Client connect(const RunningServer& server) {
  clients::ClientOptions options;
  options.endpoint = server.endpoint();
  options.timeout = std::chrono::milliseconds(300000);
  auto client = clients::Client::connect(options);
  REQUIRE(client.ok());
  const auto hello = client->hello();
  REQUIRE(hello.ok());
  REQUIRE((*hello)["stages"]["gpu"] == true);
  return std::move(client).value();
}

inline core::Value score(clients::Client& client, const std::string& source,
                         const std::string& task = "llm/rms_norm") {
  auto reply = client.score(task, source, nullptr, 1234);
  REQUIRE(reply.ok());
  return (*reply)["result"];
}

// The .cu files of a corpus folder, sorted.
inline std::vector<std::filesystem::path> kernel_files(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() == ".cu") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline int gpu_suite_main(int argc, char** argv) {
  const auto probe = runner::probe_gpus();
  if (probe.gpus.empty()) {
    std::printf("SKIPPED: the GPU suite needs a CUDA device: %s\n", probe.reason.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace crucible::testing
