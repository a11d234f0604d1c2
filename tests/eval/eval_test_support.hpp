// Shared bits of the eval tests: a hand-made results set, temp folders, running the CLI.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/text_file.hpp"
#include "core/value.hpp"

namespace crucible::testing {

inline core::Value sample_record(const std::string& id, const std::string& category,
                                 const std::string& status, double speedup = 0.0) {
  core::Value record{{"sample_id", id},
                     {"task", category + "/" + id},
                     {"category", category},
                     {"status", status},
                     {"message", status == "infra_error" ? "no CUDA device" : ""}};
  if (speedup > 0.0) record["speedup"] = speedup;
  return record;
}

// Six samples over two categories (numbers worked out by hand in test_metrics.cpp):
//   a: ok 2.0, b: ok 0.5, c: incorrect               (category "alpha")
//   d: infra_error, e: ok 4.0, f: compile_error      (category "beta")
inline std::vector<core::Value> hand_made_results() {
  return {sample_record("a", "alpha", "ok", 2.0),   sample_record("b", "alpha", "ok", 0.5),
          sample_record("c", "alpha", "incorrect"), sample_record("d", "beta", "infra_error"),
          sample_record("e", "beta", "ok", 4.0),    sample_record("f", "beta", "compile_error")};
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  static int counter = 0;
  const auto dir =
      std::filesystem::temp_directory_path() / ("crucible-eval-test-" + std::to_string(::getpid()) +
                                                "-" + std::to_string(counter++) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_file(const std::filesystem::path& path) {
  auto text = core::read_text_file(path);
  return text ? std::move(text).value() : std::string();
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
}

// Runs a shell command; its stdout and stderr land in `output`. Returns the exit status.
inline int run_command(const std::string& command, std::string* output) {
  const auto capture = fresh_dir("cmd") / "output.txt";
  const int raw = std::system((command + " > '" + capture.string() + "' 2>&1").c_str());
  if (output != nullptr) *output = read_file(capture);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

inline bool have_program(const std::string& name) {
  return run_command("command -v " + name, nullptr) == 0;
}

}  // namespace crucible::testing
