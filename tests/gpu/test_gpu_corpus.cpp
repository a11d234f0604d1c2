// GPU suite: a real server (compile workers + GPU runner) scores a corpus of llm/rms_norm kernels,
// each of which must end with its expected status, and after every crash or hang the next step
// on the same server must succeed; then every task is served end to end (its reference and its
// example solution). Without a CUDA device the suite reports itself skipped (exit 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include "tasks/registry.hpp"
#include "tests/gpu/gpu_suite.hpp"

using namespace crucible;
using namespace crucible::testing;
using core::Value;

TEST_CASE("gpu corpus: every rms_norm kernel ends with its expected status") {
  RunningServer server({}, gpu_pipeline());
  auto client = connect(server);
  const auto correct = read_file(CRUCIBLE_SOURCE_DIR "/tests/gpu/kernels/correct.cu");

  for (const auto& path : kernel_files(CRUCIBLE_SOURCE_DIR "/tests/gpu/kernels")) {
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
          std::chrono::duration<double>(std::chrono::steady_clock::now() - recovery_started)
              .count();
      CHECK(next["status"] == "ok");
      std::printf("%-28s %-15s %6.2f s  (next step after %s)\n", "  correct.cu",
                  next["status"].get<std::string>().c_str(), recovery, name.c_str());
    }
  }
}

TEST_CASE(
    "gpu tasks: every task is served end to end; its reference scored against itself is "
    "correct with a speedup near 1 (a library-backed task's starting point is correct against "
    "the library), and its example solution is correct") {
  RunningServer server({}, gpu_pipeline());
  auto client = connect(server);
  const tasks::Registry& registry = testing::shared_registry();
  for (const auto& task : registry.all()) {
    CAPTURE(task.id);
    const Value result = score(client, task.reference_source, task.id);
    CAPTURE(result.dump().substr(0, 2000));
    REQUIRE(result["status"] == "ok");
    if (task.reference_library.empty()) {
      CHECK(result["speedup"].get<double>() > 0.9);
      CHECK(result["speedup"].get<double>() < 1.1);
      std::printf("%-42s reference vs itself: speedup %.3f\n", task.id.c_str(),
                  result["speedup"].get<double>());
    } else {
      // The timed reference is the library; the source is the starting point, correct and
      // (being a plain kernel) no faster than the library overall. Each timed case names the
      // algorithm the library chose.
      CHECK(result["speedup"].get<double>() > 0.0);
      CHECK(result["speedup"].get<double>() < 1.1);
      for (const auto& timed : result["timing"]["cases"]) {
        CHECK(timed.contains("reference_library"));
        std::printf("%-42s %-22s %s, starting point speedup %.3f\n", task.id.c_str(),
                    timed["case"].get<std::string>().c_str(),
                    timed.value("reference_library", std::string("?")).c_str(),
                    timed["speedup"].get<double>());
      }
      std::printf("%-42s starting point vs %s: speedup %.3f\n", task.id.c_str(),
                  task.reference_library.c_str(), result["speedup"].get<double>());
    }
    const std::filesystem::path example = task.solution_path();
    REQUIRE_MESSAGE(std::filesystem::exists(example), "every task folder holds a solution.cu");
    const Value simple = score(client, read_file(example), task.id);
    CAPTURE(simple.dump().substr(0, 2000));
    CHECK(simple["status"] == "ok");
    std::printf("%-42s example solution: %s, speedup %.3f\n", task.id.c_str(),
                simple["status"].get<std::string>().c_str(), simple.value("speedup", 0.0));
  }
}

int main(int argc, char** argv) { return crucible::testing::gpu_suite_main(argc, argv); }
