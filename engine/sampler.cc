#include "engine/sampler.h"

#include <algorithm>
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
static_assert(kVocabSize == 256, "a logit bias's uint8_t token must name every token");

std::string token_name(uint8_t token) { return "token " + std::to_string(token); }

}  // namespace

Status validate_temperature(float temperature) {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > kMaxTemperature) {
    return InvalidArgument("temperature " + std::to_string(temperature) +
                           " is out of range: it must be a finite number in [0, 2]");
  }
  return Status::Ok();
}

Status validate_top_p(float top_p) {
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) {
    return InvalidArgument("top_p " + std::to_string(top_p) +
                           " is out of range: it must be a finite number in (0, 1]");
  }
  return Status::Ok();
}

Status validate_min_p(float min_p) {
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f) {
    return InvalidArgument("min_p " + std::to_string(min_p) +
                           " is out of range: it must be a finite number in [0, 1]");
  }
  return Status::Ok();
}

Status validate_logit_bias(std::span<const std::pair<uint8_t, float>> bias) {
  std::array<bool, kVocabSize> seen{};
  uint32_t banned_printable = 0;
  for (const auto& [token, value] : bias) {
    if (!std::isfinite(value)) {
      return InvalidArgument("logit_bias of " + token_name(token) + " is " + std::to_string(value) +
                             ": it must be a finite number");
    }
    if (seen[token]) {
      return InvalidArgument("logit_bias names " + token_name(token) + " twice");
    }
    seen[token] = true;
    if (value <= kLogitBiasBan && token >= kFirstPrintable && token <= kLastPrintable) {
      ++banned_printable;
    }
  }
  if (banned_printable == kPrintableCount) {
    return InvalidArgument(
        "logit_bias bans every printable token (a bias of -100 or less): "
        "no token could be generated");
  }
  return Status::Ok();
}

void apply_logit_bias(std::span<float> logits, std::span<const std::pair<uint8_t, float>> bias) {
  for (const auto& [token, value] : bias) {
    if (token >= logits.size()) continue;
    float& logit = logits[token];
    if (value <= kLogitBiasBan) {
      logit = -std::numeric_limits<float>::infinity();
    } else if (value >= kLogitBiasForce) {
      logit = std::numeric_limits<float>::infinity();
    } else {
      logit += value;
    }
  }
}

std::vector<float> log_softmax(std::span<const float> logits) {
  std::vector<float> out(logits.size(), -std::numeric_limits<float>::infinity());
  double max = -std::numeric_limits<double>::infinity();
  size_t infinite = 0;
  for (float v : logits) {
    if (v > max) max = v;  // false for NaN
    if (std::isinf(v) && v > 0) ++infinite;
  }
  if (infinite > 0) {  // the +inf logits share the probability
    const auto share = static_cast<float>(-std::log(static_cast<double>(infinite)));
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isinf(logits[i]) && logits[i] > 0) out[i] = share;
    }
    return out;
  }
  if (std::isinf(max)) return out;  // nothing usable: all NaN / -inf (or empty)
  double total = 0;
  for (float v : logits) {
    if (std::isfinite(v)) total += std::exp(static_cast<double>(v) - max);
  }
  const double log_total = std::log(total);  // total >= 1: the maximum's term is exp(0)
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) {
      out[i] = static_cast<float>(static_cast<double>(logits[i]) - max - log_total);
    }
  }
  return out;
}

std::vector<std::pair<uint8_t, float>> most_probable(std::span<const float> logprobs, uint32_t n) {
  std::vector<uint32_t> order(logprobs.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  // NaN never appears in log_softmax()'s output; ordered below everything all the same.
  auto key = [&](uint32_t i) {
    const float v = logprobs[i];
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  };
  const size_t count = std::min<size_t>(n, order.size());
  std::partial_sort(
      order.begin(), order.begin() + static_cast<ptrdiff_t>(count), order.end(),
      [&](uint32_t a, uint32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
  std::vector<std::pair<uint8_t, float>> out;
  out.reserve(count);
  for (size_t j = 0; j < count; ++j) {
    out.emplace_back(static_cast<uint8_t>(order[j]), logprobs[order[j]]);
  }
  return out;
}

Result<Sampler> Sampler::create(float temperature, uint64_t seed, float top_p, uint32_t top_k,
                                float min_p) {
  SIESTA_RETURN_IF_ERROR(validate_temperature(temperature));
  SIESTA_RETURN_IF_ERROR(validate_top_p(top_p));
  SIESTA_RETURN_IF_ERROR(validate_min_p(min_p));
  return Sampler(temperature, seed, top_p, top_k, min_p);
}

Sampler::Sampler(float temperature, uint64_t seed, float top_p, uint32_t top_k, float min_p)
    : temperature_(temperature), top_p_(top_p), top_k_(top_k), min_p_(min_p) {
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

  // The candidates: every usable token, narrowed by top_k, top_p and min_p when they are on.
  std::array<bool, kPrintableCount> kept{};
  for (uint32_t i = 0; i < kPrintableCount; ++i) kept[i] = std::isfinite(printable[i]);
  if (top_k_ != 0 || top_p_ < 1.0f || min_p_ > 0.0f) {
    // Most probable first (the logit orders as the probability does), ties by lowest index:
    // a strict total order, so the sort's result is unique.
    std::array<uint32_t, kPrintableCount> order{};
    uint32_t usable = 0;
    for (uint32_t i = 0; i < kPrintableCount; ++i) {
      if (kept[i]) order[usable++] = i;
    }
    std::sort(order.begin(), order.begin() + usable, [&](uint32_t a, uint32_t b) {
      return printable[a] > printable[b] || (printable[a] == printable[b] && a < b);
    });
    uint32_t keep = usable;
    if (top_k_ != 0) keep = std::min(keep, top_k_);
    if (top_p_ < 1.0f) {
      // Probabilities at temperature 1 over the tokens top_k kept, summed most probable first
      // (so the running sum reaches the total exactly at the last one).
      std::array<double, kPrintableCount> p{};
      double total = 0;
      for (uint32_t j = 0; j < keep; ++j) {
        p[j] = std::exp(static_cast<double>(printable[order[j]]) - max);
        total += p[j];
      }
      const double target = static_cast<double>(top_p_) * total;
      double cumulative = 0;
      uint32_t nucleus = 0;
      while (nucleus < keep) {
        cumulative += p[nucleus++];
        if (cumulative >= target) break;
      }
      keep = nucleus;
    }
    if (min_p_ > 0.0f) {
      // p(t) / p(most probable) >= min_p  <=>  logit_t >= max + log(min_p), whatever the
      // normalisation. Compared in float, as llama.cpp's min_p sampler does, so a token whose
      // probability is exactly min_p of the maximum's (logit log(min_p) below it) stays. The
      // most probable always stays.
      const float min_logit = static_cast<float>(max) + std::log(min_p_);
      while (keep > 1 && printable[order[keep - 1]] < min_logit) --keep;
    }
    for (uint32_t j = keep; j < usable; ++j) kept[order[j]] = false;
  }

  std::array<double, kPrintableCount> weight{};
  double total = 0;
  const double inv_t = 1.0 / static_cast<double>(temperature_);
  for (uint32_t i = 0; i < kPrintableCount; ++i) {
    const float v = printable[i];
    weight[i] = kept[i] ? std::exp((static_cast<double>(v) - max) * inv_t) : 0.0;
    total += weight[i];
  }
  // total >= 1: the maximum's weight is exp(0), and it is always kept (the most probable).
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
