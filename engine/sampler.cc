#include "engine/sampler.h"

#include <array>
#include <cmath>
#include <limits>
#include <string>

namespace siesta::engine {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

constexpr uint32_t kPrintableCount = kLastPrintable - kFirstPrintable + 1;

}  // namespace

Status validate_temperature(float temperature) {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > kMaxTemperature) {
    return InvalidArgument("temperature " + std::to_string(temperature) +
                           " is out of range: it must be a finite number in [0, 2]");
  }
  return Status::Ok();
}

Result<Sampler> Sampler::create(float temperature, uint64_t seed) {
  SIESTA_RETURN_IF_ERROR(validate_temperature(temperature));
  return Sampler(temperature, seed);
}

Sampler::Sampler(float temperature, uint64_t seed) : temperature_(temperature) {
  // splitmix64 spreads any seed (0 included) over the whole state, which xoshiro needs non-zero.
  uint64_t x = seed;
  for (uint64_t& word : state_) word = splitmix64(x);
}

uint64_t Sampler::next_u64() {  // xoshiro256**
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Sampler::next_unit() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

Result<uint8_t> Sampler::sample(std::span<const float> logits) {
  if (logits.size() != kVocabSize) {
    return InvalidArgument("sampler: expected " + std::to_string(kVocabSize) + " logits, got " +
                           std::to_string(logits.size()));
  }
  const auto printable = logits.subspan(kFirstPrintable, kPrintableCount);

  // The maximum over usable logits; a +inf (or temperature 0) makes the choice greedy.
  double max = -std::numeric_limits<double>::infinity();
  uint32_t argmax = kPrintableCount;
  for (uint32_t i = 0; i < kPrintableCount; ++i) {
    const double v = printable[i];
    if (v > max) {  // false for NaN and -inf; strict, so the lowest index wins ties
      max = v;
      argmax = i;
    }
  }
  if (argmax == kPrintableCount) {
    return InvalidArgument("sampler: no printable token has a finite logit");
  }
  if (std::isinf(max) || temperature_ == 0.0f) {
    return static_cast<uint8_t>(kFirstPrintable + argmax);
  }

  std::array<double, kPrintableCount> weight{};
  double total = 0;
  const double inv_t = 1.0 / static_cast<double>(temperature_);
  for (uint32_t i = 0; i < kPrintableCount; ++i) {
    const float v = printable[i];
    weight[i] = std::isfinite(v) ? std::exp((static_cast<double>(v) - max) * inv_t) : 0.0;
    total += weight[i];
  }
  // total >= 1: the maximum's weight is exp(0).
  const double target = next_unit() * total;
  double cumulative = 0;
  uint32_t last_positive = argmax;
  for (uint32_t i = 0; i < kPrintableCount; ++i) {
    if (weight[i] <= 0) continue;
    last_positive = i;
    cumulative += weight[i];
    if (target < cumulative) return static_cast<uint8_t>(kFirstPrintable + i);
  }
  // Rounding can leave target == the final sum; the last token with weight takes it.
  return static_cast<uint8_t>(kFirstPrintable + last_positive);
}

}  // namespace siesta::engine
