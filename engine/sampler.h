// Sampler: temperature sampling of the next token from the model's logits, restricted to the
// printable tokens [kFirstPrintable, kLastPrintable] (as greedy decoding is, so generated
// text is always printable ASCII).
//
// Determinism: the same (temperature, seed) and the same logits give the same token on every
// run and every machine: the generator is our own (xoshiro256** seeded through splitmix64, no
// std:: distribution whose algorithm is implementation-defined), and the softmax is computed
// in double with the maximum subtracted, summed in token order. (std::exp of a double is the
// one libm call; glibc's is correctly rounded in practice, so other libms could differ only in
// the last bit of a probability, which moves a draw only when it lands on a boundary.)
//
// Temperature 0 means greedy; the engine asks the Session (greedy_next) for that, so a
// Sampler is normally made only for temperature > 0. A Sampler made with 0 picks the argmax
// (lowest index on ties), the same token the Session would.
//
// Thread rule: plain value; one thread at a time.
#pragma once

#include <cstdint>
#include <span>

#include "core/base/status.h"
#include "engine/model_config.h"

namespace siesta::engine {

inline constexpr float kMaxTemperature = 2.0f;

// OK for a finite temperature in [0, kMaxTemperature]; InvalidArgument otherwise, with the
// value and the range in the message.
Status validate_temperature(float temperature);

class Sampler {
 public:
  // Failure: validate_temperature()'s InvalidArgument.
  static Result<Sampler> create(float temperature, uint64_t seed);

  // Draws the next token from `logits` (kVocabSize values; only the printable ones are read):
  // p(t) proportional to exp((logit_t - max) / temperature). A NaN or -inf logit has
  // probability 0; a +inf logit takes all the probability (the lowest such index).
  // Success: a token in [kFirstPrintable, kLastPrintable]; the generator advances by one draw.
  // Failure: InvalidArgument when logits.size() != kVocabSize or no printable token has a
  // usable logit (all NaN / -inf); the generator is not advanced.
  Result<uint8_t> sample(std::span<const float> logits);

  float temperature() const { return temperature_; }

 private:
  Sampler(float temperature, uint64_t seed);
  uint64_t next_u64();
  double next_unit();  // uniform in [0, 1), 53 bits

  float temperature_ = 0;
  uint64_t state_[4] = {};
};

}  // namespace siesta::engine
