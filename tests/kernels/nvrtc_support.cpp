// NVRTC compilation and launch-directive scanning for the kernel test suites.
#include "tests/kernels/nvrtc_support.hpp"

#include <elf.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/text_file.hpp"
#include "sandbox/compile_job.hpp"

namespace crucible::kernels_test {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  auto text = core::read_text_file(path);
  return text ? std::move(text).value() : std::string();
}

std::vector<std::string> launched_kernels(const std::string& source) {
  std::vector<std::string> names;
  std::vector<std::string> lines;
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string line = lines[i];
    const auto at = line.find("@launch");
    if (at == std::string::npos) continue;
    // A directive may continue on the comment lines after it until its '<<<'.
    for (std::size_t next = i + 1; line.find("<<<", at) == std::string::npos && next < lines.size();
         ++next) {
      const auto text = lines[next].find_first_not_of(' ');
      if (text == std::string::npos || lines[next].compare(text, 2, "//") != 0) break;
      if (lines[next].find('@', text) != std::string::npos) break;
      line += ' ' + lines[next].substr(text + 2);
    }
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

namespace {

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

}  // namespace

Compiled compile(const std::string& source, const std::string& name,
                 const std::vector<std::string>& kernels) {
  std::vector<std::string> options = include_options();
  options.push_back(std::string("--gpu-architecture=") + CRUCIBLE_TEST_ARCH);
  options.push_back("--std=c++17");
  options.push_back(std::string("--pre-include=") + kPreludeName);
  return compile_with_options(source, name, options, kernels);
}

Compiled compile_with_options(const std::string& source, const std::string& name,
                              const std::vector<std::string>& options,
                              const std::vector<std::string>& kernels) {
  Compiled out;
  nvrtcProgram program = nullptr;
  // The compile worker's prelude is available as a header under kPreludeName; compile() pre-
  // includes it, as the worker does.
  const char* header_sources[] = {sandbox::compile_prelude().c_str()};
  const char* header_names[] = {kPreludeName};
  if (nvrtcCreateProgram(&program, source.c_str(), name.c_str(), 1, header_sources, header_names) !=
      NVRTC_SUCCESS) {
    out.log = "nvrtcCreateProgram failed";
    return out;
  }
  for (const auto& kernel : kernels) {
    nvrtcAddNameExpression(program, kernel.c_str());
  }
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

namespace {

// Reads a T at `offset` of `bytes`; false when it does not fit.
template <typename T>
bool read_at(const std::string& bytes, std::uint64_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));
  return true;
}

}  // namespace

std::vector<std::string> defined_functions(const std::string& cubin) {
  std::vector<std::string> names;
  Elf64_Ehdr header{};
  if (!read_at(cubin, 0, header) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr)) {
    return names;
  }
  for (std::uint64_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr symbols{};
    if (!read_at(cubin, header.e_shoff + i * sizeof(Elf64_Shdr), symbols)) return {};
    if (symbols.sh_type != SHT_SYMTAB || symbols.sh_entsize != sizeof(Elf64_Sym)) continue;
    Elf64_Shdr strings{};
    if (!read_at(cubin, header.e_shoff + symbols.sh_link * sizeof(Elf64_Shdr), strings)) return {};
    for (std::uint64_t at = 0; at + sizeof(Elf64_Sym) <= symbols.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym symbol{};
      if (!read_at(cubin, symbols.sh_offset + at, symbol)) return {};
      if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC || symbol.st_shndx == SHN_UNDEF) continue;
      const std::uint64_t name_at = strings.sh_offset + symbol.st_name;
      if (symbol.st_name >= strings.sh_size || name_at >= cubin.size()) return {};
      const std::size_t limit =
          std::min<std::uint64_t>(strings.sh_size - symbol.st_name, cubin.size() - name_at);
      const char* name = cubin.data() + name_at;
      names.emplace_back(name, strnlen(name, limit));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<fs::path> cuda_files_under(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().extension() == ".cu") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace crucible::kernels_test
