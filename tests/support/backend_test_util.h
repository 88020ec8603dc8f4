// Small helpers for the memory tests: Status assertions that print the status, byte patterns
// that differ per byte and per cycle, and whole-range device reads/writes through a
// backend's staging ring (core/memory/device_copy.h).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/memory/device_copy.h"
#include "core/memory/memory_backend.h"

namespace siesta::test_util {

inline Status to_status(const Status& status) { return status; }
template <class T>
Status to_status(const Result<T>& result) {
  return result.status();
}

// The bytes of a pattern: byte i of pattern `seed` is a 64-bit mix of (seed, i / 8), so two
// patterns (two cycles, two regions) differ at almost every byte, and a copy that lands at a
// wrong offset or is skipped is caught.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline std::byte pattern_byte(uint64_t seed, size_t index) {
  return static_cast<std::byte>(mix64(seed * 0x100000001b3ull + index / 8) >> (8 * (index % 8)));
}
inline std::vector<std::byte> make_pattern(size_t bytes, uint64_t seed) {
  std::vector<std::byte> out(bytes);
  std::byte* data = out.data();
  size_t i = 0;
  if constexpr (std::endian::native == std::endian::little) {
    // Whole words at once (the tests run unoptimised too, and copy megabytes).
    for (; i + 8 <= bytes; i += 8) {
      const uint64_t mixed = mix64(seed * 0x100000001b3ull + i / 8);
      std::memcpy(data + i, &mixed, 8);
    }
  }
  for (; i < bytes; ++i) data[i] = pattern_byte(seed, i);
  return out;
}

inline Status write_device(MemoryBackend& backend, DeviceAddress destination,
                           std::span<const std::byte> bytes) {
  return copy_host_to_device(backend, bytes, destination);
}

inline Result<std::vector<std::byte>> read_device(MemoryBackend& backend, DeviceAddress source,
                                                  size_t bytes) {
  std::vector<std::byte> out(bytes);
  SIESTA_RETURN_IF_ERROR(copy_device_to_host(backend, source, out));
  return out;
}

// Index of the first byte where `a` and `b` differ, or -1 when equal (sizes must match);
// failure messages print it instead of megabytes of bytes.
inline long long first_difference(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return 0;
  if (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0) return -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<long long>(i);
  }
  return -1;
}

inline bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return first_difference(a, b) == -1;
}

inline size_t round_up(size_t bytes, size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

}  // namespace siesta::test_util

#define SIESTA_TEST_CONCAT_INNER_(a, b) a##b
#define SIESTA_TEST_CONCAT_(a, b) SIESTA_TEST_CONCAT_INNER_(a, b)

// ASSERT/EXPECT that a Status or Result is OK, printing the status otherwise.
#define SIESTA_ASSERT_OK(expr)                                               \
  do {                                                                       \
    const ::siesta::Status siesta_s_ = ::siesta::test_util::to_status(expr); \
    ASSERT_TRUE(siesta_s_.ok()) << #expr << " -> " << siesta_s_.to_string(); \
  } while (0)
#define SIESTA_EXPECT_OK(expr)                                               \
  do {                                                                       \
    const ::siesta::Status siesta_s_ = ::siesta::test_util::to_status(expr); \
    EXPECT_TRUE(siesta_s_.ok()) << #expr << " -> " << siesta_s_.to_string(); \
  } while (0)

// EXPECT that a Status or Result failed with `code` (a StatusCode), printing names.
#define SIESTA_EXPECT_CODE(expr, expected_code)                              \
  do {                                                                       \
    const ::siesta::Status siesta_s_ = ::siesta::test_util::to_status(expr); \
    EXPECT_EQ(::siesta::status_code_name(siesta_s_.code()),                  \
              ::siesta::status_code_name(expected_code))                     \
        << #expr << " -> " << siesta_s_.to_string();                         \
  } while (0)

// `SIESTA_ASSERT_OK_AND_ASSIGN(auto x, make_x());` (`lhs` is a declaration and `tmp` a name:
// neither can be parenthesized.)
// NOLINTBEGIN(bugprone-macro-parentheses)
#define SIESTA_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  SIESTA_ASSERT_OK_AND_ASSIGN_IMPL_(SIESTA_TEST_CONCAT_(siesta_r_, __LINE__), lhs, expr)
#define SIESTA_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)               \
  auto tmp = (expr);                                                    \
  ASSERT_TRUE(tmp.ok()) << #expr << " -> " << tmp.status().to_string(); \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
