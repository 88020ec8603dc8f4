// Sampler: validation of the temperature, determinism for a seed, only printable tokens,
// and a distribution that follows softmax(logits / T) (checked with a fixed seed, so the test
// is exact and never flaky).
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <vector>

namespace siesta::engine {
namespace {

std::vector<float> flat_logits(float value = 0.0f) { return std::vector<float>(kVocabSize, value); }

// Logits that favour a few printable tokens, and put the largest values on non-printable
// ones, which the sampler must never pick.
std::vector<float> shaped_logits() {
  std::vector<float> l(kVocabSize, -4.0f);
  l['a'] = 2.0f;
  l['b'] = 1.0f;
  l['c'] = 0.5f;
  l[0] = 50.0f;     // NUL
  l['\n'] = 50.0f;  // newline
  l[0x7f] = 50.0f;  // DEL
  l[0xff] = 50.0f;
  return l;
}

std::vector<uint8_t> draw(float temperature, uint64_t seed, const std::vector<float>& logits,
                          int n) {
  Result<Sampler> s = Sampler::create(temperature, seed);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  std::vector<uint8_t> out;
  for (int i = 0; i < n; ++i) {
    Result<uint8_t> t = s->sample(logits);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    out.push_back(t.value_or(0));
  }
  return out;
}

TEST(SamplerTest, TemperatureMustBeFiniteAndWithinZeroToTwo) {
  EXPECT_TRUE(validate_temperature(0.0f).ok());
  EXPECT_TRUE(validate_temperature(0.7f).ok());
  EXPECT_TRUE(validate_temperature(2.0f).ok());
  for (float bad :
       {-0.1f, 2.001f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Status s = validate_temperature(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("[0, 2]"), std::string::npos) << s.message();
    EXPECT_EQ(Sampler::create(bad, 1).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const auto logits = flat_logits();
  const auto a = draw(1.0f, 42, logits, 200);
  EXPECT_EQ(a, draw(1.0f, 42, logits, 200));
  EXPECT_NE(a, draw(1.0f, 43, logits, 200));
}

// The generator is our own, so a seed gives the same tokens on every machine and compiler:
// pin a few so that a change to the algorithm is noticed (it would change served text).
TEST(SamplerTest, SequenceForAFixedSeedIsPinned) {
  const auto first = draw(1.0f, 0, flat_logits(), 8);
  const auto again = draw(1.0f, 0, flat_logits(), 8);
  EXPECT_EQ(first, again);
  // With flat logits the token is kFirstPrintable + floor(u * 95) for each uniform u; recompute
  // u from the documented generator (xoshiro256** seeded with splitmix64) independently.
  uint64_t x = 0;
  auto splitmix = [&x] {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t s[4] = {splitmix(), splitmix(), splitmix(), splitmix()};
  auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  for (uint8_t got : first) {
    const uint64_t r = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    const double u = static_cast<double>(r >> 11) * 0x1.0p-53;
    const auto want = static_cast<uint8_t>(kFirstPrintable + static_cast<uint32_t>(u * 95.0));
    EXPECT_EQ(got, want);
  }
}

TEST(SamplerTest, NeverPicksANonPrintableToken) {
  const auto logits = shaped_logits();
  for (float t : {0.1f, 1.0f, 2.0f}) {
    for (uint8_t token : draw(t, 7, logits, 2000)) {
      ASSERT_GE(token, kFirstPrintable);
      ASSERT_LE(token, kLastPrintable);
    }
  }
}

TEST(SamplerTest, FrequenciesFollowSoftmaxOfLogitsOverTemperature) {
  const auto logits = shaped_logits();
  const float temperature = 0.8f;
  const int n = 20000;
  std::vector<int> count(kVocabSize, 0);
  for (uint8_t token : draw(temperature, 2026, logits, n)) ++count[token];

  double total = 0;
  std::vector<double> p(kVocabSize, 0);
  for (uint32_t t = kFirstPrintable; t <= kLastPrintable; ++t) {
    p[t] = std::exp((logits[t] - 2.0) / temperature);
    total += p[t];
  }
  for (uint32_t t : {uint32_t{'a'}, uint32_t{'b'}, uint32_t{'c'}}) {
    const double expected = n * p[t] / total;
    // Five standard deviations of a binomial count: the seed is fixed, so this is exact for
    // this run; the bound documents how close "follows softmax" is.
    const double sd = std::sqrt(expected * (1 - p[t] / total));
    EXPECT_NEAR(count[t], expected, 5 * sd) << "token " << static_cast<char>(t);
  }
  EXPECT_GT(count['a'], count['b']);
  EXPECT_GT(count['b'], count['c']);
}

TEST(SamplerTest, LowTemperatureConcentratesOnTheMaximum) {
  for (uint8_t token : draw(0.01f, 3, shaped_logits(), 500)) EXPECT_EQ(token, 'a');
}

TEST(SamplerTest, TemperatureZeroIsGreedyWithLowestIndexOnTies) {
  auto logits = flat_logits(1.0f);
  for (uint8_t token : draw(0.0f, 9, logits, 5)) EXPECT_EQ(token, kFirstPrintable);
  logits['q'] = 3.0f;
  logits['z'] = 3.0f;
  for (uint8_t token : draw(0.0f, 9, logits, 5)) EXPECT_EQ(token, 'q');
}

TEST(SamplerTest, NonFiniteLogits) {
  auto logits = flat_logits(-std::numeric_limits<float>::infinity());
  logits['x'] = std::numeric_limits<float>::quiet_NaN();
  logits['y'] = 0.0f;
  for (uint8_t token : draw(1.0f, 5, logits, 50)) EXPECT_EQ(token, 'y');
  logits['k'] = std::numeric_limits<float>::infinity();
  for (uint8_t token : draw(1.0f, 5, logits, 50)) EXPECT_EQ(token, 'k');

  Result<Sampler> s = Sampler::create(1.0f, 5);
  ASSERT_TRUE(s.ok());
  auto hopeless = flat_logits(std::numeric_limits<float>::quiet_NaN());
  hopeless['\n'] = 1.0f;  // usable, but not printable
  EXPECT_EQ(s->sample(hopeless).status().code(), StatusCode::kInvalidArgument);
}

TEST(SamplerTest, WrongLogitCountIsRefused) {
  Result<Sampler> s = Sampler::create(1.0f, 5);
  ASSERT_TRUE(s.ok());
  std::vector<float> short_logits(kVocabSize - 1, 0.0f);
  EXPECT_EQ(s->sample(short_logits).status().code(), StatusCode::kInvalidArgument);
}

// ---- top_k and top_p ----

std::vector<uint8_t> draw_narrowed(float temperature, uint64_t seed, float top_p, uint32_t top_k,
                                   const std::vector<float>& logits, int n) {
  Result<Sampler> s = Sampler::create(temperature, seed, top_p, top_k);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  std::vector<uint8_t> out;
  for (int i = 0; i < n; ++i) {
    Result<uint8_t> t = s->sample(logits);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    out.push_back(t.value_or(0));
  }
  return out;
}

TEST(SamplerTest, TopPMustBeFiniteAndWithinZeroExclusiveToOne) {
  EXPECT_TRUE(validate_top_p(1.0f).ok());
  EXPECT_TRUE(validate_top_p(1e-9f).ok());
  for (float bad : {0.0f, -0.5f, 1.0001f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    const Status s = validate_top_p(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("top_p"), std::string::npos) << s.message();
    EXPECT_EQ(Sampler::create(1.0f, 1, bad).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(SamplerTest, WithTheFiltersOffTheDrawIsThePlainOne) {
  const auto logits = shaped_logits();
  EXPECT_EQ(draw_narrowed(0.9f, 77, 1.0f, 0, logits, 300), draw(0.9f, 77, logits, 300));
  // A top_k at or above the candidates' count keeps them all: the same draw too.
  EXPECT_EQ(draw_narrowed(0.9f, 77, 1.0f, 95, logits, 300), draw(0.9f, 77, logits, 300));
  EXPECT_EQ(draw_narrowed(0.9f, 77, 1.0f, 1000, logits, 300), draw(0.9f, 77, logits, 300));
}

TEST(SamplerTest, TopKKeepsTheKMostProbableWithTiesByLowestIndex) {
  auto logits = shaped_logits();  // printable: a 2, b 1, c 0.5, the rest -4
  for (uint8_t token : draw_narrowed(2.0f, 1, 1.0f, 1, logits, 200)) EXPECT_EQ(token, 'a');
  std::set<uint8_t> seen;
  for (uint8_t token : draw_narrowed(2.0f, 1, 1.0f, 2, logits, 2000)) seen.insert(token);
  EXPECT_EQ(seen, (std::set<uint8_t>{'a', 'b'}));
  // Ties at the boundary: of the 92 tokens at -4, the lowest index (' ') is the 4th.
  seen.clear();
  for (uint8_t token : draw_narrowed(2.0f, 1, 1.0f, 4, logits, 4000)) seen.insert(token);
  EXPECT_EQ(seen, (std::set<uint8_t>{'a', 'b', 'c', ' '}));
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleusReachingIt) {
  // Probabilities at temperature 1 over the printable tokens: 'a' and 'b' far above the rest.
  std::vector<float> logits(kVocabSize, -30.0f);
  logits['a'] = std::log(0.5f);
  logits['b'] = std::log(0.3f);
  logits['c'] = std::log(0.2f);
  logits[0] = 50.0f;  // not printable: not part of the distribution
  auto kept = [&](float top_p) {
    std::set<uint8_t> seen;
    for (uint8_t token : draw_narrowed(2.0f, 5, top_p, 0, logits, 3000)) seen.insert(token);
    return seen;
  };
  EXPECT_EQ(kept(0.4f), (std::set<uint8_t>{'a'}));
  EXPECT_EQ(kept(0.5f), (std::set<uint8_t>{'a'}));  // 0.5 reaches it (>=)
  EXPECT_EQ(kept(0.6f), (std::set<uint8_t>{'a', 'b'}));
  EXPECT_EQ(kept(0.9f), (std::set<uint8_t>{'a', 'b', 'c'}));
  // top_k first, then the nucleus over what it kept: of {a, b}, 0.6 of 0.8 keeps a only.
  std::set<uint8_t> both;
  for (uint8_t token : draw_narrowed(2.0f, 5, 0.6f, 2, logits, 3000)) both.insert(token);
  EXPECT_EQ(both, (std::set<uint8_t>{'a'}));
}

TEST(SamplerTest, TheNarrowedDrawIsDeterministicAndFollowsTheRenormalisedSoftmax) {
  const auto logits = shaped_logits();
  const auto a = draw_narrowed(1.0f, 123, 0.9f, 3, logits, 20000);
  EXPECT_EQ(a, draw_narrowed(1.0f, 123, 0.9f, 3, logits, 20000));
  std::vector<int> count(kVocabSize, 0);
  for (uint8_t token : a) ++count[token];
  // softmax(2, 1, 0.5) at temperature 1 covers 0.9 with all three: each drawn in proportion.
  const double total = std::exp(0.0) + std::exp(-1.0) + std::exp(-1.5);
  for (auto [token, logit] : {std::pair{'a', 2.0}, {'b', 1.0}, {'c', 0.5}}) {
    const double p = std::exp(logit - 2.0) / total;
    const double sd = std::sqrt(20000 * p * (1 - p));
    EXPECT_NEAR(count[static_cast<uint8_t>(token)], 20000 * p, 5 * sd) << token;
  }
  EXPECT_EQ(count['a'] + count['b'] + count['c'], 20000);
}

TEST(SamplerTest, GreedyIgnoresTheFilters) {
  auto logits = flat_logits(1.0f);
  logits['m'] = 3.0f;
  for (uint8_t token : draw_narrowed(0.0f, 9, 0.01f, 1, logits, 5)) EXPECT_EQ(token, 'm');
}

// ---- min_p ----

std::set<uint8_t> min_p_kept(float min_p, float top_p, uint32_t top_k,
                             const std::vector<float>& logits, int n = 4000) {
  Result<Sampler> s = Sampler::create(2.0f, 17, top_p, top_k, min_p);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  std::set<uint8_t> seen;
  for (int i = 0; i < n; ++i) {
    Result<uint8_t> t = s->sample(logits);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    seen.insert(t.value_or(0));
  }
  return seen;
}

TEST(SamplerTest, MinPMustBeFiniteAndWithinZeroToOne) {
  for (float fine : {0.0f, 0.05f, 1.0f}) {
    EXPECT_TRUE(validate_min_p(fine).ok()) << fine;
    EXPECT_TRUE(Sampler::create(1.0f, 1, 1.0f, 0, fine).ok()) << fine;
  }
  for (float bad : {-0.01f, 1.0001f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    const Status s = validate_min_p(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("min_p"), std::string::npos) << s.message();
    EXPECT_EQ(Sampler::create(1.0f, 1, 1.0f, 0, bad).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(SamplerTest, MinPKeepsTheTokensAtLeastThatShareOfTheMostProbable) {
  // Probabilities relative to 'a': b 0.5, c 0.25, d 0.1; everything else ~e^-30 of it.
  std::vector<float> logits(kVocabSize, -30.0f);
  logits['a'] = 0.0f;
  logits['b'] = std::log(0.5f);
  logits['c'] = std::log(0.25f);
  logits['d'] = std::log(0.1f);
  logits[0] = 50.0f;  // not printable: neither drawn nor the maximum min_p is relative to
  EXPECT_EQ(min_p_kept(0.6f, 1.0f, 0, logits), (std::set<uint8_t>{'a'}));
  EXPECT_EQ(min_p_kept(0.5f, 1.0f, 0, logits), (std::set<uint8_t>{'a', 'b'}));  // >= keeps b
  EXPECT_EQ(min_p_kept(0.2f, 1.0f, 0, logits), (std::set<uint8_t>{'a', 'b', 'c'}));
  EXPECT_EQ(min_p_kept(0.05f, 1.0f, 0, logits), (std::set<uint8_t>{'a', 'b', 'c', 'd'}));
  // 1 keeps the most probable alone; with top_k and top_p it narrows what they left.
  EXPECT_EQ(min_p_kept(1.0f, 1.0f, 0, logits), (std::set<uint8_t>{'a'}));
  EXPECT_EQ(min_p_kept(0.2f, 1.0f, 2, logits), (std::set<uint8_t>{'a', 'b'}));
  // The nucleus of 0.9 (0.9 x 1.85 = 1.665: a + b = 1.5 falls short, a + b + c = 1.75
  // reaches it) keeps a, b, c; min_p 0.3 then drops c, and 0.2 keeps the nucleus whole.
  EXPECT_EQ(min_p_kept(0.0f, 0.9f, 0, logits), (std::set<uint8_t>{'a', 'b', 'c'}));
  EXPECT_EQ(min_p_kept(0.3f, 0.9f, 0, logits), (std::set<uint8_t>{'a', 'b'}));
  EXPECT_EQ(min_p_kept(0.05f, 0.9f, 0, logits), (std::set<uint8_t>{'a', 'b', 'c'}));
  // Ties with the most probable all stay at min_p 1.
  logits['b'] = 0.0f;
  EXPECT_EQ(min_p_kept(1.0f, 1.0f, 0, logits), (std::set<uint8_t>{'a', 'b'}));
}

TEST(SamplerTest, MinPZeroIsThePlainDrawAndTheNarrowedOneIsRenormalised) {
  const auto logits = shaped_logits();  // printable: a 2, b 1, c 0.5, the rest -4
  Result<Sampler> off = Sampler::create(0.9f, 77, 1.0f, 0, 0.0f);
  ASSERT_TRUE(off.ok());
  std::vector<uint8_t> plain;
  for (int i = 0; i < 300; ++i) plain.push_back(off->sample(logits).value_or(0));
  EXPECT_EQ(plain, draw(0.9f, 77, logits, 300));
  // min_p 0.3 keeps a (1), b (e^-1 = 0.37) and drops c (e^-1.5 = 0.22): a and b are drawn
  // in proportion to their softmax at temperature 1 over the two.
  Result<Sampler> narrowed = Sampler::create(1.0f, 123, 1.0f, 0, 0.3f);
  ASSERT_TRUE(narrowed.ok());
  std::vector<int> count(kVocabSize, 0);
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) ++count[narrowed->sample(logits).value_or(0)];
  EXPECT_EQ(count['a'] + count['b'], kDraws);
  const double p = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(count['a'], kDraws * p, 5 * std::sqrt(kDraws * p * (1 - p)));
}

TEST(SamplerTest, GreedyIgnoresMinP) {
  auto logits = flat_logits(1.0f);
  logits['m'] = 3.0f;
  Result<Sampler> s = Sampler::create(0.0f, 9, 1.0f, 0, 1.0f);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->sample(logits).value_or(0), 'm');
  EXPECT_EQ(s->min_p(), 1.0f);
}

// ---- logit bias ----

TEST(SamplerTest, LogitBiasValidation) {
  EXPECT_TRUE(validate_logit_bias({}).ok());
  const std::vector<std::pair<uint8_t, float>> fine = {{'a', -100.0f}, {0, 100.0f}, {255, 3.0f}};
  EXPECT_TRUE(validate_logit_bias(fine).ok());
  for (const std::vector<std::pair<uint8_t, float>>& bad :
       {std::vector<std::pair<uint8_t, float>>{{'a', std::numeric_limits<float>::quiet_NaN()}},
        std::vector<std::pair<uint8_t, float>>{{'a', -std::numeric_limits<float>::infinity()}},
        std::vector<std::pair<uint8_t, float>>{{'a', 1.0f}, {'a', 1.0f}}}) {
    const Status s = validate_logit_bias(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("logit_bias"), std::string::npos) << s.message();
  }
  std::vector<std::pair<uint8_t, float>> every;
  for (uint32_t t = kFirstPrintable; t <= kLastPrintable; ++t) {
    every.emplace_back(static_cast<uint8_t>(t), -100.0f);
  }
  every.emplace_back('\n', 5.0f);  // a usable non-printable token does not help
  EXPECT_EQ(validate_logit_bias(every).code(), StatusCode::kInvalidArgument);
  every.back().second = -100.0f;
  every.front().second = -99.0f;  // one printable token left
  every.pop_back();
  EXPECT_TRUE(validate_logit_bias(every).ok());
}

TEST(SamplerTest, LogitBiasAddsBansAndForces) {
  auto logits = flat_logits(1.0f);
  apply_logit_bias(logits, std::vector<std::pair<uint8_t, float>>{
                               {'a', 2.5f}, {'b', -100.0f}, {'c', 100.0f}, {'d', -3.0f}});
  EXPECT_EQ(logits['a'], 3.5f);
  EXPECT_EQ(logits['b'], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits['c'], std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits['d'], -2.0f);
  EXPECT_EQ(logits['e'], 1.0f);
  for (uint8_t token : draw(1.0f, 2, logits, 50)) EXPECT_EQ(token, 'c');
  for (uint8_t token : draw(0.0f, 2, logits, 5)) EXPECT_EQ(token, 'c');
}

// ---- log probabilities ----

TEST(SamplerTest, LogSoftmaxIsOverTheWholeVocabulary) {
  std::vector<float> logits(kVocabSize, 0.0f);
  logits[0] = 3.0f;  // not printable, but part of the distribution
  logits['a'] = 1.0f;
  const std::vector<float> lp = log_softmax(logits);
  ASSERT_EQ(lp.size(), kVocabSize);
  const double z = std::exp(3.0) + std::exp(1.0) + (kVocabSize - 2);
  EXPECT_NEAR(lp[0], 3.0 - std::log(z), 1e-6);
  EXPECT_NEAR(lp['a'], 1.0 - std::log(z), 1e-6);
  EXPECT_NEAR(lp['b'], -std::log(z), 1e-6);
  double total = 0;
  for (float v : lp) total += std::exp(static_cast<double>(v));
  EXPECT_NEAR(total, 1.0, 1e-6);
  // Shifting every logit changes nothing.
  std::vector<float> shifted = logits;
  for (float& v : shifted) v += 1000.0f;
  const std::vector<float> lp_shifted = log_softmax(shifted);
  for (uint32_t t = 0; t < kVocabSize; ++t) EXPECT_NEAR(lp_shifted[t], lp[t], 1e-4) << t;
  // Non-finite logits: NaN and -inf have probability 0; +inf ones share it.
  logits['x'] = std::numeric_limits<float>::quiet_NaN();
  logits['y'] = -std::numeric_limits<float>::infinity();
  const std::vector<float> odd = log_softmax(logits);
  EXPECT_EQ(odd['x'], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(odd['y'], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isfinite(odd['a']));
  logits['p'] = std::numeric_limits<float>::infinity();
  logits['q'] = std::numeric_limits<float>::infinity();
  const std::vector<float> forced = log_softmax(logits);
  EXPECT_FLOAT_EQ(forced['p'], -std::log(2.0f));
  EXPECT_FLOAT_EQ(forced['q'], -std::log(2.0f));
  EXPECT_EQ(forced['a'], -std::numeric_limits<float>::infinity());
}

TEST(SamplerTest, MostProbableIsSortedWithTiesByLowestIndex) {
  std::vector<float> lp(kVocabSize, -10.0f);
  lp[7] = -1.0f;
  lp[200] = -0.5f;
  lp[3] = -1.0f;
  const auto top = most_probable(lp, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0], (std::pair<uint8_t, float>{200, -0.5f}));
  EXPECT_EQ(top[1], (std::pair<uint8_t, float>{3, -1.0f}));
  EXPECT_EQ(top[2], (std::pair<uint8_t, float>{7, -1.0f}));
  EXPECT_EQ(top[3], (std::pair<uint8_t, float>{0, -10.0f}));
  EXPECT_TRUE(most_probable(lp, 0).empty());
  EXPECT_EQ(most_probable(lp, 1000).size(), kVocabSize);
}

}  // namespace
}  // namespace siesta::engine
