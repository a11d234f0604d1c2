// msgpack <-> Value with hard limits, safe on hostile bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::core {

// Limits applied while decoding untrusted bytes. A frame that exceeds any of them is rejected
// before a Value is built, so a hostile frame costs at most max_bytes of parsing.
struct DecodeLimits {
  std::size_t max_bytes = 1u << 20;        // whole frame
  std::uint32_t max_depth = 16;            // nesting of arrays/maps
  std::uint32_t max_array_items = 65536;   // elements in one array
  std::uint32_t max_map_entries = 1024;    // pairs in one map
  std::uint32_t max_str_bytes = 1u << 20;  // one string
  std::uint32_t max_bin_bytes = 1u << 20;  // one binary blob
};

// Limits for bytes crucible wrote itself or got from its own server (log records, child-process
// frames, replies): only the size bounds memory; depth and counts are generous.
DecodeLimits trusted_decode_limits(std::size_t max_bytes);

// Decodes exactly one msgpack object spanning all of `bytes`. Map keys must be strings; ext
// types are refused. Errors: kTooLarge (over a limit), kBadRequest (malformed, trailing
// bytes, non-string key). Never throws for bad input. Thread-safe.
Result<Value> decode_msgpack(std::string_view bytes, const DecodeLimits& limits);

// Encodes a Value as msgpack. Integers keep their signedness, floats stay float64, binary_t
// becomes bin. Thread-safe.
std::string encode_msgpack(const Value& value);

// JSON text of a Value for logs and reports: invalid UTF-8 is replaced, binary is summarised
// as {"bytes": N}. Never throws.
std::string to_json_text(const Value& value, int indent = -1);

}  // namespace crucible::core
