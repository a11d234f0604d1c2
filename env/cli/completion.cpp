// Completion parsing: the Python client's completion_text and extract_source, rule for rule.
#include "env/cli/completion.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

namespace crucible::env {
namespace {

using core::ErrorCode;
using core::Value;

// The tags a fenced block may carry and still be the kernel (prompts.py SOURCE_LANGUAGES).
const std::set<std::string, std::less<>> kSourceLanguages = {"cuda", "cu", "cpp", "c++", "cxx",
                                                             "cc",   "c",  "cuh", "hpp", "h"};

struct CodePoint {
  char32_t value = 0;
  std::size_t bytes = 1;
};

// The UTF-8 code point at `at`; a byte that starts no valid sequence is one code point of its
// own that is no space (JSON strings are valid UTF-8, so this only guards the loop).
CodePoint decode(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  std::size_t length = lead < 0x80           ? 1
                       : (lead >> 5) == 0x6  ? 2
                       : (lead >> 4) == 0xE  ? 3
                       : (lead >> 3) == 0x1E ? 4
                                             : 0;
  if (length == 0 || at + length > text.size()) return {0xFFFD, 1};
  if (length == 1) return {lead, 1};
  char32_t value = lead & (0x7F >> length);
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return {0xFFFD, 1};
    value = (value << 6) | (byte(at + i) & 0x3F);
  }
  return {value, length};
}

// Python's str.isspace, which is also what `\s` and a bare str.strip() use.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The start of the code point that ends at `end` (> 0).
std::size_t previous_start(std::string_view text, std::size_t end) {
  std::size_t at = end - 1;
  while (at > 0 && end - at < 4 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  // A run of continuation bytes with no lead decodes byte by byte.
  if (decode(text, at).bytes != end - at) return end - 1;
  return at;
}

// Python's str.strip() with no argument.
std::string_view strip_space(std::string_view text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end) {
    const CodePoint c = decode(text, begin);
    if (!is_python_space(c.value)) break;
    begin += c.bytes;
  }
  while (end > begin) {
    const std::size_t start = previous_start(text, end);
    if (!is_python_space(decode(text, start).value)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::string_view strip_newlines(std::string_view text) {
  const auto begin = text.find_first_not_of('\n');
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of('\n') + 1 - begin);
}

// Bytes of the line boundary at `at` (Python's str.splitlines boundaries), or 0.
std::size_t boundary_at(std::string_view text, std::size_t at) {
  const auto c = static_cast<unsigned char>(text[at]);
  if (c == '\r') return at + 1 < text.size() && text[at + 1] == '\n' ? 2 : 1;
  if (c == '\n' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E) return 1;
  const CodePoint point = decode(text, at);
  if (point.value == 0x85 || point.value == 0x2028 || point.value == 0x2029) return point.bytes;
  return 0;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0, at = 0;
  while (at < text.size()) {
    if (const std::size_t bytes = boundary_at(text, at); bytes > 0) {
      lines.push_back(text.substr(start, at - start));
      at += bytes;
      start = at;
    } else {
      at += decode(text, at).bytes;
    }
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

struct Fence {
  char mark = '`';
  std::size_t length = 0;
  std::string language;  // lower case; "" when untagged
};

// prompts.py _FENCE: ^[ ]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n]*$
std::optional<Fence> opening_fence(std::string_view line) {
  std::size_t at = 0;
  while (at < line.size() && at < 3 && line[at] == ' ') ++at;
  if (at >= line.size() || (line[at] != '`' && line[at] != '~')) return std::nullopt;
  Fence fence;
  fence.mark = line[at];
  while (at < line.size() && line[at] == fence.mark) {
    ++fence.length;
    ++at;
  }
  if (fence.length < 3) return std::nullopt;
  while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
  const std::size_t begin = at;
  while (at < line.size()) {
    const CodePoint c = decode(line, at);
    if (c.value == '`' || is_python_space(c.value)) break;
    at += c.bytes;
  }
  fence.language = ascii_lower(line.substr(begin, at - begin));
  return fence;
}

bool closes(std::string_view line, const Fence& fence) {
  const std::string_view closing = strip_space(line);
  return closing.size() >= fence.length &&
         closing.find_first_not_of(fence.mark) == std::string_view::npos;
}

struct Block {
  std::string language;
  std::string body;
};

// prompts.py _fenced_blocks: every fenced block; an unclosed last block runs to the end.
std::vector<Block> fenced_blocks(std::string_view text) {
  std::vector<Block> blocks;
  const auto lines = split_lines(text);
  std::size_t i = 0;
  while (i < lines.size()) {
    const auto fence = opening_fence(lines[i]);
    ++i;
    if (!fence) continue;
    Block block{fence->language, {}};
    bool first = true;
    for (; i < lines.size() && !closes(lines[i], *fence); ++i) {
      if (!first) block.body += '\n';
      block.body += lines[i];
      first = false;
    }
    ++i;  // past the closing fence
    blocks.push_back(std::move(block));
  }
  return blocks;
}

// Where the text after the last `</think>` (ASCII case-insensitive) starts; 0 without one.
std::size_t after_reasoning(std::string_view text) {
  static constexpr std::string_view kEnd = "</think>";
  const auto lower = [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  std::size_t found = 0;
  for (std::size_t at = 0; at + kEnd.size() <= text.size(); ++at) {
    std::size_t i = 0;
    while (i < kEnd.size() && lower(text[at + i]) == kEnd[i]) ++i;
    if (i == kEnd.size()) found = at + kEnd.size();
  }
  return found;
}

// prompts.py _LOOKS_LIKE_SOURCE: __global__|//\s*@launch
bool looks_like_source(std::string_view text) {
  if (text.find("__global__") != std::string_view::npos) return true;
  for (std::size_t at = text.find("//"); at != std::string_view::npos;
       at = text.find("//", at + 1)) {
    std::size_t after = at + 2;
    while (after < text.size()) {
      const CodePoint c = decode(text, after);
      if (!is_python_space(c.value)) break;
      after += c.bytes;
    }
    if (text.substr(after).starts_with("@launch")) return true;
  }
  return false;
}

// Python's str() of a JSON value that is not a string: None, True, False, the number's text.
std::string python_str(const Value& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "None";
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  return value.dump();
}

std::string message_text(const Value& message) {
  const auto content = message.find("content");
  if (content == message.end() || content->is_null()) return {};
  if (!content->is_array()) return python_str(*content);
  std::string text;
  for (const auto& part : *content) {
    if (!part.is_object()) continue;
    const auto it = part.find("text");
    if (it != part.end()) text += python_str(*it);
  }
  return text;
}

const char* json_type(const Value& value) {
  if (value.is_number()) return "a number";
  if (value.is_boolean()) return "a boolean";
  if (value.is_null()) return "null";
  return "binary data";
}

}  // namespace

core::Result<std::string> completion_text(const core::Value& completion) {
  if (completion.is_string()) return completion.get<std::string>();
  if (completion.is_object()) return message_text(completion);
  if (completion.is_array()) {
    const Value* last = nullptr;
    for (auto it = completion.rbegin(); it != completion.rend(); ++it) {
      if (!it->is_object()) continue;
      if (last == nullptr) last = &*it;
      const auto role = it->find("role");
      if (role == it->end() || (role->is_string() && role->get<std::string>() == "assistant")) {
        return message_text(*it);
      }
    }
    return last != nullptr ? message_text(*last) : std::string();
  }
  return core::Error{ErrorCode::kInvalidArgument,
                     std::string("a completion must be a string, a chat message or a list of "
                                 "messages, got ") +
                         json_type(completion)};
}

core::Result<std::string> extract_source(std::string_view text, SourceBlock which) {
  text = text.substr(after_reasoning(text));
  const auto blocks = fenced_blocks(text);
  std::vector<const Block*> candidates;
  for (const auto& block : blocks) {
    const bool source_language =
        block.language.empty() || kSourceLanguages.count(block.language) > 0;
    if (source_language && !strip_space(block.body).empty()) candidates.push_back(&block);
  }
  if (!candidates.empty()) {
    const Block& chosen = which == SourceBlock::kLast ? *candidates.back() : *candidates.front();
    return std::string(strip_newlines(chosen.body)) + "\n";
  }
  if (!blocks.empty()) {
    std::set<std::string> languages;
    for (const auto& block : blocks) {
      languages.insert(block.language.empty() ? "untagged" : block.language);
    }
    std::string list;
    for (const auto& language : languages) list += (list.empty() ? "" : ", ") + language;
    return core::Error{ErrorCode::kInvalidArgument,
                       "the completion's code blocks are not CUDA/C++ (" + list + ")"};
  }
  if (looks_like_source(text)) return std::string(strip_newlines(text)) + "\n";
  return core::Error{ErrorCode::kInvalidArgument,
                     "the completion holds no ```cuda code block and no kernel source"};
}

}  // namespace crucible::env
