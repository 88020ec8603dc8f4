// The benchmarks' settings from the environment (SIESTA_BENCH_*), read at start-up before any
// thread runs (getenv is not safe beside setenv on another thread). An unset or empty variable
// takes the fallback.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace siesta::bench {

inline std::string env_text(const char* name, const char* fallback) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before threads
  return text != nullptr && *text != '\0' ? text : fallback;
}

// A decimal number; text that is not one reads as 0 (strtoull), as the benchmarks' users type
// the figures themselves.
inline uint64_t env_number(const char* name, uint64_t fallback) {
  const std::string text = env_text(name, "");
  return text.empty() ? fallback : std::strtoull(text.c_str(), nullptr, 10);
}

// A comma-separated list; empty items are skipped.
inline std::vector<std::string> env_items(const char* name, const char* fallback) {
  std::stringstream in(env_text(name, fallback));
  std::vector<std::string> out;
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// A comma-separated list of decimal numbers. Throws std::invalid_argument on an item that is
// not one (std::stoull), which ends the benchmark with the item named.
inline std::vector<uint64_t> env_numbers(const char* name, const char* fallback) {
  std::vector<uint64_t> out;
  for (const std::string& item : env_items(name, fallback)) out.push_back(std::stoull(item));
  return out;
}

}  // namespace siesta::bench
