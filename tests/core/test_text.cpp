// Tests for UTF-8 checks, repairs, excerpts and one-line messages.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "core/msgpack_codec.hpp"
#include "core/protocol.hpp"
#include "core/text.hpp"

using crucible::core::excerpt;
using crucible::core::is_valid_utf8;
using crucible::core::one_line;
using crucible::core::to_valid_utf8;

namespace {
const std::string kFffd = "\xEF\xBF\xBD";
const std::string kEmDash = "\xE2\x80\x94";  // U+2014, three bytes
}  // namespace

TEST_CASE("utf8: well-formed and ill-formed sequences are told apart") {
  struct Row {
    std::string text;
    bool valid;
  };
  const Row rows[] = {
      {"", true},
      {"plain ascii", true},
      {"caf\xC3\xA9", true},
      {kEmDash, true},
      {"\xF0\x9F\x98\x80", true},   // U+1F600
      {"\xF4\x8F\xBF\xBF", true},   // U+10FFFF
      {"\xC3", false},              // cut after the lead byte
      {"\xE2\x80", false},          // cut inside an em dash
      {"\x80", false},              // lone continuation
      {"\xC0\xAF", false},          // overlong '/'
      {"\xE0\x80\xAF", false},      // overlong
      {"\xED\xA0\x80", false},      // surrogate U+D800
      {"\xF4\x90\x80\x80", false},  // past U+10FFFF
      {"\xF5\x80\x80\x80", false},
      {"\xFF", false},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(is_valid_utf8(row.text) == row.valid);
  }
}

TEST_CASE("utf8: repair replaces each maximal ill-formed subpart with one U+FFFD") {
  CHECK(to_valid_utf8("ok") == "ok");
  CHECK(to_valid_utf8("a\xE2\x80z") == "a" + kFffd + "z");  // one subpart of two bytes
  CHECK(to_valid_utf8("\xFF\xFE") == kFffd + kFffd);
  CHECK(to_valid_utf8("\xED\xA0\x80") == kFffd + kFffd + kFffd);  // D800 is three subparts
  CHECK(to_valid_utf8("\xF0\x9F\x98") == kFffd);
}

TEST_CASE("utf8: an excerpt never splits a character") {
  const std::string text = "ab" + kEmDash + "cd";  // bytes: a b E2 80 94 c d
  CHECK(excerpt(text, 100) == text);
  CHECK(excerpt(text, 2) == "ab...");
  CHECK(excerpt(text, 3) == "ab...");  // would cut the dash after its first byte
  CHECK(excerpt(text, 4) == "ab...");
  CHECK(excerpt(text, 5) == "ab" + kEmDash + "...");
  CHECK(excerpt(text, 0) == "...");
  CHECK(excerpt("\xFF", 8) == kFffd);
}

TEST_CASE("utf8: one_line turns controls into single spaces and cuts on a boundary") {
  CHECK(one_line("compilation failed:\nkernel.cu(3): error", 100) ==
        "compilation failed: kernel.cu(3): error");
  CHECK(one_line("a\r\n\r\nb\tc\x01"
                 "d",
                 100) == "a b c d");
  CHECK(one_line("trailing\n\n", 100) == "trailing");
  CHECK(one_line("x\xC2\x85y", 100) == "x y");  // U+0085 NEXT LINE is a C1 control
  CHECK(one_line("\xE2\x80\x94\xE2\x80\x94", 4) == kEmDash + "...");
}

TEST_CASE("utf8: random bytes always come out valid, and excerpts respect their cap") {
  std::mt19937_64 rng(12);
  std::uniform_int_distribution<int> length(0, 40);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::string pieces[] = {kEmDash, "\xC3\xA9", "\xF0\x9F\x98\x80", "\n", "\r", "a"};
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    const int n = length(rng);
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        text += pieces[rng() % std::size(pieces)];
      } else {
        text.push_back(static_cast<char>(byte(rng)));
      }
    }
    const std::size_t cap = rng() % 24;
    const auto repaired = to_valid_utf8(text);
    const auto cut = excerpt(text, cap);
    const auto line = one_line(text, cap);
    REQUIRE(is_valid_utf8(repaired));
    REQUIRE(is_valid_utf8(cut));
    REQUIRE(is_valid_utf8(line));
    REQUIRE(cut.size() <= cap + 3);
    REQUIRE(line.find('\n') == std::string::npos);
    REQUIRE(line.find('\r') == std::string::npos);
    if (is_valid_utf8(text)) REQUIRE(repaired == text);
  }
}

TEST_CASE("replies: every string and key is valid UTF-8 after encode_reply") {
  using crucible::core::Value;
  Value reply = crucible::core::ok_reply("id-\xE2\x80");
  reply["result"] = Value{{"message", "cut \xE2\x80"}, {"list", Value::array({"\xFF", 3})}};
  reply["bad key \xC3"] = "x";
  const std::string bytes = crucible::core::encode_reply(reply);
  auto decoded =
      crucible::core::decode_msgpack(bytes, crucible::core::trusted_decode_limits(1 << 20));
  REQUIRE(decoded);
  CHECK((*decoded)["id"] == "id-" + kFffd);
  CHECK((*decoded)["result"]["message"] == "cut " + kFffd);
  CHECK((*decoded)["result"]["list"][0] == kFffd);
  CHECK(decoded->contains("bad key " + kFffd));
  const auto error =
      crucible::core::error_reply(1, crucible::core::ErrorCode::kBadRequest, "two\nlines \xE2\x80");
  CHECK(error["error"]["message"] == "two lines " + kFffd);
}
