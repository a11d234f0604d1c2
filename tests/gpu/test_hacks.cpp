// Hack suite on the GPU: a real server scores every reward-hacking kernel in examples/hacks/; each
// must end with the status its first line expects and a reward <= 0. Prints the table
// hack -> status -> reward. Without a CUDA device the suite reports itself skipped (exit 77).
// CRUCIBLE_HACKS=a,b limits the run to those files (by name without .cu).
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdlib>
#include <set>
#include <string_view>

#include "tasks/registry.hpp"
#include "tests/gpu/gpu_suite.hpp"

using namespace crucible;
using namespace crucible::testing;
using core::Value;

TEST_CASE("hack suite: every hack is caught with its expected status and earns no reward") {
  RunningServer server({}, gpu_pipeline());
  auto client = connect(server);
  const auto correct = read_file(CRUCIBLE_SOURCE_DIR "/tests/gpu/kernels/correct.cu");

  const auto registry = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
  REQUIRE(registry.ok());
  auto files = kernel_files(CRUCIBLE_SOURCE_DIR "/examples/hacks");
  // CRUCIBLE_HACKS=name,name runs only those hacks (a short GPU run of new ones); every one
  // named must exist.
  if (const char* only = std::getenv("CRUCIBLE_HACKS")) {
    std::set<std::string> wanted;
    for (std::string_view rest = only; !rest.empty();) {
      const auto comma = rest.find(',');
      wanted.insert(std::string(rest.substr(0, comma)));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    std::erase_if(files, [&](const auto& path) { return !wanted.contains(path.stem().string()); });
    REQUIRE(files.size() == wanted.size());
  } else {
    REQUIRE(files.size() >= 20);
  }
  std::printf("%-28s %-24s %-15s %-15s %8s  %s\n", "hack", "task", "expected", "status", "reward",
              "message");
  int caught = 0;
  for (const auto& path : files) {
    const std::string name = path.stem().string();
    const std::string source = read_file(path);
    const std::string want = expected_status(source);
    REQUIRE_FALSE(want.empty());
    const std::string task = hack_task(source);
    const Value result = score(client, source, task);
    const std::string status = result["status"].get<std::string>();
    const double reward = result["reward"]["total"].get<double>();
    CAPTURE(name);
    CAPTURE(result.dump());
    CHECK(status == want);
    CHECK(status != "ok");
    CHECK(reward <= 0.0);
    // Whatever failed, nothing in the reply names a hidden case or gives its shape.
    const std::string reply = result.dump();
    for (const auto& c : registry->find(task)->cases) {
      if (!c.hidden) continue;
      CAPTURE(c.name);
      CHECK(reply.find("\"" + c.name + "\"") == std::string::npos);
      CHECK(reply.find(" " + c.name + " ") == std::string::npos);
    }
    if (status == want && reward <= 0.0) ++caught;
    std::printf("%-28s %-24s %-15s %-15s %+8.3f  %s\n", name.c_str(), task.c_str(), want.c_str(),
                status.c_str(), reward, result["message"].get<std::string>().substr(0, 90).c_str());
    if (status == "runtime_error" || status == "timeout") {
      // The runner was replaced: the next step on the same server must be served.
      const Value next = score(client, correct);
      CHECK(next["status"] == "ok");
    }
  }
  std::printf("caught %d of %zu hacks\n", caught, files.size());
}

int main(int argc, char** argv) { return crucible::testing::gpu_suite_main(argc, argv); }
