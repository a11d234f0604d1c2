// msgpack decoding under limits: round trips, and every way a hostile frame is refused.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "core/msgpack_codec.hpp"

using namespace crucible::core;

namespace {
std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}
}  // namespace

TEST_CASE("msgpack codec: round-trips maps, arrays, integers, floats, strings and binary") {
  Value original = {{"v", 1},
                    {"id", -7},
                    {"big", 18446744073709551615ull},
                    {"pi", 3.25},
                    {"s", "héllo"},
                    {"list", {1, 2, 3}},
                    {"nested", {{"ok", true}, {"none", nullptr}}}};
  original["blob"] = Value::binary({0, 1, 2, 255});
  const auto decoded = decode_msgpack(encode_msgpack(original), DecodeLimits{});
  REQUIRE(decoded.ok());
  CHECK(*decoded == original);
  CHECK(decoded->at("big").get<std::uint64_t>() == 18446744073709551615ull);
  CHECK(decoded->at("id").get<std::int64_t>() == -7);
}

TEST_CASE("msgpack codec: refuses malformed and oversized frames with the right code") {
  struct Case {
    const char* name;
    std::string frame;
    ErrorCode code;
  };
  DecodeLimits limits;
  limits.max_bytes = 64;
  limits.max_depth = 4;
  limits.max_array_items = 8;
  limits.max_map_entries = 4;
  limits.max_str_bytes = 16;
  const Case cases[] = {
      {"empty frame", "", ErrorCode::kBadRequest},
      {"truncated map", bytes({0x82, 0xa1, 'a'}), ErrorCode::kBadRequest},
      {"reserved byte 0xc1", bytes({0xc1}), ErrorCode::kBadRequest},
      {"trailing bytes", bytes({0x01, 0x02}), ErrorCode::kBadRequest},
      {"integer map key", bytes({0x81, 0x01, 0x02}), ErrorCode::kBadRequest},
      {"ext type", bytes({0xd4, 0x01, 0x00}), ErrorCode::kBadRequest},
      {"frame over max_bytes", std::string(65, '\x01'), ErrorCode::kTooLarge},
      {"nesting over max_depth", bytes({0x91, 0x91, 0x91, 0x91, 0x91, 0x01}), ErrorCode::kTooLarge},
      {"array over max_array_items", bytes({0x9a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}),
       ErrorCode::kTooLarge},
      {"string over max_str_bytes", bytes({0xb1}) + std::string(17, 'x'), ErrorCode::kTooLarge},
      {"array header claiming 4 billion items", bytes({0xdd, 0xff, 0xff, 0xff, 0xff}),
       ErrorCode::kTooLarge},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto result = decode_msgpack(c.frame, limits);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().code == c.code);
    CHECK_FALSE(result.error().message.empty());
  }
}

TEST_CASE("msgpack codec: 20,000 random frames never crash and always give a verdict") {
  std::mt19937_64 rng(12345);
  DecodeLimits limits;
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string frame(1 + rng() % 48, '\0');
    for (auto& ch : frame) ch = static_cast<char>(rng());
    if (i % 2 == 0) frame[0] = static_cast<char>(0x80 | (rng() % 16));  // bias towards maps
    const auto result = decode_msgpack(frame, limits);
    if (result.ok()) ++accepted;
  }
  CHECK(accepted < 20000);
}

TEST_CASE("to_json_text: summarises binary and replaces invalid UTF-8") {
  Value value = {{"s", std::string("a\xff")}};
  value["b"] = Value::binary({1, 2, 3});
  const auto text = to_json_text(value);
  CHECK(text.find("\"bytes\":3") != std::string::npos);
  CHECK(text.find("\xef\xbf\xbd") != std::string::npos);
}
