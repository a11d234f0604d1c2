// Text that leaves the server: valid UTF-8, cut on character boundaries, one line when asked.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/value.hpp"

namespace crucible::core {

// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
// past U+10FFFF).
bool is_valid_utf8(std::string_view text);

// `text` with every ill-formed sequence replaced by U+FFFD (one per maximal ill-formed
// subpart, as Unicode's "substitution of maximal subparts" practice does). Valid text is
// returned unchanged.
std::string to_valid_utf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character
// boundary; "..." is appended when anything was cut (so the result may be max_bytes + 3
// long). The input is made valid UTF-8 first, so the result always is.
std::string excerpt(std::string_view text, std::size_t max_bytes);

// `text` as one line of valid UTF-8: CR, LF, tabs and other C0/C1 controls become single
// spaces, runs of such spaces collapse, and the line is cut to `max_bytes` with excerpt().
std::string one_line(std::string_view text, std::size_t max_bytes);

// One byte as a message may quote it: "character 'x'" for printable ASCII, else "byte 0xe2"
// (quoting a lone byte of a multi-byte character would put ill-formed UTF-8 in the message).
std::string describe_byte(char c);

// Repairs, in place, every string (and every map key) anywhere in `value` that is not valid
// UTF-8, so the msgpack a client decodes as str is well-formed whatever a request held.
// Returns the number of strings repaired.
std::size_t repair_utf8(Value& value);

}  // namespace crucible::core
