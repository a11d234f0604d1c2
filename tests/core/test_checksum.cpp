// Known-answer tests for CRC-32C and SHA-256.
#include <doctest/doctest.h>

#include "core/checksum.hpp"

using crucible::core::crc32c;
using crucible::core::sha256_hex;

TEST_CASE("crc32c: matches the published check value and chains") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  CHECK(crc32c("6789", crc32c("12345")) == crc32c("123456789"));
  CHECK(crc32c("123456788") != crc32c("123456789"));
}

TEST_CASE("sha256: matches FIPS 180-4 test vectors at every padding boundary") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55, 56 and 64 bytes straddle the one-block/two-block padding boundary.
  CHECK(sha256_hex(std::string(55, 'a')) != sha256_hex(std::string(56, 'a')));
  CHECK(sha256_hex(std::string(64, 'a')) ==
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}
