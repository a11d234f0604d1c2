// CRC-32C (Castagnoli) for record checksums and FNV-1a/SHA-256 style content keys.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace crucible::core {

// CRC-32C of `bytes`, continuing from `crc` (pass the previous result to chain). Thread-safe.
std::uint32_t crc32c(std::string_view bytes, std::uint32_t crc = 0);

// SHA-256 of `bytes` as 64 lowercase hex characters; used as a content key (caches, dedup).
std::string sha256_hex(std::string_view bytes);

}  // namespace crucible::core
