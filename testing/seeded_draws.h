// SeededDraws: the choices a fault plan makes from its seed. Draws are taken from
// std::mt19937_64's raw output with explicit arithmetic, never through
// std::uniform_int_distribution (whose algorithm differs between standard libraries), so one
// seed gives one plan on every machine: a printed seed reproduces a failure anywhere.
#pragma once

#include <cstdint>
#include <random>

namespace siesta {

class SeededDraws {
 public:
  explicit SeededDraws(uint64_t seed) : engine_(seed) {}
  // A number in [0, n). REQUIRES: n > 0.
  uint64_t below(uint64_t n) { return engine_() % n; }
  // True once in `n` draws on average. REQUIRES: n > 0.
  bool one_in(uint64_t n) { return below(n) == 0; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace siesta
