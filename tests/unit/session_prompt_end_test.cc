// The session's prompt-end checkpoint (Session::checkpoint_prompt_end()) on the simulator with
// synthetic:tiny (checkpoint interval 16), for every KV type: a prompt asked again (a
// regenerate), a prompt shorter than the interval, an edit after the prompt, each reusing the
// whole prompt and giving the bits of a fresh session; a rollback before the checkpoint drops
// it; the snapshot lists it (whole, also in a delta) and a restore keeps it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/device_copy.h"
#include "engine/session.h"
#include "engine/session_layout.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using namespace ::siesta::engine::test_util;  // NOLINT(google-build-using-namespace)

using SessionPromptEndTest = TinySessionTest;

// Feeds `prompt` (reusing what it can) and keeps the prompt-end checkpoint, as Generation
// does; returns the tokens reused.
Result<uint32_t> ask(Session& session, std::string_view prompt) {
  SIESTA_ASSIGN_OR_RETURN(uint32_t reused, prefill(session, prompt));
  SIESTA_RETURN_IF_ERROR(session.checkpoint_prompt_end());
  return reused;
}

// The bytes of every extent of `regions`, one entry per extent, as the memory holds them now.
using SavedExtents = std::vector<std::pair<SnapshotRegion, std::vector<std::byte>>>;
SavedExtents save(Rig& rig, const std::vector<SnapshotRegion>& regions) {
  SavedExtents saved;
  EXPECT_TRUE(rig.kernels->synchronize().ok());
  for (const SnapshotRegion& r : regions) {
    for (const snapshot::Extent& e : r.layout.extents) {
      std::vector<std::byte> bytes(e.length);
      if (r.place == SnapshotRegion::Place::kDevice) {
        EXPECT_TRUE(copy_device_to_host(*rig.backend, r.device + e.offset, bytes).ok());
      } else {
        std::memcpy(bytes.data(), r.host + e.offset, e.length);
      }
      SnapshotRegion one = r;
      one.layout.extents = {e};
      saved.emplace_back(one, std::move(bytes));
    }
  }
  return saved;
}

// What a restore does: the memory released and committed again at the same addresses (fresh
// memory), the segments' extents copied back oldest first, the state adopted.
Status restore(Rig& rig, const std::vector<const SavedExtents*>& segments) {
  Session& session = *rig.session;
  SIESTA_RETURN_IF_ERROR(rig.kernels->synchronize());
  const std::vector<DeviceRange> device = session.device_memory();
  for (DeviceRange range : device) SIESTA_RETURN_IF_ERROR(rig.backend->decommit(range));
  for (HostRange* host : session.host_memory()) SIESTA_RETURN_IF_ERROR(host->release());
  for (DeviceRange range : device) SIESTA_RETURN_IF_ERROR(rig.backend->commit(range));
  for (HostRange* host : session.host_memory()) SIESTA_RETURN_IF_ERROR(host->commit());
  for (const SavedExtents* segment : segments) {
    for (const auto& [r, bytes] : *segment) {
      const uint64_t offset = r.layout.extents[0].offset;
      if (r.place == SnapshotRegion::Place::kDevice) {
        SIESTA_RETURN_IF_ERROR(copy_host_to_device(*rig.backend, bytes, r.device + offset));
      } else {
        std::memcpy(r.host + offset, bytes.data(), bytes.size());
      }
    }
  }
  return session.adopt_restored_state();
}

TEST_P(SessionPromptEndTest, ARegenerateReusesTheWholePromptAndGivesTheBitsOfAFreshSession) {
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t first, ask(session(), kPrompt));  // 69 tokens
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(session().prompt_end(), kPrompt.size());
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer answered, answer(session(), 10));
  ASSERT_EQ(session().length(), kPrompt.size() + 10);
  // The same prompt again: nothing is read again, and the next logits are there at once.
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, session().reuse_prefix(encode(kPrompt)));
  EXPECT_EQ(reused, kPrompt.size());
  EXPECT_EQ(session().length(), kPrompt.size());
  EXPECT_EQ(decode(session().history()), kPrompt);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer again, answer(session(), 10));
  EXPECT_EQ(again, answered) << "'" << again.text << "' vs '" << answered.text << "'";
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, kPrompt, 10));
  EXPECT_EQ(again, fresh);
  // And once more, after the regenerate's own tokens were fed.
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t third, ask(session(), kPrompt));
  EXPECT_EQ(third, kPrompt.size());
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer once_more, answer(session(), 10));
  EXPECT_EQ(once_more, fresh);
}

TEST_P(SessionPromptEndTest, WithoutTheCheckpointARegenerateRollsBackToTheInterval) {
  SIESTA_ASSERT_OK(prefill(session(), kPrompt));  // no checkpoint_prompt_end()
  EXPECT_EQ(session().prompt_end(), 0u);
  SIESTA_ASSERT_OK(answer(session(), 10));
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), kPrompt));
  EXPECT_EQ(reused, 64u);  // the last token must be fed again: 68, down to the interval
}

TEST_P(SessionPromptEndTest, APromptShorterThanTheIntervalIsReusedWhole) {
  const std::string prompt(kPrompt.substr(0, 12));
  SIESTA_ASSERT_OK(ask(session(), prompt));
  SIESTA_ASSERT_OK(answer(session(), 6));
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, ask(session(), prompt));
  EXPECT_EQ(reused, 12u);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer again, answer(session(), 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, prompt, 8));
  EXPECT_EQ(again, fresh);
}

TEST_P(SessionPromptEndTest, AnEditAfterThePromptReusesThePrompt) {
  const std::string prompt(kPrompt.substr(0, 40));
  SIESTA_ASSERT_OK(ask(session(), prompt));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer answered, answer(session(), 12));
  // The client sends the prompt and an answer of its own (the history diverges at 40 + 3).
  const char mark = answered.text[3] == '#' ? '%' : '#';
  const std::string edited = prompt + answered.text.substr(0, 3) + mark + "edited, and more";
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, ask(session(), edited));
  EXPECT_EQ(reused, 40u);  // the interval checkpoint before the divergence is at 32
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session(), 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, edited, 8));
  EXPECT_EQ(after, fresh);
  // A newer interval checkpoint wins over an older prompt end.
  EXPECT_EQ(session().prompt_end(), edited.size());
  const std::string longer = edited + " and a long tail to pass the checkpoint at 64";
  SIESTA_ASSERT_OK(prefill(session(), longer));
  const std::string diverging = longer.substr(0, 70) + "!";
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t rolled, prefill(session(), diverging));
  EXPECT_EQ(rolled, 64u);
  EXPECT_EQ(session().prompt_end(), edited.size()) << "still a prefix of the history";
}

TEST_P(SessionPromptEndTest, ARollbackBeforeTheCheckpointDropsIt) {
  SIESTA_ASSERT_OK(ask(session(), kPrompt.substr(0, 40)));
  SIESTA_ASSERT_OK(answer(session(), 4));
  const std::string other = std::string(kPrompt.substr(0, 20)) + "#other";
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), other));
  EXPECT_EQ(reused, 16u);
  EXPECT_EQ(session().prompt_end(), 0u);
  EXPECT_TRUE(regions_by_name(session())["recurrent.prompt_end"].layout.extents.empty());
  // The old prompt again: only the interval checkpoint is left (its tokens were replaced).
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t back, prefill(session(), kPrompt.substr(0, 40)));
  EXPECT_EQ(back, 16u);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session(), 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, kPrompt.substr(0, 40), 8));
  EXPECT_EQ(after, fresh);
}

TEST_P(SessionPromptEndTest, TheCheckpointNeedsTheLogitsAndIsTakenOncePerLength) {
  SIESTA_EXPECT_CODE(session().checkpoint_prompt_end(), StatusCode::kFailedPrecondition);
  SIESTA_ASSERT_OK(ask(session(), "abc"));
  SIESTA_ASSERT_OK(session().discard_history());
  EXPECT_EQ(session().prompt_end(), 0u);
  SIESTA_EXPECT_CODE(session().checkpoint_prompt_end(), StatusCode::kFailedPrecondition);
  SIESTA_ASSERT_OK(ask(session(), "abcdef"));
  SIESTA_ASSERT_OK(session().checkpoint_prompt_end());  // again at the same length: nothing
  EXPECT_EQ(session().prompt_end(), 6u);
}

TEST_P(SessionPromptEndTest, SnapshotsListItWholeAndARestoreKeepsIt) {
  const uint64_t bytes = kPromptEndHeaderBytes + config_.dim * sizeof(float) + kVocabSize * 4;
  SIESTA_ASSERT_OK(ask(session(), kPrompt.substr(0, 30)));
  EXPECT_EQ(regions_by_name(session())["recurrent.prompt_end"].layout.extents, prefix(bytes));
  SIESTA_ASSERT_OK(answer(session(), 6));
  (void)session().take_unchanged_tokens();
  const SavedExtents base = save(rig_, session().snapshot_regions());

  // The next turn: a delta lists the new prompt end whole, beside what the turn added.
  const std::string next = decode(session().history()) + " and then?";
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, ask(session(), next));
  EXPECT_EQ(reused, 36u);
  SIESTA_ASSERT_OK(answer(session(), 5));
  const uint64_t unchanged = session().take_unchanged_tokens();
  EXPECT_EQ(unchanged, 36u);
  std::vector<SnapshotRegion> delta_regions = session().snapshot_regions_after(unchanged);
  for (const SnapshotRegion& r : delta_regions) {
    if (r.layout.name == "recurrent.prompt_end") {
      EXPECT_EQ(r.layout.extents, prefix(bytes));
    }
  }
  const SavedExtents delta = save(rig_, delta_regions);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, next, 8));

  // Restored from base + delta, the same prompt again reuses all of it.
  SIESTA_ASSERT_OK(restore(rig_, {&base, &delta}));
  EXPECT_EQ(session().prompt_end(), next.size());
  SIESTA_EXPECT_CODE(session().greedy_next(), StatusCode::kFailedPrecondition);
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t again, session().reuse_prefix(encode(next)));
  EXPECT_EQ(again, next.size());
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer restored, answer(session(), 8));
  EXPECT_EQ(restored, fresh);
}

TEST_P(SessionPromptEndTest, ADroppedCheckpointIsNotListedAndNotRestored) {
  SIESTA_ASSERT_OK(ask(session(), kPrompt.substr(0, 40)));
  const SavedExtents with_it = save(rig_, session().snapshot_regions());
  SIESTA_ASSERT_OK(prefill(session(), kPrompt.substr(0, 10)));  // rolls back to 0: dropped
  ASSERT_EQ(session().prompt_end(), 0u);
  const uint64_t unchanged = session().take_unchanged_tokens();
  EXPECT_EQ(unchanged, 0u);
  const SavedExtents without = save(rig_, session().snapshot_regions_after(unchanged));
  // Over the older segment that held one, the meta's 0 rules: nothing stale is used.
  SIESTA_ASSERT_OK(restore(rig_, {&with_it, &without}));
  EXPECT_EQ(session().prompt_end(), 0u);
  EXPECT_EQ(decode(session().history()), kPrompt.substr(0, 10));
  // The 10-token prompt again: its end was never kept, so its last token is fed again.
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), kPrompt.substr(0, 10)));
  EXPECT_EQ(reused, 0u);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session(), 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, kPrompt.substr(0, 10), 8));
  EXPECT_EQ(after, fresh);
}

TEST_P(SessionPromptEndTest, RandomTurnsMatchFullPrefills) {
  // SIESTA_SESSION_SEED=<n> replays a run.
  const char* fixed = std::getenv("SIESTA_SESSION_SEED");
  const uint64_t seed =
      fixed != nullptr ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
  SCOPED_TRACE("SIESTA_SESSION_SEED=" + std::to_string(seed));
  std::mt19937_64 random(seed);
  std::string prompt(kPrompt.substr(0, 20));
  for (int round = 0; round < 6; ++round) {
    SIESTA_ASSERT_OK(ask(session(), prompt));
    const int tokens = std::uniform_int_distribution<int>(1, 12)(random);
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer answered, answer(session(), tokens));
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, prompt, tokens));
    ASSERT_EQ(answered, full) << "round " << round;
    const std::string history = decode(session().history());
    switch (std::uniform_int_distribution<int>(0, 3)(random)) {
      case 0: break;  // the same prompt again
      case 1: prompt = history + answered.text.substr(answered.text.size() - 1); break;
      case 2: prompt = history.substr(0, prompt.size() + 2) + "#"; break;  // an edit after it
      default:
        prompt.resize(std::uniform_int_distribution<size_t>(1, prompt.size())(random));
        prompt += "~";
        break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKvType, SessionPromptEndTest,
                         ::testing::Values(KvType::kF32, KvType::kF16, KvType::kInt8),
                         [](const auto& p) { return std::string(kv_type_name(p.param)); });

}  // namespace
}  // namespace siesta::engine
