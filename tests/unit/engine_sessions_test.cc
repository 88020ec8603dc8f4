// The engine with several conversations (EngineSessions): routing through the engine,
// residency (never more than P sessions committed, read from the backend's stats), the
// least recently used idle session offloaded to make room and restored with its history when
// its conversation returns, forgetting at N, a full wait queue refused with Unavailable (503 +
// Retry-After), and answers equal to a never-offloading engine's.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "core/snapshot/snapshot_threads.h"
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
  for (auto [parallel, sessions] :
       {std::pair{0u, 1u}, {65u, 65u}, {2u, 1u}, {1u, 2u}, {1u, kMaxSessions + 1}}) {
    options.sessions.parallel = parallel;
    options.sessions.max_sessions = sessions;
    auto stack = runtime::EngineStack::open(options, clock);
    ASSERT_FALSE(stack.ok()) << parallel << " " << sessions;
    EXPECT_EQ(stack.status().code(), StatusCode::kInvalidArgument) << stack.status().to_string();
  }
  // The share of a history a prompt must repeat to continue it is a share.
  options.sessions.parallel = 2;
  options.sessions.max_sessions = 2;
  for (double match : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    options.sessions.match = match;
    auto stack = runtime::EngineStack::open(options, clock);
    ASSERT_FALSE(stack.ok()) << match;
    EXPECT_EQ(stack.status().code(), StatusCode::kInvalidArgument) << stack.status().to_string();
    EXPECT_NE(stack.status().message().find("match share"), std::string::npos);
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
  // Every conversation's saves took their record buffers from one pool: it holds one save's
  // worth (a chunk window of the largest file), not one per conversation saved.
  uint64_t largest_file = 0;
  for (const SessionStatus& s : sessions) largest_file = std::max(largest_file, s.disk_bytes);
  const uint64_t window =
      std::max<uint64_t>(default_snapshot_write_threads() + 1, rig.backend->staging_buffer_count());
  EXPECT_GT(rig.engine->record_buffer_bytes(), 0u) << "the saves used the shared pool";
  EXPECT_LE(rig.engine->record_buffer_bytes(), window * largest_file);
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

// GenerateResult::session names the conversation that served a request, and on_start tells
// it once, before the first piece of text: the number a client's id_slot then continues.
TEST(EngineSessionsTest, EachResultNamesTheConversationThatServedIt) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(3, 3, /*offload=*/false));
  auto generate = [&](const std::string& prompt, SessionRoute route,
                      std::vector<std::string>* events) {
    GenerateRequest request;
    request.prompt = prompt;
    request.max_tokens = 6;
    request.route = route;
    request.on_start = [events](uint32_t id) { events->push_back("start " + std::to_string(id)); };
    request.on_text = [events](std::string_view) { events->push_back("text"); };
    return rig.engine->generate(std::move(request)).get();
  };
  for (uint32_t slot : {2u, 0u, 1u}) {
    std::vector<std::string> events;
    Result<GenerateResult> got =
        generate("slot " + std::to_string(slot) + " speaks", route_by_slot(slot), &events);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got->session, slot);
    ASSERT_GE(events.size(), 2u) << "a start and at least one piece";
    EXPECT_EQ(events[0], "start " + std::to_string(slot));
    for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i], "text") << i;
  }
  // A keyed conversation: the number it reports is the one its history lives in.
  std::vector<std::string> events;
  Result<GenerateResult> keyed = generate("a keyed conversation", route_by_key("k"), &events);
  ASSERT_TRUE(keyed.ok()) << keyed.status().to_string();
  EXPECT_EQ(events.front(), "start " + std::to_string(keyed->session));
  const std::vector<SessionStatus> sessions = rig.engine->sessions();
  ASSERT_LT(keyed->session, sessions.size());
  EXPECT_TRUE(sessions[keyed->session].keyed);
  // A request refused before it starts never calls on_start.
  events.clear();
  EXPECT_FALSE(generate("", route_by_slot(0), &events).ok());
  EXPECT_TRUE(events.empty());
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

// Guards: the wait queue's cap counting only the commands not yet taken up by the engine
// thread (queue_), not those it has moved to its waiting list. Here the waiting commands are
// certainly on that list: the running command's next token is emitted only after the thread
// has gone round its loop, which moves every queued command there first.
TEST(EngineSessionsTest, TheWaitQueuesCapCountsCommandsAlreadyOnTheWaitingList) {
  OffloadEngineRigOptions options = siesta::testing::rig_with_sessions(1, 1, /*offload=*/false);
  options.sessions.max_queued = 2;
  OffloadEngineRig rig(options);
  // The running command stops in each token's on_text until the test lets it go on.
  std::mutex mutex;
  std::condition_variable cv;
  int emitted = 0;
  int allowed = 0;  // on_text calls that may return
  GenerateRequest running;
  running.prompt = "running";
  running.max_tokens = 4;
  running.on_text = [&](std::string_view) {
    std::unique_lock lock(mutex);
    ++emitted;
    cv.notify_all();
    cv.wait(lock, [&] { return emitted <= allowed; });
  };
  auto let_tokens = [&](int count) {
    std::lock_guard lock(mutex);
    allowed = count;
    cv.notify_all();
  };
  auto wait_emitted = [&](int count) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return emitted >= count; });
  };
  auto first = rig.engine->generate(std::move(running));
  ASSERT_TRUE(wait_emitted(1));
  GenerateRequest queued;
  queued.prompt = "queued";
  queued.max_tokens = 2;
  auto second = rig.engine->generate(queued);
  auto third = rig.engine->generate(queued);
  // Token 2 is emitted after the loop has moved both to its waiting list (the one session
  // runs a command: they stay there).
  let_tokens(1);
  ASSERT_TRUE(wait_emitted(2));
  EXPECT_EQ(rig.engine->status().queued_commands, 2u);
  auto fourth = rig.engine->generate(queued);
  const bool answered = fourth.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  let_tokens(4);
  EXPECT_TRUE(answered) << "a third waiting command was taken beyond max_queued = 2";
  Result<GenerateResult> refused = fourth.get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(rig.engine->status().refused_busy, 1u);
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  EXPECT_TRUE(third.get().ok());
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

// A file's bytes, "" when there is none: other bytes mean another file was written.
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Guards: a reset's discard of the history that does not zero the session's unchanged count,
// so that the chain of the conversation reset still counts as the base of the next delta. The
// old conversation's snapshot must be retired by the reset itself (a save of the empty
// history would be a whole one anyway, being no larger than a delta), and the next save must
// not build on it.
TEST(EngineSessionsTest, AResetConversationsNextSaveDoesNotBuildOnTheOldChain) {
  OffloadEngineRig rig;  // one conversation, delta saves on (the default)
  const std::string prompt = "A conversation that is about to be reset by its operator.";
  Result<GenerateResult> first = rig.generate(prompt, 4);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  rig.sleep_session();
  ASSERT_EQ(rig.state(), OffloadState::kDisk);
  const std::string base = rig.store->snapshot_path("0").value();
  const std::string old_base = file_bytes(base);
  ASSERT_FALSE(old_base.empty());
  // Restored: its snapshot stays, as the base of the next delta.
  Result<GenerateResult> again = rig.generate(prompt + first->text + " more", 4);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  ASSERT_TRUE(again->admission.restored);
  ASSERT_TRUE(file_bytes(base) == old_base);

  ASSERT_TRUE(rig.engine->reset(0).get().ok());
  rig.executor.run_due();  // the retired files' removal
  // Rewritten from its start: the old conversation's snapshot is retired at once, not kept
  // until the next save replaces it.
  EXPECT_FALSE(std::filesystem::exists(base)) << "the reset conversation's snapshot outlived it";
  EXPECT_EQ(rig.engine->cache_status().disk_bytes, 0u);
  rig.sleep_session();
  const OffloadStatus status = rig.engine->cache_status();
  ASSERT_EQ(status.state, OffloadState::kDisk) << status.last_error;
  EXPECT_EQ(status.counters.delta_saves, 0u) << "the reset history was saved as a delta";
  EXPECT_EQ(status.snapshot_segments, 1u);
  EXPECT_FALSE(std::filesystem::exists(rig.store->snapshot_path("0", 1).value()));
  EXPECT_TRUE(file_bytes(base) != old_base) << "the old conversation's snapshot is still the base";

  // And the conversation starts over from nothing.
  Result<GenerateResult> after = rig.generate(prompt, 4);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(after->admission.restored);
  EXPECT_EQ(after->cached_tokens, 0u);
  EXPECT_EQ(after->text, first->text);
}

// Guards: the same for a conversation forgotten to make room while its session is resident
// (its history discarded under the new conversation's lease, the new prompt read in the same
// command): the new conversation's save must not be a delta over the forgotten one's chain,
// which would restore the forgotten conversation's tokens and rows under the new one's.
TEST(EngineSessionsTest, AForgottenConversationsSessionIsNotSavedAsADeltaOfIt) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(2, 2));
  OffloadEngineRig reference(siesta::testing::rig_with_sessions(2, 2, /*offload=*/false));
  auto both = [&](const std::string& prompt, const std::string& key) {
    Result<GenerateResult> got = rig.generate(prompt, 4, route_by_key(key));
    Result<GenerateResult> want = reference.generate(prompt, 4, route_by_key(key));
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_TRUE(want.ok()) << want.status().to_string();
    if (got.ok() && want.ok()) {
      EXPECT_EQ(got->text, want->text) << key << ": " << prompt;
      EXPECT_EQ(got->cached_tokens, want->cached_tokens) << key << ": " << prompt;
    }
    return got.ok() ? *got : GenerateResult{};
  };
  const std::string prompt_a = "Conversation a, the one used last of the first two.";
  const std::string prompt_b = "Conversation b: the least recently used one, to be forgotten.";
  const GenerateResult a = both(prompt_a, "a");
  const GenerateResult b = both(prompt_b, "b");
  rig.sleep_session();  // both saved and released
  // Both return, restored; their snapshots stay as the bases of their next deltas. b first
  // (a second apart): it is the least recently used when c comes.
  rig.clock.advance(std::chrono::seconds(1));
  const GenerateResult b_back = both(prompt_b + b.text + " again", "b");
  ASSERT_TRUE(b_back.admission.restored);
  rig.clock.advance(std::chrono::seconds(1));
  const GenerateResult a_back = both(prompt_a + a.text + " again", "a");
  ASSERT_TRUE(a_back.admission.restored);
  const std::string b_base = rig.store->snapshot_path("1").value();
  const std::string forgotten_base = file_bytes(b_base);
  ASSERT_FALSE(forgotten_base.empty());

  // c: a third key at N = 2: b (resident, idle, least recently used) is forgotten for it.
  rig.clock.advance(std::chrono::seconds(1));
  const std::string prompt_c = "Conversation c takes b's session.";
  const GenerateResult c = both(prompt_c, "c");
  ASSERT_EQ(rig.engine->status().forgotten, 1u);
  ASSERT_EQ(rig.engine->sessions()[1].tokens, prompt_c.size() + c.text.size() - 1)
      << "c did not take b's session";
  rig.executor.run_due();  // the retired files' removal
  rig.sleep_session();     // c's session saved (and a's turn, as a delta of a's)
  ASSERT_EQ(rig.engine->sessions()[1].state, OffloadState::kDisk);
  EXPECT_FALSE(std::filesystem::exists(rig.store->snapshot_path("1", 1).value()))
      << "c's session was saved as a delta of the forgotten conversation's snapshot";
  EXPECT_TRUE(file_bytes(b_base) != forgotten_base)
      << "the forgotten conversation's snapshot outlived it";
  // c comes back with its own history, as from an engine that never offloads.
  const GenerateResult c_back = both(prompt_c + c.text + " and more", "c");
  EXPECT_TRUE(c_back.admission.restored);
  EXPECT_EQ(c_back.cached_tokens, prompt_c.size() + c.text.size() - 1);
}

}  // namespace
}  // namespace siesta::engine
