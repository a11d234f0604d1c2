// What the fuzz targets assert beyond "no crash": well-formed UTF-8, checked twice, and a
// finding reported as an abort (libFuzzer then saves the input as a crash artifact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/msgpack_codec.hpp"
#include "core/text.hpp"
#include "core/value.hpp"

namespace crucible::fuzz {

// Reports a broken property and aborts: the input that got here is a finding.
[[noreturn]] inline void fail(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "FUZZ FINDING: %.*s\n", static_cast<int>(what.size()), what.data());
  if (!detail.empty()) {
    const std::string shown = core::to_json_text(core::Value(std::string(detail)));
    std::fprintf(stderr, "  %s\n", shown.c_str());
  }
  std::abort();
}

// RFC 3629 by decoding code points (a second opinion written apart from core/text.cpp's table):
// every sequence has the length its lead byte announces, only continuation bytes follow, and the
// code point is not overlong, not a surrogate and not past U+10FFFF.
inline bool decodes_as_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (lead < 0x80) {
      ++at;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1Fu;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0Fu;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07u;
    } else {
      return false;
    }
    if (text.size() - at < length) return false;
    for (std::size_t i = 1; i < length; ++i) {
      const auto next = static_cast<unsigned char>(text[at + i]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3Fu);
    }
    constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    at += length;
  }
  return true;
}

// Aborts unless `text` is valid UTF-8 by core::is_valid_utf8 and by the decoder above.
inline void require_utf8(std::string_view text, std::string_view where) {
  if (!core::is_valid_utf8(text)) fail(std::string(where) + ": not valid UTF-8", text);
  if (!decodes_as_utf8(text)) {
    fail(std::string(where) + ": core::is_valid_utf8 accepts ill-formed UTF-8", text);
  }
}

// Aborts unless every string and map key anywhere in `value` is valid UTF-8.
inline void require_utf8_everywhere(const core::Value& value, std::string_view where) {
  if (value.is_string()) {
    require_utf8(value.get_ref<const std::string&>(), where);
  } else if (value.is_array()) {
    for (const auto& item : value) require_utf8_everywhere(item, where);
  } else if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      require_utf8(it.key(), where);
      require_utf8_everywhere(it.value(), where);
    }
  }
}

// Aborts when core::is_valid_utf8 and the decoder above disagree on any string or key of
// `value` (untrusted text, so both answers occur).
inline void compare_utf8_verdicts(const core::Value& value) {
  const auto compare = [](std::string_view text) {
    if (core::is_valid_utf8(text) != decodes_as_utf8(text)) {
      fail("core::is_valid_utf8 and an RFC 3629 decoder disagree", text);
    }
  };
  if (value.is_string()) {
    compare(value.get_ref<const std::string&>());
  } else if (value.is_array()) {
    for (const auto& item : value) compare_utf8_verdicts(item);
  } else if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      compare(it.key());
      compare_utf8_verdicts(it.value());
    }
  }
}

}  // namespace crucible::fuzz
