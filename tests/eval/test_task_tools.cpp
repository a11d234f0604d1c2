// `crucible tasks new` and `crucible tasks check`: a new task is one folder plus one reference
// file, valid from the start, and every shipped task passes the checks this machine can run.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/eval/eval_test_support.hpp"

namespace fs = std::filesystem;
using crucible::testing::run_command;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A scratch home holding a copy of the repository's tasks/ and kernels/.
struct ScratchHome {
  fs::path root;
  ScratchHome() {
    root = fs::temp_directory_path() / ("crucible-task-tools-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    fs::copy(fs::path(CRUCIBLE_SOURCE_DIR) / "tasks", root / "tasks", fs::copy_options::recursive);
    fs::copy(fs::path(CRUCIBLE_SOURCE_DIR) / "kernels", root / "kernels",
             fs::copy_options::recursive);
  }
  ~ScratchHome() { fs::remove_all(root); }
  std::string cli(const std::string& args) const {
    return std::string(CRUCIBLE_EXE) + " --home '" + root.string() + "' " + args;
  }
};

}  // namespace

TEST_CASE("tasks new: a new task is one folder plus one reference, with ids replaced") {
  ScratchHome home;
  std::string output;
  REQUIRE(run_command(home.cli("tasks new world/scaled_copy"), &output) == 0);
  CAPTURE(output);
  const fs::path folder = home.root / "tasks/world/scaled_copy";
  for (const char* file : {"task.toml", "oracle.cpp", "test_oracle.cpp", "solution.cu"}) {
    CHECK_MESSAGE(fs::is_regular_file(folder / file), file);
  }
  const fs::path reference = home.root / "kernels/world/scaled_copy.cu";
  REQUIRE(fs::is_regular_file(reference));
  const std::string manifest = read(folder / "task.toml");
  CHECK(manifest.find("id = \"world/scaled_copy\"") != std::string::npos);
  CHECK(manifest.find("category = \"world\"") != std::string::npos);
  CHECK(manifest.find("source = \"kernels/world/scaled_copy.cu\"") != std::string::npos);
  CHECK(manifest.find("llm/rms_norm") == std::string::npos);
  CHECK(read(folder / "oracle.cpp").find("CRUCIBLE_ORACLE(\"world/scaled_copy\"") !=
        std::string::npos);

  // Every check that does not need the new oracle compiled in passes on the copy at once; the
  // oracle is linked into the next build (the folders are found by glob).
  REQUIRE(run_command(home.cli("tasks check world/scaled_copy"), &output) == 1);
  CAPTURE(output);
  CHECK(output.find("ok    reference plan on") != std::string::npos);
  CHECK(output.find("ok    solution compiles with NVRTC") != std::string::npos);
  CHECK(output.find("FAIL  float64 oracle: no oracle registered for world/scaled_copy") !=
        std::string::npos);
  std::size_t failures = 0;
  for (std::size_t at = 0; (at = output.find("FAIL", at)) != std::string::npos; ++at) ++failures;
  CHECK(failures == 1);
}

TEST_CASE(
    "tasks new: an existing id, an unknown category or template, a malformed id are refused") {
  ScratchHome home;
  const struct {
    std::string args;
    std::string message;
  } rows[] = {
      {"tasks new llm/rms_norm", "it exists already"},
      {"tasks new vision/thing", "unknown category 'vision'"},
      {"tasks new llm/Thing", "an id is <category>/<name>"},
      {"tasks new llm/a/b", "an id is <category>/<name>"},
      {"tasks new world/x --from llm/nope", "no task 'llm/nope' to copy"},
  };
  for (const auto& row : rows) {
    std::string output;
    CAPTURE(row.args);
    CHECK(run_command(home.cli(row.args), &output) == 2);
    CHECK_MESSAGE(output.find(row.message) != std::string::npos, output);
  }
  CHECK_FALSE(fs::exists(home.root / "tasks/world/x"));
}

TEST_CASE("tasks list --json, --version, and a mistyped task id answered with the close ones") {
  const std::string cli = std::string(CRUCIBLE_EXE) + " --home '" CRUCIBLE_SOURCE_DIR "' ";
  std::string output;
  REQUIRE(run_command(cli + "tasks list --json", &output) == 0);
  const auto list = nlohmann::json::parse(output);
  REQUIRE(list.is_array());
  bool found = false;
  for (const auto& task : list) {
    CHECK(task["visible_cases"].get<int>() > 0);
    if (task["id"] == "llm/rms_norm") found = task["category"] == "llm";
  }
  CHECK(found);
  REQUIRE(run_command(std::string(CRUCIBLE_EXE) + " --version", &output) == 0);
  CHECK(output.rfind("crucible ", 0) == 0);
  CHECK(run_command(cli + "tasks show llm/rms_nrom", &output) == 2);
  CHECK(output.find("did you mean llm/rms_norm?") != std::string::npos);
  CHECK(run_command(cli + "tasks check silu_and_mul", &output) == 2);
  CHECK(output.find("did you mean llm/silu_and_mul?") != std::string::npos);
  CHECK(run_command(cli + "tasks show zzz/qqqqqqqq", &output) == 2);
  CHECK(output.find("did you mean") == std::string::npos);
}

TEST_CASE("tasks check: every shipped task passes what can be checked without a GPU") {
  std::string output;
  const int code = run_command(
      std::string(CRUCIBLE_EXE) + " --home '" CRUCIBLE_SOURCE_DIR "' tasks check --all", &output);
  CAPTURE(output);
  CHECK(code == 0);
  CHECK(output.find("FAIL") == std::string::npos);
  CHECK(output.find("ok    float64 oracle on case") != std::string::npos);
}

TEST_CASE("tasks check: a broken task fails with the line that broke") {
  ScratchHome home;
  std::string output;
  REQUIRE(run_command(home.cli("tasks new llm/broken_copy"), &output) == 0);
  // A solution whose launch names a kernel it never defines: the plan parses, NVRTC refuses.
  std::ofstream(home.root / "tasks/llm/broken_copy/solution.cu")
      << "// @launch missing_kernel<<<num_tokens, 256>>>(out, input, weight, epsilon, "
         "hidden_size)\n";
  CHECK(run_command(home.cli("tasks check llm/broken_copy"), &output) == 1);
  CAPTURE(output);
  CHECK(output.find("FAIL  solution compiles with NVRTC") != std::string::npos);
  CHECK(output.find("ok    solution plan on") != std::string::npos);

  // A parity module that lost the function its table names.
  std::ofstream(home.root / "tasks/llm/broken_copy/parity.py") << "def other(torch, t, s, sym):\n"
                                                                  "    pass\n";
  CHECK(run_command(home.cli("tasks check llm/broken_copy"), &output) == 1);
  CHECK(output.find("FAIL  parity anchors: parity.py defines no function 'rms_norm'") !=
        std::string::npos);
  CHECK(output.find("0 of 1 tasks passed") != std::string::npos);
}
