// round_up: the smallest multiple of `unit` not below `value` (sizes to pages, granules,
// alignments). REQUIRES: unit > 0 and value + unit - 1 does not overflow (callers that take
// sizes from outside check that first).
//
// Thread rule: none (a pure function).
#pragma once

#include <cstdint>

namespace siesta {

constexpr uint64_t round_up(uint64_t value, uint64_t unit) {
  return (value + unit - 1) / unit * unit;
}

}  // namespace siesta
