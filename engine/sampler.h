// Sampler: temperature sampling of the next token from the model's logits, restricted to the
// printable tokens [kFirstPrintable, kLastPrintable] (as greedy decoding is, so generated
// text is always printable ASCII), optionally narrowed first to the top_k most probable, to
// the nucleus of probability top_p, and to the tokens at least min_p times as probable as the
// most probable one. Also the other host-side uses of the logits: a
// request's logit bias, and log probabilities.
//
// Determinism: the same (temperature, seed, top_p, top_k, min_p) and the same logits give the same
// token on every run and every machine: the generator is our own (xoshiro256** seeded through
// splitmix64, no std:: distribution whose algorithm is implementation-defined), the softmax is
// computed in double with the maximum subtracted, summed in a fixed order (token order for the
// draw, most probable first for the nucleus), and ties are broken by the lowest token index.
// (std::exp and std::log of a double are the only libm calls; glibc's are correctly rounded in
// practice, so other libms could differ only in the last bit of a probability, which moves a
// draw only when it lands on a boundary.)
//
// Temperature 0 means greedy; the engine asks the Session (greedy_next) for that, so a
// Sampler is normally made only for temperature > 0, or to pick greedily from logits the
// engine changed on the host (a logit bias). A Sampler made with 0 picks the argmax (lowest
// index on ties), the same token the Session would, and ignores top_p, top_k and min_p (as
// llama.cpp does).
//
// Thread rule: plain value; one thread at a time. The free functions are pure.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "engine/model_config.h"

namespace siesta::engine {

inline constexpr float kMaxTemperature = 2.0f;

// OK for a finite temperature in [0, kMaxTemperature]; InvalidArgument otherwise, with the
// value and the range in the message.
Status validate_temperature(float temperature);

// OK for a finite top_p in (0, 1]; InvalidArgument naming top_p otherwise.
Status validate_top_p(float top_p);

// OK for a finite min_p in [0, 1]; InvalidArgument naming min_p otherwise.
Status validate_min_p(float min_p);

// A logit bias: added to a token's logit before the choice (greedy or sampled). A bias of
// kLogitBiasBan or less bans the token (its logit becomes -inf: never chosen); one of
// kLogitBiasForce or more forces it (+inf: chosen whenever it is printable; among several
// forced tokens the lowest index).
using LogitBias = std::vector<std::pair<uint8_t, float>>;
inline constexpr float kLogitBiasBan = -100.0f;
inline constexpr float kLogitBiasForce = 100.0f;

// OK when every bias is finite, no token appears twice, and at least one printable token is
// not banned (otherwise no token could be generated); InvalidArgument naming logit_bias, the
// token and the rule otherwise. (Every uint8_t is a token: kVocabSize is 256.)
Status validate_logit_bias(std::span<const std::pair<uint8_t, float>> bias);

// Adds `bias` to `logits` (kVocabSize values) as LogitBias says. REQUIRES: validated.
void apply_logit_bias(std::span<float> logits, std::span<const std::pair<uint8_t, float>> bias);

// The log-softmax of `logits` (kVocabSize values) over the whole vocabulary at temperature 1:
// logit - max - log(sum exp(logit - max)), in double, summed in token order. A NaN or -inf
// logit gets -inf; with +inf logits, those share the probability and the others get -inf.
// (The model's logits are finite, so its log probabilities are finite.)
std::vector<float> log_softmax(std::span<const float> logits);

// The `n` most probable tokens of `logprobs` (kVocabSize values, log_softmax()'s), most
// probable first, ties by the lowest token index; all of them when n >= kVocabSize.
std::vector<std::pair<uint8_t, float>> most_probable(std::span<const float> logprobs, uint32_t n);

class Sampler {
 public:
  // top_p: the nucleus (1: off); top_k: the k most probable (0: off); min_p: only the tokens
  // whose probability is at least min_p times the most probable one's (0: off). All are
  // applied to the printable tokens' probabilities at temperature 1 (after any logit bias the
  // caller applied), top_k, then top_p, then min_p, before the temperature draw, as
  // llama.cpp's default chain orders them.
  // Failure: validate_temperature()'s, validate_top_p()'s or validate_min_p()'s
  // InvalidArgument.
  static Result<Sampler> create(float temperature, uint64_t seed, float top_p = 1.0f,
                                uint32_t top_k = 0, float min_p = 0.0f);

  // Draws the next token from `logits` (kVocabSize values; only the printable ones are read).
  // The candidates are the printable tokens with a finite logit; top_k keeps the k most
  // probable of them, then top_p the smallest set of the most probable whose probability
  // (softmax at temperature 1 over those kept) sums to at least top_p; ties by the lowest
  // index; then min_p keeps those of them with exp(logit_t - max) >= min_p (the most probable
  // always passes). Among the candidates left, p(t) is proportional to exp((logit_t - max) /
  // temperature), drawn in token order. A NaN or -inf logit has probability 0; a +inf logit
  // takes all the probability (the lowest such index). With top_p 1, top_k 0 and min_p 0 the
  // draw is exactly the one of a Sampler without them.
  // Success: a token in [kFirstPrintable, kLastPrintable]; the generator advances by one draw
  // (none for greedy or a +inf logit).
  // Failure: InvalidArgument when logits.size() != kVocabSize or no printable token has a
  // usable logit (all NaN / -inf); the generator is not advanced.
  Result<uint8_t> sample(std::span<const float> logits);

  float temperature() const { return temperature_; }
  float top_p() const { return top_p_; }
  uint32_t top_k() const { return top_k_; }
  float min_p() const { return min_p_; }

 private:
  Sampler(float temperature, uint64_t seed, float top_p, uint32_t top_k, float min_p);
  uint64_t next_u64();
  double next_unit();  // uniform in [0, 1), 53 bits

  float temperature_ = 0;
  float top_p_ = 1.0f;
  uint32_t top_k_ = 0;
  float min_p_ = 0.0f;
  uint64_t state_[4] = {};
};

}  // namespace siesta::engine
