// Engine: the command loop on the reference model (synthetic:tiny on the simulator). Greedy
// and seeded requests give the same bytes in every engine; prefix reuse gives exactly the
// bytes of a full prefill; streaming pieces, stop strings and cancellation behave as the
// OpenAI API does; refused input leaves the session unchanged; reset forgets.
// (Export/import: engine_export_test.cc. Threads: engine_concurrency_test.cc.)
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/engine_test_util.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using testing::EngineRig;
using testing::text_of;
using testing::tiny_config;

constexpr char kPrompt[] = "Once upon a time, in a small town,";

GenerateRequest request_of(std::string prompt, uint32_t max_tokens, float temperature = 0,
                           uint64_t seed = 0) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.temperature = temperature;
  r.seed = seed;
  return r;
}

TEST(EngineTest, SameRequestsGiveTheSameBytesInTwoEngines) {
  EngineRig a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  for (const char* prompt : {kPrompt, "The quick brown fox", "x"}) {
    auto ra = a.generate(prompt, 24);
    auto rb = b.generate(prompt, 24);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->text, rb->text) << prompt;
    EXPECT_EQ(ra->text.size(), 24u);
    EXPECT_EQ(ra->completion_tokens, 24u);
    EXPECT_EQ(ra->finish, FinishReason::kLength);
    for (char c : ra->text) {
      EXPECT_GE(static_cast<uint8_t>(c), kFirstPrintable);
      EXPECT_LE(static_cast<uint8_t>(c), kLastPrintable);
    }
  }
}

TEST(EngineTest, SampledRequestsAreDeterministicForASeed) {
  EngineRig a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  auto request = [](uint64_t seed) {
    GenerateRequest r;
    r.prompt = kPrompt;
    r.max_tokens = 32;
    r.temperature = 1.0f;
    r.seed = seed;
    return r;
  };
  const std::string first = text_of(a.generate(request(7)));
  EXPECT_EQ(first, text_of(b.generate(request(7))));
  EXPECT_EQ(first, text_of(a.generate(request(7))));  // again, now with the prefix cached
  // Some other seed gives other text (32 tokens at temperature 1 cannot all coincide).
  EXPECT_NE(first, text_of(a.generate(request(8))));
}

TEST(EngineTest, ExtendingPromptReusesTheHistoryAndMatchesAFullPrefill) {
  EngineRig a, fresh;
  ASSERT_TRUE(a.ok() && fresh.ok());
  auto first = a.generate(kPrompt, 20);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->cached_tokens, 0u);
  EXPECT_EQ(first->prompt_tokens, std::string(kPrompt).size());
  // The history: the prompt and every generated token but the last.
  const uint64_t history = a.history();
  EXPECT_EQ(history, first->prompt_tokens + first->completion_tokens - 1);

  const std::string second_prompt = kPrompt + first->text + " And then";
  auto second = a.generate(second_prompt, 20);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->cached_tokens, history);
  auto full = fresh.generate(second_prompt, 20);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->cached_tokens, 0u);
  EXPECT_EQ(second->text, full->text);
}

TEST(EngineTest, DivergentPromptGivesTheBytesOfAFullPrefill) {
  EngineRig a, fresh;
  ASSERT_TRUE(a.ok() && fresh.ok());
  ASSERT_TRUE(a.generate(kPrompt, 30).ok());
  // Shares the first 27 bytes ("Once upon a time, in a smal"), then diverges.
  const std::string divergent = "Once upon a time, in a smaller world, far away";
  auto reused = a.generate(divergent, 20);
  auto full = fresh.generate(divergent, 20);
  ASSERT_TRUE(reused.ok() && full.ok());
  EXPECT_LE(reused->cached_tokens, 27u);
  EXPECT_EQ(reused->text, full->text);
  // Back to the first prompt: again the same bytes as a fresh engine.
  EXPECT_EQ(text_of(a.generate(kPrompt, 30)), text_of(fresh.generate(kPrompt, 30)));
}

TEST(EngineTest, StreamedPiecesConcatenateToTheText) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  std::vector<std::string> pieces;
  GenerateRequest request;
  request.prompt = kPrompt;
  request.max_tokens = 25;
  request.on_text = [&pieces](std::string_view piece) { pieces.emplace_back(piece); };
  auto result = rig.generate(std::move(request));
  ASSERT_TRUE(result.ok());
  std::string joined;
  for (const auto& p : pieces) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, result->text);
  EXPECT_EQ(pieces.size(), 25u);  // no stop strings: one piece per token
}

TEST(EngineTest, StopStringCutsTheTextBeforeIt) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  const std::string full = text_of(rig.generate(kPrompt, 40));
  ASSERT_EQ(full.size(), 40u);
  const std::string stop = full.substr(10, 3);
  const size_t at = full.find(stop);  // its first occurrence may be earlier
  ASSERT_TRUE(rig.engine().reset().get().ok());

  std::string streamed;
  GenerateRequest request;
  request.prompt = kPrompt;
  request.max_tokens = 40;
  request.stop = {"never-appears", stop};
  request.on_text = [&streamed](std::string_view piece) { streamed += piece; };
  auto result = rig.generate(std::move(request));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->finish, FinishReason::kStop);
  EXPECT_EQ(finish_reason_name(result->finish), "stop");
  EXPECT_EQ(result->text, full.substr(0, at));
  EXPECT_EQ(streamed, result->text);  // the stop string was never streamed
  // Our choice: the stop string's tokens count as generated.
  EXPECT_EQ(result->completion_tokens, at + stop.size());
}

TEST(EngineTest, UnmatchedStopStringFlushesTheHeldTextAtTheEnd) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  const std::string full = text_of(rig.generate(kPrompt, 12));
  // A stop that starts with the last generated byte and continues with a byte the model can
  // never produce: that byte is held back until the length limit releases it.
  std::string streamed;
  GenerateRequest request;
  request.prompt = kPrompt;
  request.max_tokens = 12;
  request.stop = {full.substr(11, 1) + "\x7f"};
  request.on_text = [&streamed](std::string_view piece) { streamed += piece; };
  auto result = rig.generate(std::move(request));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->finish, FinishReason::kLength);
  EXPECT_EQ(result->text, full);
  EXPECT_EQ(streamed, full);
}

TEST(EngineTest, CancelFromTheCallbackEndsAfterExactlyThatPiece) {
  EngineRig rig, reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  const std::string full = text_of(reference.generate(kPrompt, 30));
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  int pieces = 0;
  GenerateRequest request;
  request.prompt = kPrompt;
  request.max_tokens = 30;
  request.cancel = cancel;
  request.on_text = [&](std::string_view) {
    if (++pieces == 5) cancel->store(true);
  };
  auto result = rig.generate(std::move(request));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->finish, FinishReason::kCancelled);
  EXPECT_EQ(finish_reason_name(result->finish), "cancelled");
  EXPECT_EQ(pieces, 5);
  EXPECT_EQ(result->completion_tokens, 5u);
  EXPECT_EQ(result->text, full.substr(0, 5));
  // The engine stays usable, and the cancelled request's work does not change later bytes.
  EXPECT_EQ(text_of(rig.generate(kPrompt, 30)), full);
}

TEST(EngineTest, CancelBeforeStartTouchesNothing) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(rig.generate(kPrompt, 8).ok());
  const uint64_t history = rig.history();
  GenerateRequest request;
  request.prompt = "Something else entirely";
  request.cancel = std::make_shared<std::atomic<bool>>(true);
  request.on_text = [](std::string_view) { ADD_FAILURE() << "no text after a cancel"; };
  auto result = rig.generate(std::move(request));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->finish, FinishReason::kCancelled);
  EXPECT_EQ(result->text, "");
  EXPECT_EQ(result->completion_tokens, 0u);
  EXPECT_EQ(rig.history(), history);
}

TEST(EngineTest, BadInputIsRefusedAndLeavesTheSessionUnchanged) {
  EngineRig rig, reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  ASSERT_TRUE(rig.generate(kPrompt, 10).ok());
  ASSERT_TRUE(reference.generate(kPrompt, 10).ok());
  const uint64_t history = rig.history();
  const uint32_t context = rig.engine().config().context;

  auto bad = [](std::string prompt, uint32_t max_tokens) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    return r;
  };
  std::vector<GenerateRequest> requests;
  requests.push_back(bad("", 4));
  requests.push_back(bad(std::string(context, 'a'), 0));  // 0: no room left for a token
  requests.push_back(bad(std::string(context + 1, 'a'), 1));
  requests.push_back(bad(std::string(context, 'a'), 1));
  requests.push_back(bad(kPrompt, context));
  requests.push_back(bad(kPrompt, std::numeric_limits<uint32_t>::max()));
  for (const std::vector<std::string>& stop :
       {std::vector<std::string>{"ok", "\xff"}, std::vector<std::string>{"\xc3"},
        std::vector<std::string>{"\xed\xa0\x80"}, std::vector<std::string>{""},
        std::vector<std::string>{std::string(65, 's')},
        std::vector<std::string>{"a", "b", "c", "d", "e"}}) {
    requests.push_back(bad(kPrompt, 4));
    requests.back().stop = stop;
  }
  for (float t : {-0.5f, 2.5f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    requests.push_back(bad(kPrompt, 4));
    requests.back().temperature = t;
  }
  for (float top_p : {0.0f, -0.1f, 1.01f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    requests.push_back(bad(kPrompt, 4));
    requests.back().temperature = 1.0f;
    requests.back().top_p = top_p;
  }
  for (float min_p : {-0.1f, 1.01f, std::numeric_limits<float>::quiet_NaN()}) {
    requests.push_back(bad(kPrompt, 4));
    requests.back().temperature = 1.0f;
    requests.back().min_p = min_p;
  }
  requests.push_back(bad(kPrompt, 4));
  requests.back().logit_bias = {{'a', std::numeric_limits<float>::quiet_NaN()}};
  requests.push_back(bad(kPrompt, 4));
  requests.back().logit_bias = {{'a', 1.0f}, {'b', 2.0f}, {'a', 3.0f}};
  requests.push_back(bad(kPrompt, 4));
  for (uint32_t t = kFirstPrintable; t <= kLastPrintable; ++t) {
    requests.back().logit_bias.emplace_back(static_cast<uint8_t>(t), -100.0f);
  }
  requests.push_back(bad(kPrompt, 4));
  requests.back().logprobs = kMaxTopLogprobs + 1;
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].on_text = [i](std::string_view) { ADD_FAILURE() << "request " << i; };
    auto result = rig.generate(std::move(requests[i]));
    ASSERT_FALSE(result.ok()) << "request " << i;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument)
        << i << ": " << result.status().to_string();
    EXPECT_EQ(rig.history(), history) << "request " << i;
  }
  // The next request gives the bytes it would have given had none of them come.
  const std::string next = std::string(kPrompt) + " more";
  EXPECT_EQ(text_of(rig.generate(next, 16)), text_of(reference.generate(next, 16)));
}

// The limits on stop strings hold exactly: kMaxStopStrings strings of kMaxStopBytes bytes are
// accepted (one byte or one string more is refused, above). Guards an off-by-one that refuses
// a stop string of exactly the maximum length.
TEST(EngineTest, StopStringsAtTheLimitsAreAccepted) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  GenerateRequest request;
  request.prompt = kPrompt;
  request.max_tokens = 4;
  for (size_t i = 0; i < kMaxStopStrings; ++i) {
    request.stop.push_back(std::string(kMaxStopBytes, static_cast<char>('v' + i)));
  }
  auto result = rig.generate(std::move(request));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->completion_tokens, 4u);
}

TEST(EngineTest, ContextErrorSaysWhatDoesNotFit) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  auto result = rig.generate("hello", 300);
  ASSERT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(),
            "this model's context is 256 tokens; the prompt has 5 and max_tokens asks for 300");
  // Exactly the context is accepted.
  auto fits = rig.generate("hello", 251);
  ASSERT_TRUE(fits.ok()) << fits.status().to_string();
  EXPECT_EQ(fits->completion_tokens, 251u);
  EXPECT_EQ(rig.history(), 255u);
}

TEST(EngineTest, ResetForgetsTheHistory) {
  EngineRig rig, fresh;
  ASSERT_TRUE(rig.ok() && fresh.ok());
  ASSERT_TRUE(rig.generate(kPrompt, 10).ok());
  EXPECT_GT(rig.history(), 0u);
  ASSERT_TRUE(rig.engine().reset().get().ok());
  EXPECT_EQ(rig.history(), 0u);
  auto after = rig.generate(kPrompt, 10);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->cached_tokens, 0u);
  EXPECT_EQ(after->text, text_of(fresh.generate(kPrompt, 10)));
}

// ---- Sampling controls (top_p, top_k, logit_bias) ----

bool printable(uint8_t token) { return token >= kFirstPrintable && token <= kLastPrintable; }

// The printable tokens among `top` (most probable first), at most `k` of them.
std::set<uint8_t> top_printable(const TokenLogprob& entry, size_t k) {
  std::set<uint8_t> out;
  for (const auto& [token, logprob] : entry.top) {
    if (out.size() < k && printable(token)) out.insert(token);
  }
  return out;
}

TEST(EngineTest, TopKAndTopPNarrowTheDrawToTheMostProbableTokens) {
  EngineRig a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  GenerateRequest greedy = request_of(kPrompt, 24);
  const std::string greedy_text = text_of(a.generate(greedy));
  // top_k 1 and a tiny nucleus leave only the most probable token: the greedy answer.
  GenerateRequest k1 = request_of(kPrompt, 24, 1.5f, 11);
  k1.top_k = 1;
  EXPECT_EQ(text_of(a.generate(k1)), greedy_text);
  GenerateRequest p0 = request_of(kPrompt, 24, 1.5f, 11);
  p0.top_p = 1e-6f;
  EXPECT_EQ(text_of(a.generate(p0)), greedy_text);
  // top_k 3: every token is among the three most probable printable ones at its position (the
  // log probabilities say which those are: kMaxTopLogprobs covers them here, checked below).
  GenerateRequest k3 = request_of(kPrompt, 32, 2.0f, 5);
  k3.top_k = 3;
  k3.logprobs = kMaxTopLogprobs;
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult narrowed, a.generate(k3));
  ASSERT_EQ(narrowed.logprobs.size(), 32u);
  for (const TokenLogprob& entry : narrowed.logprobs) {
    ASSERT_EQ(top_printable(entry, 3).size(), 3u);
    EXPECT_TRUE(top_printable(entry, 3).contains(entry.token)) << int(entry.token);
  }
  // Deterministic for a seed, in another engine too; and top_p 1 with top_k 0 is the plain
  // draw (the pinned sequence of the sampler tests).
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult again, b.generate(k3));
  EXPECT_EQ(again.text, narrowed.text);
  GenerateRequest off = request_of(kPrompt, 32, 1.0f, 7);
  GenerateRequest explicit_off = off;
  explicit_off.top_p = 1.0f;
  explicit_off.top_k = 0;
  EXPECT_EQ(text_of(a.generate(off)), text_of(b.generate(explicit_off)));
  // A nucleus of 0.5 at temperature 2 differs from the whole distribution (32 tokens).
  GenerateRequest nucleus = off;
  nucleus.temperature = 2.0f;
  GenerateRequest whole = nucleus;
  nucleus.top_p = 0.5f;
  EXPECT_NE(text_of(a.generate(nucleus)), text_of(b.generate(whole)));
}

TEST(EngineTest, GreedyDecodingIgnoresTopPAndTopK) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  const std::string greedy = text_of(rig.generate(request_of(kPrompt, 20)));
  GenerateRequest narrowed = request_of(kPrompt, 20);
  narrowed.top_p = 0.01f;
  narrowed.top_k = 2;
  EXPECT_EQ(text_of(rig.generate(narrowed)), greedy);
  narrowed.min_p = 1.0f;
  EXPECT_EQ(text_of(rig.generate(narrowed)), greedy);
}

// min_p keeps only the tokens at least min_p times as probable as the most probable printable
// one at their position (the log probabilities say which those are).
TEST(EngineTest, MinPNarrowsTheDrawToTokensNearTheMostProbable) {
  EngineRig a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string greedy = text_of(a.generate(request_of(kPrompt, 24)));
  // min_p 1 leaves the most probable token alone: the greedy answer, at any temperature.
  GenerateRequest one = request_of(kPrompt, 24, 2.0f, 11);
  one.min_p = 1.0f;
  EXPECT_EQ(text_of(a.generate(one)), greedy);
  // min_p 0.3 at temperature 2: every token's probability is at least 0.3 of the most
  // probable printable token's, and the draw differs from the unfiltered one (same seed).
  GenerateRequest narrowed = request_of(kPrompt, 48, 2.0f, 5);
  narrowed.min_p = 0.3f;
  narrowed.logprobs = kMaxTopLogprobs;
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult result, a.generate(narrowed));
  ASSERT_EQ(result.logprobs.size(), 48u);
  for (const TokenLogprob& entry : result.logprobs) {
    const std::set<uint8_t> best = top_printable(entry, 1);
    ASSERT_EQ(best.size(), 1u);
    float best_logprob = 0;
    for (const auto& [token, logprob] : entry.top) {
      if (token == *best.begin()) best_logprob = logprob;
    }
    EXPECT_GE(entry.logprob, best_logprob + std::log(0.3f) - 1e-5f) << int(entry.token);
  }
  // Deterministic for a seed in another engine; min_p 0 is the plain draw.
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult again, b.generate(narrowed));
  EXPECT_EQ(again.text, result.text);
  GenerateRequest whole = narrowed;
  whole.min_p = 0.0f;
  whole.logprobs = 0;
  GenerateRequest plain = request_of(kPrompt, 48, 2.0f, 5);
  const std::string plain_text = text_of(b.generate(plain));
  EXPECT_EQ(text_of(a.generate(whole)), plain_text);
  EXPECT_NE(result.text, plain_text);
}

TEST(EngineTest, LogitBiasBansAndForcesTokensInGreedyAndSampledDecoding) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  const std::string greedy = text_of(rig.generate(request_of(kPrompt, 20)));
  ASSERT_FALSE(greedy.empty());
  // Banning the greedy choice of every position it took: none of them is produced.
  GenerateRequest banned = request_of(kPrompt, 20);
  std::set<uint8_t> ban(greedy.begin(), greedy.end());
  for (uint8_t token : ban) banned.logit_bias.emplace_back(token, -100.0f);
  const std::string without = text_of(rig.generate(banned));
  for (char c : without) EXPECT_FALSE(ban.contains(static_cast<uint8_t>(c))) << c;
  // A bias that forces a printable token: every token is that one, greedy or sampled.
  GenerateRequest forced = request_of(kPrompt, 12);
  forced.logit_bias = {{'Z', 100.0f}, {'\n', 100.0f}};  // '\n' is never generated
  EXPECT_EQ(text_of(rig.generate(forced)), std::string(12, 'Z'));
  forced.temperature = 1.5f;
  forced.seed = 3;
  EXPECT_EQ(text_of(rig.generate(forced)), std::string(12, 'Z'));
  // Two forced tokens: the lowest index.
  forced.logit_bias = {{'Z', 150.0f}, {'B', 100.0f}};
  EXPECT_EQ(text_of(rig.generate(forced)), std::string(12, 'B'));
  // Forcing a non-printable token changes nothing.
  GenerateRequest control = request_of(kPrompt, 20);
  control.logit_bias = {{'\n', 100.0f}, {0x80, 50.0f}};
  EXPECT_EQ(text_of(rig.generate(control)), greedy);
  // A ban in sampled decoding: the banned tokens never appear.
  GenerateRequest sampled = request_of(kPrompt, 64, 2.0f, 9);
  for (char c = 'a'; c <= 'z'; ++c) sampled.logit_bias.emplace_back(c, -1000.0f);
  for (char c : text_of(rig.generate(sampled))) EXPECT_FALSE(c >= 'a' && c <= 'z') << c;
  // A moderate bias shifts the greedy choice toward the token (enough to win here).
  GenerateRequest nudged = request_of(kPrompt, 8);
  nudged.logit_bias = {{'q', 99.0f}};
  EXPECT_EQ(text_of(rig.generate(nudged)), std::string(8, 'q'));
}

TEST(EngineTest, ValidationNamesTheSamplingFieldItRefuses) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  GenerateRequest top_p = request_of(kPrompt, 4, 1.0f);
  top_p.top_p = 0.0f;
  GenerateRequest bias = request_of(kPrompt, 4);
  bias.logit_bias = {{'a', std::numeric_limits<float>::infinity()}};
  GenerateRequest logprobs = request_of(kPrompt, 4);
  logprobs.logprobs = 21;
  GenerateRequest min_p = request_of(kPrompt, 4);  // refused even where greedy ignores it
  min_p.min_p = 1.5f;
  for (auto& [request, field] : std::vector<std::pair<GenerateRequest, std::string>>{
           {top_p, "top_p"}, {bias, "logit_bias"}, {logprobs, "logprobs"}, {min_p, "min_p"}}) {
    auto result = rig.generate(request);
    SIESTA_EXPECT_CODE(result, StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(field), std::string::npos)
        << result.status().to_string();
  }
  // The limits themselves are accepted.
  GenerateRequest limits = request_of(kPrompt, 4, 2.0f);
  limits.top_p = 1.0f;
  limits.top_k = 1000;
  limits.min_p = 1.0f;
  limits.logprobs = kMaxTopLogprobs;
  for (uint32_t t = kFirstPrintable; t < kLastPrintable; ++t) {  // all but one banned
    limits.logit_bias.emplace_back(static_cast<uint8_t>(t), -100.0f);
  }
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult result, rig.generate(limits));
  EXPECT_EQ(result.text, std::string(4, static_cast<char>(kLastPrintable)));
}

// ---- Log probabilities and token ids ----

TEST(EngineTest, LogprobsAreTheModelsLogSoftmaxForEveryGeneratedToken) {
  EngineRig rig, plain;
  ASSERT_TRUE(rig.ok() && plain.ok());
  GenerateRequest request = request_of(kPrompt, 6);
  request.logprobs = 5;
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult result, rig.generate(request));
  EXPECT_EQ(result.text, text_of(plain.generate(kPrompt, 6))) << "logprobs change no token";
  ASSERT_EQ(result.logprobs.size(), 6u);
  ASSERT_EQ(result.tokens.size(), 6u);
  // The reference: a session reading the prompt and the answer, its logits' log-softmax.
  test_util::Rig reference;
  SIESTA_ASSERT_OK(reference.init(tiny_config()));
  SIESTA_ASSERT_OK(test_util::prefill(*reference.session, kPrompt));
  for (size_t i = 0; i < result.logprobs.size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const TokenLogprob& entry = result.logprobs[i];
    EXPECT_EQ(entry.token, result.tokens[i]);
    EXPECT_EQ(entry.token, static_cast<uint8_t>(result.text[i]));
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<float> logits, reference.session->next_logits());
    const std::vector<float> want = log_softmax(logits);
    EXPECT_EQ(entry.logprob, want[entry.token]);
    ASSERT_EQ(entry.top.size(), 5u);
    EXPECT_EQ(entry.top, most_probable(want, 5));
    for (size_t j = 1; j < entry.top.size(); ++j) {
      EXPECT_GE(entry.top[j - 1].second, entry.top[j].second);
    }
    EXPECT_LE(entry.logprob, 0.0f);
    EXPECT_LE(entry.logprob, entry.top[0].second);
    double total = 0;
    for (float lp : want) total += std::exp(static_cast<double>(lp));
    EXPECT_NEAR(total, 1.0, 1e-5) << "real probabilities";
    SIESTA_ASSERT_OK(reference.session->feed(entry.token));
  }
  // Without the request, none; sampled with logprobs, the same text as without.
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult none, plain.generate(request_of(kPrompt, 6)));
  EXPECT_TRUE(none.logprobs.empty());
  GenerateRequest sampled = request_of(kPrompt, 16, 1.0f, 4);
  const std::string sampled_text = text_of(plain.generate(sampled));
  sampled.logprobs = 1;
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult with, rig.generate(sampled));
  EXPECT_EQ(with.text, sampled_text);
  ASSERT_EQ(with.logprobs.size(), 16u);
  EXPECT_EQ(with.logprobs[0].top.size(), 1u);
}

TEST(EngineTest, TokensAndLogprobsIncludeTheStopString) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  const std::string answer = text_of(rig.generate(kPrompt, 16));
  ASSERT_EQ(answer.size(), 16u);
  GenerateRequest request = request_of(kPrompt, 16);
  request.stop = {answer.substr(5, 3)};
  request.logprobs = 2;
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult stopped, rig.generate(request));
  ASSERT_EQ(stopped.finish, FinishReason::kStop);
  const size_t at = answer.find(answer.substr(5, 3));
  EXPECT_EQ(stopped.text, answer.substr(0, at));
  EXPECT_EQ(stopped.completion_tokens, at + 3);
  EXPECT_EQ(std::string(stopped.tokens.begin(), stopped.tokens.end()), answer.substr(0, at + 3));
  EXPECT_EQ(stopped.logprobs.size(), stopped.tokens.size());
  // At the length limit, the tokens are the text's bytes.
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult plain, rig.generate(request_of(kPrompt, 16)));
  EXPECT_EQ(std::string(plain.tokens.begin(), plain.tokens.end()), plain.text);
}

// ---- max_tokens 0 ----

TEST(EngineTest, MaxTokensZeroGeneratesUntilTheContextIsFull) {
  EngineRig rig, reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult full, rig.generate(request_of("hello", 0)));
  EXPECT_EQ(full.completion_tokens, 251u);  // 5 + 251 = the context of 256
  EXPECT_EQ(full.finish, FinishReason::kLength);
  EXPECT_EQ(rig.history(), 255u);
  EXPECT_EQ(full.text, text_of(reference.generate("hello", 251)));
  // A stop string ends it earlier; so does the prompt's own length.
  GenerateRequest stopping = request_of("hello", 0);
  stopping.stop = {full.text.substr(10, 4)};
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult stopped, rig.generate(stopping));
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_LE(stopped.completion_tokens, 14u);
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult one,
                              rig.generate(request_of(std::string(255, 'a'), 0)));
  EXPECT_EQ(one.completion_tokens, 1u);
  auto none = rig.generate(request_of(std::string(256, 'a'), 0));
  SIESTA_EXPECT_CODE(none, StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(),
            "this model's context is 256 tokens; the prompt has 256, which leaves no room for a "
            "generated token");
}

// ---- The prompt-end checkpoint: a prompt asked again reuses all of it ----

TEST(EngineTest, ARegenerateReusesTheWholePromptAndGivesAFreshEnginesBytes) {
  for (float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    EngineRig rig;
    ASSERT_TRUE(rig.ok());
    GenerateRequest request = request_of(kPrompt, 20, temperature, 42);
    SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult first, rig.generate(request));
    EXPECT_EQ(first.cached_tokens, 0u);
    SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult again, rig.generate(request));
    EXPECT_EQ(again.cached_tokens, again.prompt_tokens) << "the whole prompt, none read again";
    EXPECT_EQ(again.text, first.text);
    EngineRig fresh;
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(again.text, text_of(fresh.generate(request)));
    // Another seed on the same prompt: reused whole too, and a fresh engine's bytes.
    request.seed = 43;
    SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult other, rig.generate(request));
    EXPECT_EQ(other.cached_tokens, other.prompt_tokens);
    EngineRig fresh_other;
    ASSERT_TRUE(fresh_other.ok());
    EXPECT_EQ(other.text, text_of(fresh_other.generate(request)));
  }
}

// The figures of issue 26 on synthetic:small (checkpoint interval 64): a regenerate of a
// 244-token prompt reused 192 tokens and a 60-token prompt asked again 0; both reuse the whole
// prompt now. An edit after the prompt (the client's own answer) reuses the prompt too.
TEST(EngineTest, OnTheSmallModelARegenerateAndAShortPromptReuseTheWholePrompt) {
  const ModelConfig small = tiny_config(std::nullopt, "synthetic:small");
  EngineRig rig(small), fresh(small);
  ASSERT_TRUE(rig.ok() && fresh.ok());
  std::string long_prompt;
  while (long_prompt.size() < 244) long_prompt += "Once upon a time there was a small engine. ";
  long_prompt.resize(244);
  const std::string short_prompt = long_prompt.substr(0, 60);
  for (const std::string& prompt : {long_prompt, short_prompt}) {
    SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult first, rig.generate(request_of(prompt, 8)));
    SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult again, rig.generate(request_of(prompt, 8)));
    std::printf("synthetic:small, %zu-token prompt asked again: %u of %u tokens reused\n",
                prompt.size(), again.cached_tokens, again.prompt_tokens);
    EXPECT_EQ(again.cached_tokens, prompt.size());
    EXPECT_EQ(again.text, first.text);
    EXPECT_EQ(again.text, text_of(fresh.generate(request_of(prompt, 8))));
    ASSERT_TRUE(fresh.engine().reset().get().ok());
    // The prompt, then an answer of the client's own after it.
    const std::string edited = prompt + first.text.substr(0, 2) + "~ and on";
    SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult after_edit, rig.generate(request_of(edited, 8)));
    EXPECT_EQ(after_edit.cached_tokens, prompt.size());
    EXPECT_EQ(after_edit.text, text_of(fresh.generate(request_of(edited, 8))));
    ASSERT_TRUE(fresh.engine().reset().get().ok());
  }
}

// After a save and a restore the prompt-end checkpoint is still there.
TEST(EngineTest, ARestoredSessionStillReusesTheWholePrompt) {
  siesta::testing::OffloadEngineRig rig;
  EngineRig fresh;
  ASSERT_TRUE(fresh.ok());
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult first, rig.generate(kPrompt, 12));
  rig.sleep_session();
  ASSERT_EQ(rig.state(), OffloadState::kDisk);
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult again, rig.generate(kPrompt, 12));
  EXPECT_TRUE(again.admission.restored);
  EXPECT_EQ(again.cached_tokens, again.prompt_tokens);
  EXPECT_EQ(again.text, first.text);
  EXPECT_EQ(again.text, text_of(fresh.generate(kPrompt, 12)));
}

TEST(EngineTest, StatusDescribesTheModelAndCountsCommands) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  EngineStatus s = rig.engine().status();
  EXPECT_EQ(s.model, "synthetic:tiny");
  EXPECT_EQ(s.kv_type, KvType::kF32);
  EXPECT_EQ(s.context, 256u);
  EXPECT_EQ(s.history_tokens, 0u);
  EXPECT_FALSE(s.busy);
  EXPECT_EQ(s.queued_commands, 0u);
  EXPECT_EQ(s.commands_run, 0u);
  ASSERT_TRUE(rig.generate("abc", 3).ok());
  ASSERT_FALSE(rig.generate("", 3).ok());  // refused commands count as run too
  s = rig.engine().status();
  EXPECT_EQ(s.commands_run, 2u);
  EXPECT_EQ(s.history_tokens, 5u);
  EXPECT_FALSE(s.busy);
}

}  // namespace
}  // namespace siesta::engine
