// Engine: the command loop on the reference model (synthetic:tiny on the simulator). Greedy
// and seeded requests give the same bytes in every engine; prefix reuse gives exactly the
// bytes of a full prefill; streaming pieces, stop strings and cancellation behave as the
// OpenAI API does; refused input leaves the session unchanged; reset forgets.
// (Export/import: engine_export_test.cc. Threads: engine_concurrency_test.cc.)
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using testing::EngineRig;
using testing::text_of;

constexpr char kPrompt[] = "Once upon a time, in a small town,";

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
  requests.push_back(bad(kPrompt, 0));
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
