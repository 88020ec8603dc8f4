// The engine with several conversations (EngineSessions): routing through the engine,
// residency (never more than P sessions committed, read from the backend's stats), the
// least recently used idle session offloaded to make room and restored with its history when
// its conversation returns, forgetting at N, a full wait queue refused with Unavailable (503 +
// Retry-After), and answers equal to a never-offloading engine's.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;
using siesta::testing::OffloadEngineRigOptions;

// Committed bytes with `sessions` sessions resident, from two measurements: the rig's (weights
// plus session 0) and one more session's worth.
struct Budget {
  uint64_t first = 0;    // weights + one session
  uint64_t session = 0;  // one more session
  uint64_t with(uint32_t sessions) const { return first + (sessions - 1) * session; }
};

TEST(EngineSessionsTest, StartRefusesImpossibleCounts) {
  ManualClock clock;
  runtime::EngineStackOptions options;
  options.device = siesta::testing::engine_test_device();
  options.model = model_config_from_spec("synthetic:tiny").value();
  options.log = [](const std::string&) {};
  for (auto [parallel, sessions] : {std::pair{0u, 1u}, {65u, 65u}, {2u, 1u}, {1u, 2u}}) {
    options.sessions.parallel = parallel;
    options.sessions.max_sessions = sessions;
    auto stack = runtime::EngineStack::open(options, clock);
    ASSERT_FALSE(stack.ok()) << parallel << " " << sessions;
    EXPECT_EQ(stack.status().code(), StatusCode::kInvalidArgument) << stack.status().to_string();
  }
}

TEST(EngineSessionsTest, ConversationsTakeTurnsOverFewerSessionsAndKeepTheirHistory) {
  constexpr uint32_t kParallel = 2;
  constexpr uint32_t kConversations = 4;
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(kParallel, kConversations));
  OffloadEngineRig reference(
      siesta::testing::rig_with_sessions(kConversations, kConversations, /*offload=*/false));
  Budget budget;
  budget.first = rig.resident_committed;
  std::vector<std::string> history(kConversations);
  for (int turn = 0; turn < 3; ++turn) {
    for (uint32_t c = 0; c < kConversations; ++c) {
      const std::string prompt =
          history[c] + " turn " + std::to_string(turn) + " of " + std::to_string(c);
      Result<GenerateResult> got =
          rig.generate(prompt, 8, route_by_key("user" + std::to_string(c)));
      Result<GenerateResult> want = reference.generate(prompt, 8, route_by_slot(c));
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      EXPECT_EQ(got->text, want->text) << "turn " << turn << " conversation " << c;
      EXPECT_EQ(got->cached_tokens, want->cached_tokens)
          << "turn " << turn << " conversation " << c;
      if (turn > 0) {
        // The history came back: everything but the last generated token was kept.
        EXPECT_EQ(got->cached_tokens, history[c].size() - 1) << "conversation " << c;
      }
      if (turn == 0 && c == 1) budget.session = rig.backend->stats().committed_bytes - budget.first;
      if (budget.session != 0) {
        EXPECT_LE(rig.backend->stats().committed_bytes, budget.with(kParallel))
            << "turn " << turn << " conversation " << c;
      }
      history[c] = prompt + got->text;
    }
  }
  EXPECT_GT(budget.session, 0u);
  const EngineStatus status = rig.engine->status();
  EXPECT_GE(status.evictions, 2u * kConversations);
  EXPECT_EQ(status.forgotten, 0u);
  const std::vector<SessionStatus> sessions = rig.engine->sessions();
  ASSERT_EQ(sessions.size(), kConversations);
  uint32_t resident = 0;
  for (const SessionStatus& s : sessions) {
    EXPECT_TRUE(s.keyed);
    EXPECT_EQ(s.commands, 3u);
    if (s.state == OffloadState::kResident) ++resident;
    if (s.state == OffloadState::kDisk) {
      EXPECT_GT(s.disk_bytes, 0u);
    }
  }
  EXPECT_EQ(resident, kParallel);
  // The totals add the conversations up.
  EXPECT_GE(rig.engine->cache_status().counters.restore_hits, 2u * kConversations - kParallel);
}

TEST(EngineSessionsTest, AtMaxSessionsTheLeastRecentlyUsedIdleConversationIsForgotten) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  ASSERT_TRUE(rig.generate("first conversation", 4, route_by_key("a")).ok());
  ASSERT_TRUE(rig.generate("second conversation", 4, route_by_key("b")).ok());  // evicts a
  ASSERT_EQ(rig.engine->sessions()[0].state, OffloadState::kDisk);
  const std::string snapshot_a = rig.store->snapshot_path("0").value();
  ASSERT_TRUE(std::filesystem::exists(snapshot_a));
  // A third key: a (least recently used, idle) is forgotten, its snapshot deleted.
  Result<GenerateResult> c = rig.generate("third conversation", 4, route_by_key("c"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->cached_tokens, 0u);
  EXPECT_FALSE(std::filesystem::exists(snapshot_a));
  EXPECT_EQ(rig.engine->status().forgotten, 1u);
  // a comes back as a fresh conversation: nothing cached.
  Result<GenerateResult> a = rig.generate("first conversation and more", 4, route_by_key("a"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->cached_tokens, 0u);
}

TEST(EngineSessionsTest, PrefixRoutingFindsAnOffloadedConversationWithoutWakingIt) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 3));
  Result<GenerateResult> a = rig.generate("the quick brown fox", 6);
  ASSERT_TRUE(a.ok());
  Result<GenerateResult> b = rig.generate("zzzz yyyy xxxx wwww", 6);  // fresh: evicts a
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(rig.engine->sessions()[0].state, OffloadState::kDisk);
  // Status and routing read host memory: a stays on disk until its request runs.
  EXPECT_EQ(rig.engine->sessions()[0].tokens, std::string("the quick brown fox").size() + 5);
  Result<GenerateResult> again = rig.generate("the quick brown fox" + a->text + " jumps", 6);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->admission.restored);
  EXPECT_EQ(again->cached_tokens, std::string("the quick brown fox").size() + 5);
}

TEST(EngineSessionsTest, SlotOutOfRangeIsRefusedAndChangesNothing) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  Result<GenerateResult> bad = rig.generate("hello", 4, route_by_slot(2));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.engine->reset(7).get().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(rig.engine->sessions().size() == 1);
}

TEST(EngineSessionsTest, AFullWaitQueueIsRefusedForNow) {
  OffloadEngineRigOptions options = siesta::testing::rig_with_sessions(2, 2, /*offload=*/false);
  options.sessions.max_queued = 1;
  OffloadEngineRig rig(options);
  // The first request blocks the engine thread in its on_text until released.
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  GenerateRequest blocking;
  blocking.prompt = "block";
  blocking.max_tokens = 2;
  blocking.on_text = [&](std::string_view) {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return release; });
  };
  auto first = rig.engine->generate(std::move(blocking));
  ASSERT_TRUE(rig.engine->wait_for_status([](const EngineStatus& s) { return s.busy; },
                                          std::chrono::seconds(30)));
  GenerateRequest queued;
  queued.prompt = "queued";
  queued.max_tokens = 2;
  auto second = rig.engine->generate(queued);
  auto third = rig.engine->generate(queued);  // one is waiting already
  Result<GenerateResult> refused = third.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(rig.engine->status().refused_busy, 1u);
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
}

TEST(EngineSessionsTest, EveryoneResidentWithoutOffloadWhenParallelEqualsSessions) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(3, 3, /*offload=*/false));
  std::vector<std::string> answers;
  for (uint32_t c = 0; c < 3; ++c) {
    Result<GenerateResult> r =
        rig.generate("conversation " + std::to_string(c), 4, route_by_slot(c));
    ASSERT_TRUE(r.ok());
    answers.push_back(r->text);
  }
  for (const SessionStatus& s : rig.engine->sessions()) {
    EXPECT_EQ(s.state, OffloadState::kDisabled);
  }
  EXPECT_EQ(rig.engine->status().evictions, 0u);
  // Each keeps its own history: the second turn of each reuses it.
  const std::string kept = "conversation 0" + answers[0];
  Result<GenerateResult> again = rig.generate(kept + " again", 4, route_by_slot(0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cached_tokens, kept.size() - 1);
}

TEST(EngineSessionsTest, ASessionSavingOnItsIdleTimerIsWaitedForBeforeItIsEvicted) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  ASSERT_TRUE(rig.generate("first", 4, route_by_key("a")).ok());
  // a's idle timer is due; its save runs on the test's thread while b's request needs a's
  // room: the eviction waits for that save (or finds the memory released).
  rig.clock.advance(std::chrono::seconds(OffloadEngineRig::kIdleSeconds));
  std::thread timers([&] { rig.executor.run_due(); });
  Result<GenerateResult> b = rig.generate("second", 4, route_by_key("b"));
  timers.join();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(rig.engine->sessions()[0].state, OffloadState::kDisk);
  Result<GenerateResult> a = rig.generate("first" + std::string("xxxx"), 4, route_by_key("a"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_TRUE(a->admission.restored);
}

// The inode of a file, 0 when there is none: the same inode means the same file, not rewritten.
ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Write early, release late: with more conversations than sessions, the session whose command
// ended is written in the background at once, so the eviction that a returning conversation
// causes only releases it.
TEST(EngineSessionsTest, AnIdleSessionIsWrittenAheadSoItsEvictionOnlyReleases) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  ASSERT_TRUE(rig.generate("first conversation", 4, route_by_key("a")).ok());
  rig.executor.run_due();
  EXPECT_EQ(rig.engine->sessions()[0].disk_bytes, 0u) << "one conversation: nothing to write ahead";
  Result<GenerateResult> b = rig.generate("second conversation", 4, route_by_key("b"));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  rig.executor.run_due();  // b's save ahead (no time passes)
  std::vector<SessionStatus> sessions = rig.engine->sessions();
  ASSERT_EQ(sessions.size(), 2u);
  EXPECT_EQ(sessions[1].state, OffloadState::kResident);
  EXPECT_GT(sessions[1].disk_bytes, 0u) << "b's snapshot is written, its memory kept";
  const std::string snapshot_b = rig.store->snapshot_path("1").value();
  const ino_t written_ahead = inode_of(snapshot_b);
  ASSERT_NE(written_ahead, 0u);
  EXPECT_EQ(rig.engine->cache_status().counters.saves_ahead, 1u);

  // a returns: b makes room by releasing only, the file written ahead is the one kept.
  Result<GenerateResult> a = rig.generate("first conversation and more", 4, route_by_key("a"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_TRUE(a->admission.restored);
  EXPECT_EQ(rig.engine->sessions()[1].state, OffloadState::kDisk);
  EXPECT_EQ(inode_of(snapshot_b), written_ahead) << "the eviction wrote b again";

  // And b comes back with its history from that file.
  rig.executor.run_due();  // a's save ahead: a's eviction below is a release too
  Result<GenerateResult> b_again =
      rig.generate("second conversation" + b->text + " again", 4, route_by_key("b"));
  ASSERT_TRUE(b_again.ok()) << b_again.status().to_string();
  EXPECT_TRUE(b_again->admission.restored);
  EXPECT_EQ(b_again->cached_tokens, std::string("second conversation").size() + 3);
}

TEST(EngineSessionsTest, AReturningConversationIsWrittenAgainAsADeltaOfItsTurn) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  OffloadEngineRig reference(siesta::testing::rig_with_sessions(2, 2, /*offload=*/false));
  const std::string long_prompt(180, 'x');
  std::string history_a = long_prompt;
  Result<GenerateResult> a = rig.generate(history_a, 4, route_by_key("a"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(reference.generate(history_a, 4, route_by_slot(0)).ok());
  history_a += a->text;
  ASSERT_TRUE(rig.generate("b", 4, route_by_key("b")).ok());  // a is evicted: a whole save
  const std::string base = rig.store->snapshot_path("0").value();
  ASSERT_TRUE(std::filesystem::exists(base));
  const uint64_t base_bytes = std::filesystem::file_size(base);

  // a returns with a short turn: restored, its snapshot kept as the base; b is evicted; a's
  // save (ahead) writes only the turn.
  const std::string turn = history_a + " and a few more";
  Result<GenerateResult> again = rig.generate(turn, 4, route_by_key("a"));
  Result<GenerateResult> want = reference.generate(turn, 4, route_by_slot(0));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_TRUE(again->admission.restored);
  EXPECT_EQ(again->text, want->text);
  rig.executor.run_due();
  ASSERT_TRUE(rig.generate("b again", 4, route_by_key("b")).ok());  // a is released
  const std::string delta = rig.store->snapshot_path("0", 1).value();
  ASSERT_TRUE(std::filesystem::exists(delta)) << "a's second save was not a delta";
  const uint64_t delta_bytes = std::filesystem::file_size(delta);
  // The turn is about 20 tokens over a history of about 185 (tiny's state is small).
  EXPECT_LT(delta_bytes * 4, base_bytes) << "the delta wrote far more than a turn";
  EXPECT_GE(rig.engine->cache_status().counters.delta_saves, 1u);

  // And a comes back from base + delta with every byte of its history.
  const std::string third = turn + again->text + " once more";
  Result<GenerateResult> back = rig.generate(third, 4, route_by_key("a"));
  Result<GenerateResult> want_back = reference.generate(third, 4, route_by_slot(0));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(want_back.ok());
  EXPECT_TRUE(back->admission.restored);
  EXPECT_EQ(back->text, want_back->text);
  EXPECT_EQ(back->cached_tokens, want_back->cached_tokens);
  std::printf("whole snapshot %llu bytes, delta of a turn %llu bytes\n",
              static_cast<unsigned long long>(base_bytes),
              static_cast<unsigned long long>(delta_bytes));
}

}  // namespace
}  // namespace siesta::engine
