// NVRTC log sanitizing, ptxas verbose parsing and cubin .nv.info reading.
#include "sandbox/compile_log.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "core/text.hpp"

namespace crucible::sandbox {
namespace {

bool contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// First integer after `label` ... e.g. number_before(" bytes spill stores") in
// "0 bytes stack frame, 8 bytes spill stores": scans back from the label.
std::optional<int> number_before(std::string_view line, std::string_view label) {
  std::size_t at = line.find(label);
  if (at == std::string_view::npos) return std::nullopt;
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  if (begin == end) return std::nullopt;
  long long value = 0;
  for (std::size_t i = begin; i < end && value < (1ll << 40); ++i)
    value = value * 10 + (line[i] - '0');
  return static_cast<int>(std::min<long long>(value, 1ll << 30));
}

template <class T>
bool read_at(std::string_view bytes, std::uint64_t offset, T* out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(out, bytes.data() + offset, sizeof(T));
  return true;
}

}  // namespace

std::string sanitize_compile_log(
    std::string_view raw, const std::vector<std::pair<std::string, std::string>>& replacements,
    std::size_t max_bytes) {
  // Longest prefix first so a nested directory wins over its parent.
  auto ordered = replacements;
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::string kept;
  std::size_t start = 0;
  while (start < raw.size()) {
    std::size_t end = raw.find('\n', start);
    if (end == std::string_view::npos) end = raw.size();
    std::string_view line = raw.substr(start, end - start);
    start = end + 1;
    if (starts_with(line, "ptxas info") || starts_with(line, "ptxas         .") ||
        contains(line, "precompiled header") || contains(line, "PCH creation") ||
        contains(line, "PCH file")) {
      continue;
    }
    std::string text(line);
    for (const auto& [prefix, replacement] : ordered) {
      if (prefix.empty()) continue;
      std::size_t at = 0;
      while ((at = text.find(prefix, at)) != std::string::npos) {
        text.replace(at, prefix.size(), replacement);
        at += replacement.size();
      }
    }
    kept += text;
    kept += '\n';
  }
  // Trim trailing blank lines NVRTC leaves behind.
  while (kept.size() >= 2 && kept[kept.size() - 1] == '\n' && kept[kept.size() - 2] == '\n') {
    kept.pop_back();
  }
  if (kept == "\n") kept.clear();
  kept = core::to_valid_utf8(kept);
  if (kept.size() <= max_bytes) return kept;
  const std::string note_template = "[log truncated: 0000000000 more bytes]\n";
  std::size_t budget = max_bytes > note_template.size() ? max_bytes - note_template.size() : 0;
  std::size_t cut = kept.rfind('\n', budget);
  cut = (cut == std::string::npos || cut == 0) ? budget : cut + 1;
  // Do not split a UTF-8 sequence.
  while (cut > 0 && cut < kept.size() && (static_cast<unsigned char>(kept[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  const std::size_t dropped = kept.size() - cut;
  kept.resize(cut);
  if (!kept.empty() && kept.back() != '\n') kept += '\n';
  kept += "[log truncated: " + std::to_string(dropped) + " more bytes]\n";
  return kept;
}

std::map<std::string, KernelResources> parse_ptxas_info(std::string_view raw) {
  std::map<std::string, KernelResources> kernels;
  std::string current;         // entry whose figures follow
  bool in_properties = false;  // inside "Function properties for <current>"
  std::size_t start = 0;
  while (start < raw.size()) {
    std::size_t end = raw.find('\n', start);
    if (end == std::string_view::npos) end = raw.size();
    std::string_view line = raw.substr(start, end - start);
    start = end + 1;
    if (!starts_with(line, "ptxas")) continue;
    if (auto at = line.find("Compiling entry function '"); at != std::string_view::npos) {
      std::size_t name_begin = at + std::strlen("Compiling entry function '");
      std::size_t name_end = line.find('\'', name_begin);
      if (name_end == std::string_view::npos) continue;
      current = std::string(line.substr(name_begin, name_end - name_begin));
      kernels[current];
      in_properties = false;
      continue;
    }
    if (auto at = line.find("Function properties for "); at != std::string_view::npos) {
      std::string_view name = line.substr(at + std::strlen("Function properties for "));
      while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.remove_suffix(1);
      in_properties = !current.empty() && name == current;
      continue;
    }
    if (current.empty()) continue;
    KernelResources& resources = kernels[current];
    if (in_properties && contains(line, "bytes stack frame")) {
      resources.local_bytes = number_before(line, "bytes stack frame").value_or(0);
      resources.spill_store_bytes = number_before(line, "bytes spill stores").value_or(0);
      resources.spill_load_bytes = number_before(line, "bytes spill loads").value_or(0);
      continue;
    }
    if (contains(line, "Used ") && contains(line, " registers")) {
      resources.registers = number_before(line, "registers").value_or(0);
      resources.barriers = number_before(line, "barriers").value_or(0);
      resources.static_smem_bytes = number_before(line, "bytes smem").value_or(0);
      resources.constant_bytes = number_before(line, "bytes cmem[0]").value_or(0);
      in_properties = false;
    }
  }
  return kernels;
}

int max_threads_for_registers(int registers) {
  if (registers <= 0) return 1024;
  const int per_warp = ((registers * 32 + 255) / 256) * 256;
  const int warps = 65536 / per_warp;
  return std::min(1024, warps * 32);
}

void apply_cubin_attributes(std::string_view cubin,
                            std::map<std::string, KernelResources>* kernels) {
  constexpr std::uint8_t kFormatSized = 0x04;
  constexpr std::uint8_t kAttrMaxThreads = 0x05;
  std::map<std::string, int> launch_bounds;
  if (cubin.size() >= 64 &&
      cubin.substr(0, 4) == std::string_view("\x7f"
                                             "ELF",
                                             4) &&
      cubin[4] == 2 /* 64-bit */) {
    std::uint64_t section_offset = 0;
    std::uint16_t entry_size = 0, count = 0, names_index = 0;
    read_at(cubin, 0x28, &section_offset);
    read_at(cubin, 0x3A, &entry_size);
    read_at(cubin, 0x3C, &count);
    read_at(cubin, 0x3E, &names_index);
    auto header = [&](std::uint16_t index, std::uint32_t* name, std::uint64_t* offset,
                      std::uint64_t* size) {
      const std::uint64_t base = section_offset + std::uint64_t{index} * entry_size;
      return entry_size >= 64 && read_at(cubin, base, name) && read_at(cubin, base + 24, offset) &&
             read_at(cubin, base + 32, size) && *offset <= cubin.size() &&
             *size <= cubin.size() - *offset;
    };
    std::uint32_t names_name = 0;
    std::uint64_t names_offset = 0, names_size = 0;
    if (names_index < count && header(names_index, &names_name, &names_offset, &names_size)) {
      std::string_view names = cubin.substr(names_offset, names_size);
      for (std::uint16_t i = 0; i < count; ++i) {
        std::uint32_t name = 0;
        std::uint64_t offset = 0, size = 0;
        if (!header(i, &name, &offset, &size) || name >= names.size()) continue;
        std::string_view section_name = names.substr(name);
        section_name = section_name.substr(0, section_name.find('\0'));
        constexpr std::string_view kInfoPrefix = ".nv.info.";
        if (!starts_with(section_name, kInfoPrefix)) continue;
        const std::string kernel(section_name.substr(kInfoPrefix.size()));
        std::string_view records = cubin.substr(offset, size);
        std::size_t at = 0;
        while (at + 4 <= records.size()) {
          const auto format = static_cast<std::uint8_t>(records[at]);
          const auto attribute = static_cast<std::uint8_t>(records[at + 1]);
          std::uint16_t value = 0;
          read_at(records, at + 2, &value);
          if (format != kFormatSized) {
            at += 4;
            continue;
          }
          if (attribute == kAttrMaxThreads && value >= 12) {
            std::uint32_t x = 0, y = 0, z = 0;
            read_at(records, at + 4, &x);
            read_at(records, at + 8, &y);
            read_at(records, at + 12, &z);
            const std::uint64_t product = std::uint64_t{x} * y * z;
            if (product > 0)
              launch_bounds[kernel] = static_cast<int>(std::min<std::uint64_t>(product, 1024));
          }
          at += 4 + value;
        }
      }
    }
  }
  for (auto& [name, resources] : *kernels) {
    int limit = max_threads_for_registers(resources.registers);
    if (auto it = launch_bounds.find(name); it != launch_bounds.end()) {
      limit = std::min(limit, it->second);
    }
    resources.max_threads = limit;
  }
}

}  // namespace crucible::sandbox
