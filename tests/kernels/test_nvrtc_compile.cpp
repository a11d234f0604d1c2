// Every reference kernel and example solution compiles with NVRTC and defines its launched kernels.
#include <doctest/doctest.h>

#include <nvrtc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/reference.hpp"

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The kernel name expressions of every `// @launch` directive: the text between the optional
// `if (...)` guard and `<<<`, e.g. "rms_norm_kernel" or "gemm<float, 128>". The full directive
// grammar belongs to sandbox/; this is just enough to know which kernels must exist.
std::vector<std::string> launched_kernels(const std::string& source) {
  std::vector<std::string> names;
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("@launch");
    if (at == std::string::npos) continue;
    std::size_t pos = at + 7;
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (line.compare(pos, 2, "if") == 0) {
      int depth = 0;
      pos = line.find('(', pos);
      for (; pos < line.size(); ++pos) {
        if (line[pos] == '(') ++depth;
        if (line[pos] == ')' && --depth == 0) break;
      }
      ++pos;
    }
    const auto end = line.find("<<<", pos);
    if (end == std::string::npos) continue;
    std::string name = line.substr(pos, end - pos);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    names.push_back(name);
  }
  return names;
}

std::vector<std::string> include_options() {
  std::vector<std::string> options;
  std::string dirs = CRUCIBLE_CUDA_INCLUDE_DIRS;
  std::istringstream in(dirs);
  for (std::string dir; std::getline(in, dir, ';');) {
    if (dir.empty()) continue;
    options.push_back("-I" + dir);
    std::error_code ec;
    if (fs::is_directory(fs::path(dir) / "cccl", ec)) options.push_back("-I" + dir + "/cccl");
  }
  return options;
}

struct Compiled {
  bool ok = false;
  std::string log;
  std::string cubin;
  std::vector<std::string> lowered;
};

Compiled compile(const std::string& source, const std::string& name,
                 const std::vector<std::string>& kernels) {
  Compiled out;
  nvrtcProgram program = nullptr;
  REQUIRE(nvrtcCreateProgram(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr) ==
          NVRTC_SUCCESS);
  for (const auto& kernel : kernels) {
    REQUIRE(nvrtcAddNameExpression(program, kernel.c_str()) == NVRTC_SUCCESS);
  }
  std::vector<std::string> options = include_options();
  options.push_back(std::string("--gpu-architecture=") + CRUCIBLE_TEST_ARCH);
  options.push_back("--std=c++17");
  std::vector<const char*> argv;
  for (const auto& option : options) argv.push_back(option.c_str());
  const nvrtcResult result =
      nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  out.log.resize(log_size);
  if (log_size > 0) nvrtcGetProgramLog(program, out.log.data());
  if (result == NVRTC_SUCCESS) {
    std::size_t cubin_size = 0;
    if (nvrtcGetCUBINSize(program, &cubin_size) == NVRTC_SUCCESS && cubin_size > 0) {
      out.cubin.resize(cubin_size);
      nvrtcGetCUBIN(program, out.cubin.data());
    }
    for (const auto& kernel : kernels) {
      const char* lowered = nullptr;
      if (nvrtcGetLoweredName(program, kernel.c_str(), &lowered) == NVRTC_SUCCESS && lowered) {
        out.lowered.emplace_back(lowered);
      }
    }
    out.ok = true;
  }
  nvrtcDestroyProgram(&program);
  return out;
}

void check_compiles(const fs::path& path) {
  CAPTURE(path.string());
  const std::string source = read_text(path);
  const auto kernels = launched_kernels(source);
  CHECK_MESSAGE(!kernels.empty(), "no // @launch directive");
  const Compiled compiled = compile(source, path.filename().string(), kernels);
  INFO("NVRTC log:\n" << compiled.log);
  REQUIRE(compiled.ok);
  CHECK_FALSE(compiled.cubin.empty());
  REQUIRE(compiled.lowered.size() == kernels.size());
  for (const auto& lowered : compiled.lowered) {
    CAPTURE(lowered);
    // The symbol table of the cubin names every kernel the directives launch.
    CHECK(compiled.cubin.find(lowered + '\0') != std::string::npos);
  }
}

std::vector<fs::path> cuda_files_under(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().extension() == ".cu") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("nvrtc: the launch-directive scan finds names, guarded launches and templates") {
  const auto names = launched_kernels(
      "// @launch a<<<n, 256>>>(x)\n"
      "//   @launch if (n > 4096) big<float, 4><<<dim3(cdiv(n, 4), 1, 1), 512, 49152>>>(x)\n"
      "// no directive here <<<1, 1>>>\n");
  CHECK(names == std::vector<std::string>{"a", "big<float, 4>"});
}

TEST_CASE("nvrtc: every reference kernel compiles and defines the kernels it launches") {
  const auto references = crucible::kernels::list_references(CRUCIBLE_SOURCE_DIR);
  REQUIRE(references.ok());
  REQUIRE_FALSE(references->empty());
  for (const auto& relative : *references) check_compiles(fs::path(CRUCIBLE_SOURCE_DIR) / relative);
}

TEST_CASE("nvrtc: every example solution compiles and defines the kernels it launches") {
  const auto files = cuda_files_under(fs::path(CRUCIBLE_SOURCE_DIR) / "examples" / "solutions");
  REQUIRE_FALSE(files.empty());
  for (const auto& path : files) check_compiles(path);
}

TEST_CASE("nvrtc: a source with an error fails to compile with a log, so the checks can fail") {
  const Compiled compiled =
      compile("extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n", "bad.cu",
              {"k"});
  CHECK_FALSE(compiled.ok);
  CHECK(compiled.log.find("undefined_name") != std::string::npos);
}
