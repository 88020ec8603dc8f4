// Lower-case hex of bytes: process nonces in file names, temporary-file suffixes, and byte
// prefixes in messages all spell bytes the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace siesta {

inline std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (uint8_t byte : bytes) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 0xf];
  }
  return hex;
}

}  // namespace siesta
