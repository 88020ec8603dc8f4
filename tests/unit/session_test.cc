// Session on the simulator (HostKernels over SimBackend) with synthetic:tiny, for every KV
// type: determinism, printable output, prefix reuse and checkpoint rollback against full
// prefills (bit for bit), discard, bad input.
#include "engine/session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "core/memory/device_copy.h"
#include "engine/session_layout.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using namespace ::siesta::engine::test_util;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

using SessionTest = TinySessionTest;

TEST_P(SessionTest, TwoFreshSessionsGiveTheSameBits) {
  SIESTA_ASSERT_OK(prefill(session(), kPrompt));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer first, answer(session(), 24));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer second, fresh_answer(config_, kPrompt, 24));
  std::printf("continuation: %s\n", first.text.c_str());
  EXPECT_EQ(first, second) << "first: '" << first.text << "' second: '" << second.text << "'";
  // The logits are real numbers that differ from each other: the model computes something.
  std::vector<float> logits(first.logit_bits.size());
  std::memcpy(logits.data(), first.logit_bits.data(), logits.size() * sizeof(float));
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(*std::max_element(logits.begin(), logits.end()),
            *std::min_element(logits.begin(), logits.end()));
}

TEST_P(SessionTest, GeneratedTokensArePrintable) {
  SIESTA_ASSERT_OK(prefill(session(), std::string("\x01\x02\xff\n\t", 5)));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer a, answer(session(), 64));
  for (char c : a.text) EXPECT_TRUE(is_printable(static_cast<Token>(c))) << int(c);
  EXPECT_TRUE(is_valid_utf8(a.text));
  EXPECT_EQ(session().length(), 5u + 64u);
}

TEST_P(SessionTest, APromptThatExtendsTheHistoryReusesAllOfIt) {
  SIESTA_ASSERT_OK(prefill(session(), kPrompt));
  SIESTA_ASSERT_OK(answer(session(), 10));
  const std::string next_prompt = decode(session().history()) + " And then?";
  const uint32_t before = session().length();
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), next_prompt));
  EXPECT_EQ(reused, before);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer reusing, answer(session(), 16));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, next_prompt, 16));
  EXPECT_EQ(reusing, full) << "'" << reusing.text << "' vs '" << full.text << "'";
}

// Divergence at `at` (tokens equal before it) of a 69-token history, interval 16.
struct Divergence {
  size_t at;
  size_t prompt_length;
  uint32_t expected_reuse;
};

TEST_P(SessionTest, ADivergentPromptRollsBackToTheNewestCheckpointBeforeIt) {
  ASSERT_EQ(config_.checkpoint_interval, 16u);
  const Divergence cases[] = {
      {60, 69, 48},
      {48, 60, 48},
      {47, 60, 32},
      {20, 30, 16},
      {10, 30, 0},
      {0, 12, 0},
      // No divergence, but the whole history as the prompt: one token is fed again.
      {69, 69, 64},
      // A prefix of the history: its last token is fed again.
      {69, 33, 32},
      {69, 16, 0},
  };
  for (const Divergence& d : cases) {
    SCOPED_TRACE("divergence at " + std::to_string(d.at) + ", prompt of " +
                 std::to_string(d.prompt_length));
    SIESTA_ASSERT_OK(session().discard_history());
    SIESTA_ASSERT_OK(prefill(session(), kPrompt));
    std::string prompt(kPrompt.substr(0, std::min(d.at, d.prompt_length)));
    while (prompt.size() < d.prompt_length) prompt.push_back(prompt.size() == d.at ? '#' : 'z');
    SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), prompt));
    EXPECT_EQ(reused, d.expected_reuse);
    EXPECT_EQ(decode(session().history()), prompt);
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer rolled_back, answer(session(), 12));
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, prompt, 12));
    EXPECT_EQ(rolled_back, full) << "'" << rolled_back.text << "' vs '" << full.text << "'";
  }
}

TEST_P(SessionTest, RandomEditsMatchFullPrefills) {
  // SIESTA_SESSION_SEED=<n> replays a run.
  const char* fixed = std::getenv("SIESTA_SESSION_SEED");
  const uint64_t seed =
      fixed != nullptr ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
  SCOPED_TRACE("SIESTA_SESSION_SEED=" + std::to_string(seed));
  std::printf("RandomEditsMatchFullPrefills SIESTA_SESSION_SEED=%llu\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 random(seed);
  std::string prompt(kPrompt);
  SIESTA_ASSERT_OK(prefill(session(), prompt));
  for (int round = 0; round < 4; ++round) {
    const size_t keep = std::uniform_int_distribution<size_t>(0, prompt.size())(random);
    const size_t add = std::uniform_int_distribution<size_t>(1, 40)(random);
    prompt.resize(keep);
    for (size_t i = 0; i < add; ++i) {
      prompt.push_back(static_cast<char>(std::uniform_int_distribution<int>('a', 'z')(random)));
    }
    SIESTA_ASSERT_OK(prefill(session(), prompt));
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer edited, answer(session(), 4));
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, prompt, 4));
    ASSERT_EQ(edited, full) << "round " << round;
    prompt = decode(session().history());
  }
}

TEST_P(SessionTest, FeedBlockFeedsUpToThePrefillBlockAndTakesEveryCheckpointItPasses) {
  // The host kernels' preference unless the model says otherwise.
  EXPECT_EQ(session().prefill_block(), rig_.kernels->preferred_prefill_block());
  ModelConfig c = config_;
  c.prefill_block = 24;
  Rig rig;
  SIESTA_ASSERT_OK(rig.init(c));
  ASSERT_EQ(rig.session->prefill_block(), 24u);
  const std::vector<Token> prompt = encode(kPrompt);  // 69 tokens, interval 16
  SIESTA_EXPECT_CODE(rig.session->feed_block({}), StatusCode::kInvalidArgument);
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t first, rig.session->feed_block(std::span(prompt).first(10)));
  EXPECT_EQ(first, 10u);
  // 10 .. 33: one block across the checkpoints at 16 and 32.
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t second,
                              rig.session->feed_block(std::span(prompt).subspan(10)));
  EXPECT_EQ(second, 24u);
  EXPECT_EQ(rig.session->length(), 34u);
  auto regions = regions_by_name(*rig.session);
  EXPECT_EQ(regions["recurrent.checkpoints"].layout.extents,
            prefix(2 * uint64_t{config_.dim} * sizeof(float)));
  // The checkpoints a block passed hold what one token at a time leaves there.
  SIESTA_ASSERT_OK(prefill(session(), std::string(kPrompt.substr(0, 34))));
  auto want = regions_by_name(session())["recurrent.checkpoints"];
  const uint64_t bytes = 2 * uint64_t{config_.dim} * sizeof(float);
  EXPECT_EQ(std::memcmp(regions["recurrent.checkpoints"].host, want.host, bytes), 0);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer blocked, answer(*rig.session, 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer one_by_one, answer(session(), 8));
  EXPECT_EQ(blocked, one_by_one);
}

TEST_P(SessionTest, DiscardHistoryStartsOver) {
  SIESTA_ASSERT_OK(prefill(session(), kPrompt));
  SIESTA_ASSERT_OK(session().discard_history());
  EXPECT_EQ(session().length(), 0u);
  EXPECT_EQ(session().history_tokens(), 0u);
  EXPECT_TRUE(session().history().empty());
  SIESTA_EXPECT_CODE(session().greedy_next(), StatusCode::kFailedPrecondition);
  for (const SnapshotRegion& r : session().snapshot_regions()) {
    if (r.layout.name == "recurrent.state" || r.layout.name == "session.meta") continue;
    EXPECT_TRUE(r.layout.extents.empty()) << r.layout.name;
  }
  // The recurrent state really is zero again (not only forgotten).
  const SnapshotRegion state = regions_by_name(session())["recurrent.state"];
  SIESTA_ASSERT_OK_AND_ASSIGN(
      auto bytes, siesta::test_util::read_device(*rig_.backend, state.device, state.layout.size));
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), std::byte{0}), ptrdiff_t(bytes.size()));

  const std::string next = std::string(kPrompt.substr(0, 50)) + "?";
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), next));
  EXPECT_EQ(reused, 0u);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session(), 10));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, next, 10));
  EXPECT_EQ(after, full);
}

TEST_P(SessionTest, BadInputLeavesTheSessionUnchanged) {
  SIESTA_ASSERT_OK(prefill(session(), "abc"));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer before, answer(session(), 0));
  SIESTA_EXPECT_CODE(session().reuse_prefix({}), StatusCode::kInvalidArgument);
  const std::vector<Token> too_long(config_.context + 1, 'a');
  SIESTA_EXPECT_CODE(session().reuse_prefix(too_long), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode(session().history()), "abc");
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session(), 0));
  EXPECT_EQ(after, before);
  // Exactly the context is accepted.
  const std::vector<Token> full(config_.context, 'a');
  SIESTA_EXPECT_OK(session().reuse_prefix(full));
}

TEST_P(SessionTest, FeedAtFullContextIsRefused) {
  Rig rig;
  const ModelConfig small_context = tiny(GetParam(), 32);
  SIESTA_ASSERT_OK(rig.init(small_context));
  const std::string prompt(32, 'q');
  SIESTA_ASSERT_OK(prefill(*rig.session, prompt));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer before, answer(*rig.session, 0));
  SIESTA_EXPECT_CODE(rig.session->feed('q'), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.session->length(), 32u);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(*rig.session, 0));
  EXPECT_EQ(after, before);
  // The full context with every checkpoint taken is a valid state to restore.
  SIESTA_EXPECT_OK(rig.session->adopt_restored_state());
}

INSTANTIATE_TEST_SUITE_P(EveryKvType, SessionTest,
                         ::testing::Values(KvType::kF32, KvType::kF16, KvType::kInt8),
                         [](const auto& p) { return std::string(kv_type_name(p.param)); });

}  // namespace
}  // namespace siesta::engine
