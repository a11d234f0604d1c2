// Counter-based random numbers for input generation: SplitMix64 mixing and seed hashing.
#pragma once

#include <cstdint>
#include <string_view>

namespace crucible::tasks {

// The SplitMix64 finaliser: a bijective 64-bit mix. Used as a counter-based generator:
// mix(seed + k * golden) gives the k-th number of stream `seed` with no state to carry, so
// any element of a tensor can be computed independently and in any order.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The k-th 64-bit number of the stream whose key is splitmix64(seed): for loops over one stream,
// which compute the key once.
constexpr std::uint64_t keyed_bits(std::uint64_t key, std::uint64_t k) {
  return splitmix64(key ^ (k * 0xD1B54A32D192ED03ULL));
}

// The k-th 64-bit number of stream `seed`.
constexpr std::uint64_t stream_bits(std::uint64_t seed, std::uint64_t k) {
  return keyed_bits(splitmix64(seed), k);
}

// A double uniform in [0, 1) with 53 random bits; exact, so identical on every machine.
constexpr double unit_double(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// FNV-1a over the bytes of `text`: stable name hashing for seed derivation.
constexpr std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Combines two seeds order-dependently.
constexpr std::uint64_t mix_seeds(std::uint64_t a, std::uint64_t b) {
  return splitmix64(a ^ splitmix64(b + 0x632BE59BD9B4E019ULL));
}

}  // namespace crucible::tasks
