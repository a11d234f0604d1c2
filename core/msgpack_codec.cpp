// msgpack decoding through msgpack-cxx (which enforces the limits) and conversion to Value.
#include "core/msgpack_codec.hpp"

#include <algorithm>
#include <cstdint>
#include <msgpack.hpp>

namespace crucible::core {
namespace {

// Depth is bounded by DecodeLimits::max_depth, which msgpack-cxx has already enforced.
Result<Value> to_value(const msgpack::object& object) {
  switch (object.type) {
    case msgpack::type::NIL:
      return Value(nullptr);
    case msgpack::type::BOOLEAN:
      return Value(object.via.boolean);
    case msgpack::type::POSITIVE_INTEGER:
      return Value(static_cast<std::uint64_t>(object.via.u64));
    case msgpack::type::NEGATIVE_INTEGER:
      return Value(static_cast<std::int64_t>(object.via.i64));
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return Value(object.via.f64);
    case msgpack::type::STR:
      return Value(std::string(object.via.str.ptr, object.via.str.size));
    case msgpack::type::BIN: {
      const auto* begin = reinterpret_cast<const std::uint8_t*>(object.via.bin.ptr);
      return Value::binary(Value::binary_t::container_type(begin, begin + object.via.bin.size));
    }
    case msgpack::type::ARRAY: {
      Value array = Value::array();
      array.get_ref<Value::array_t&>().reserve(object.via.array.size);
      for (std::uint32_t i = 0; i < object.via.array.size; ++i) {
        auto item = to_value(object.via.array.ptr[i]);
        if (!item) return item.error();
        array.push_back(std::move(item).value());
      }
      return array;
    }
    case msgpack::type::MAP: {
      Value map = Value::object();
      for (std::uint32_t i = 0; i < object.via.map.size; ++i) {
        const auto& kv = object.via.map.ptr[i];
        if (kv.key.type != msgpack::type::STR) {
          return Error{ErrorCode::kBadRequest, "map keys must be strings"};
        }
        auto item = to_value(kv.val);
        if (!item) return item.error();
        map[std::string(kv.key.via.str.ptr, kv.key.via.str.size)] = std::move(item).value();
      }
      return map;
    }
    case msgpack::type::EXT:
      return Error{ErrorCode::kBadRequest, "msgpack ext types are not accepted"};
  }
  return Error{ErrorCode::kBadRequest, "unknown msgpack type"};
}

}  // namespace

DecodeLimits trusted_decode_limits(std::size_t max_bytes) {
  DecodeLimits limits;
  limits.max_bytes = max_bytes;
  limits.max_depth = 64;
  limits.max_array_items = 1u << 24;
  limits.max_map_entries = 1u << 20;
  limits.max_str_bytes = static_cast<std::uint32_t>(std::min<std::size_t>(max_bytes, UINT32_MAX));
  limits.max_bin_bytes = limits.max_str_bytes;
  return limits;
}

Result<Value> decode_msgpack(std::string_view bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_bytes) {
    return Error{ErrorCode::kTooLarge, "frame of " + std::to_string(bytes.size()) +
                                           " bytes exceeds the limit of " +
                                           std::to_string(limits.max_bytes)};
  }
  if (bytes.empty()) return Error{ErrorCode::kBadRequest, "empty frame"};
  const msgpack::unpack_limit unpack_limit(limits.max_array_items, limits.max_map_entries,
                                           limits.max_str_bytes, limits.max_bin_bytes,
                                           /*ext=*/0, limits.max_depth);
  std::size_t offset = 0;
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, unpack_limit);
  } catch (const msgpack::depth_size_overflow&) {
    return Error{ErrorCode::kTooLarge,
                 "msgpack nesting deeper than " + std::to_string(limits.max_depth)};
  } catch (const msgpack::ext_size_overflow&) {
    return Error{ErrorCode::kBadRequest, "msgpack ext types are not accepted"};
  } catch (const msgpack::size_overflow& e) {
    return Error{ErrorCode::kTooLarge,
                 std::string("msgpack element over a size limit (") + e.what() + ")"};
  } catch (const msgpack::insufficient_bytes&) {
    return Error{ErrorCode::kBadRequest, "truncated msgpack frame"};
  } catch (const std::exception& e) {
    return Error{ErrorCode::kBadRequest, std::string("malformed msgpack: ") + e.what()};
  }
  if (offset != bytes.size()) {
    return Error{ErrorCode::kBadRequest, std::to_string(bytes.size() - offset) +
                                             " trailing bytes after the msgpack object"};
  }
  return to_value(handle.get());
}

std::string encode_msgpack(const Value& value) {
  std::string out;
  Value::to_msgpack(value, nlohmann::detail::output_adapter<char>(out));
  return out;
}

namespace {
Value summarise_binary(const Value& value) {
  if (value.is_binary()) return Value{{"bytes", value.get_binary().size()}};
  if (value.is_array()) {
    Value out = Value::array();
    for (const auto& item : value) out.push_back(summarise_binary(item));
    return out;
  }
  if (value.is_object()) {
    Value out = Value::object();
    for (auto it = value.begin(); it != value.end(); ++it) out[it.key()] = summarise_binary(*it);
    return out;
  }
  return value;
}
}  // namespace

std::string to_json_text(const Value& value, int indent) {
  return summarise_binary(value).dump(indent, ' ', false, Value::error_handler_t::replace);
}

}  // namespace crucible::core
