// UTF-8 checks and repairs for text that leaves the server.
#include "core/text.hpp"

#include <vector>

namespace crucible::core {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

struct Sequence {
  std::size_t length;  // bytes consumed
  bool valid;          // a whole well-formed character, else a maximal ill-formed subpart
};

// The well-formed sequences of Unicode's table 3-7: the first byte fixes the length and the
// range of the second byte; every later byte is 80..BF.
Sequence next_sequence(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {1, true};
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return {1, false};  // 80..C1, F5..FF never start a character
  }
  std::size_t i = 1;
  for (; i < length && at + i < text.size(); ++i) {
    const unsigned char next = byte(at + i);
    const unsigned char lo = i == 1 ? low : 0x80;
    const unsigned char hi = i == 1 ? high : 0xBF;
    if (next < lo || next > hi) return {i, false};
  }
  return {i, i == length};
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const auto seq = next_sequence(text, at);
    if (!seq.valid) return false;
    at += seq.length;
  }
  return true;
}

std::string to_valid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (std::size_t at = 0; at < text.size();) {
    const auto seq = next_sequence(text, at);
    if (seq.valid) {
      out.append(text.substr(at, seq.length));
    } else {
      out.append(kReplacement);
    }
    at += seq.length;
  }
  return out;
}

std::string excerpt(std::string_view text, std::size_t max_bytes) {
  const std::string valid = to_valid_utf8(text);
  if (valid.size() <= max_bytes) return valid;
  std::size_t end = 0;
  for (std::size_t at = 0; at < valid.size();) {
    const auto seq = next_sequence(valid, at);
    if (at + seq.length > max_bytes) break;
    at += seq.length;
    end = at;
  }
  return valid.substr(0, end) + "...";
}

std::string one_line(std::string_view text, std::size_t max_bytes) {
  const std::string valid = to_valid_utf8(text);
  std::string line;
  line.reserve(valid.size());
  bool space = false;
  for (std::size_t at = 0; at < valid.size();) {
    const auto seq = next_sequence(valid, at);
    const auto lead = static_cast<unsigned char>(valid[at]);
    // C1 controls are U+0080..U+009F: C2 80..C2 9F in UTF-8.
    const bool c1 =
        seq.length == 2 && lead == 0xC2 && static_cast<unsigned char>(valid[at + 1]) <= 0x9F;
    if ((seq.length == 1 && is_control(lead)) || c1) {
      if (!space && !line.empty()) line.push_back(' ');
      space = true;
    } else {
      line.append(valid, at, seq.length);
      space = lead == ' ';
    }
    at += seq.length;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return excerpt(line, max_bytes);
}

std::string describe_byte(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x21 && byte < 0x7f) return std::string("character '") + c + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 0xf];
}

std::size_t repair_utf8(Value& value) {
  std::size_t repaired = 0;
  std::vector<Value*> pending{&value};
  while (!pending.empty()) {
    Value* node = pending.back();
    pending.pop_back();
    if (node->is_string()) {
      auto& text = node->get_ref<std::string&>();
      if (!is_valid_utf8(text)) {
        text = to_valid_utf8(text);
        ++repaired;
      }
    } else if (node->is_array()) {
      for (auto& item : *node) pending.push_back(&item);
    } else if (node->is_object()) {
      // Keys cannot be edited in place: rebuild the map only when one is ill-formed.
      bool bad_key = false;
      for (auto it = node->begin(); it != node->end(); ++it) {
        if (!is_valid_utf8(it.key())) bad_key = true;
      }
      if (bad_key) {
        Value rebuilt = Value::object();
        for (auto it = node->begin(); it != node->end(); ++it) {
          const std::string key = to_valid_utf8(it.key());
          if (key != it.key()) ++repaired;
          rebuilt[key] = std::move(it.value());
        }
        *node = std::move(rebuilt);
      }
      for (auto& item : node->items()) pending.push_back(&item.value());
    }
  }
  return repaired;
}

}  // namespace crucible::core
