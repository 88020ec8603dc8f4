// Races of several conversations over fewer sessions, with real threads: clients taking
// turns on their own conversations while the idle timers' saves run on another thread and
// status is polled throughout (never more than P sessions committed, every answer the one
// the conversation gives alone); an evicted session's own request arriving while its
// eviction is queued or running; two requests opening the same new conversation at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;

SessionRoute key(uint32_t c) { return route_by_key("client-" + std::to_string(c)); }

GenerateRequest turn(const std::string& prompt, SessionRoute route) {
  GenerateRequest request;
  request.prompt = prompt;
  request.max_tokens = 6;
  request.route = route;
  return request;
}

// Each client's prompts and answers, replayed afterwards one conversation per session on an
// engine that never offloads.
struct Transcript {
  std::vector<std::string> prompts;
  std::vector<std::string> answers;
  std::vector<uint32_t> cached;
};

void expect_as_if_alone(const std::vector<Transcript>& transcripts) {
  const uint32_t k = static_cast<uint32_t>(transcripts.size());
  OffloadEngineRig reference(siesta::testing::rig_with_sessions(k, k, /*offload=*/false));
  for (uint32_t c = 0; c < k; ++c) {
    for (size_t i = 0; i < transcripts[c].prompts.size(); ++i) {
      SessionRoute alone;
      alone.slot = c;
      Result<GenerateResult> want =
          reference.engine->generate(turn(transcripts[c].prompts[i], alone)).get();
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      EXPECT_EQ(transcripts[c].answers[i], want->text) << "client " << c << " turn " << i;
      EXPECT_EQ(transcripts[c].cached[i], want->cached_tokens) << "client " << c << " turn " << i;
    }
  }
}

// `parallel` sessions for `client_count` conversations. With P = 1 the committed bytes never pass
// the weights and one session (checked on every poll); with P > 1 a session's write ahead runs
// on the timers' thread while the engine thread restores and evicts others, so their
// pipelines share the backend's staging ring.
void clients_timers_and_status(uint32_t parallel, uint32_t client_count, int turn_count) {
  const uint32_t kClients = client_count;
  const int kTurns = turn_count;
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(parallel, kClients, /*offload=*/true));
  // P = 1: weights + one session; otherwise not checked here (engine_sessions_test does).
  const uint64_t budget =
      parallel == 1 ? rig.resident_committed : std::numeric_limits<uint64_t>::max();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> over_budget{0};
  std::atomic<uint64_t> polls{0};
  std::thread status([&] {
    while (!done.load()) {
      (void)rig.engine->status();
      (void)rig.engine->cache_status();
      (void)rig.engine->sessions();
      if (rig.backend->stats().committed_bytes > budget) over_budget.fetch_add(1);
      polls.fetch_add(1);
    }
  });
  // Idle saves race the clients; the clock stops before any snapshot could expire (8 x 60 s
  // < the 600 s expiry), so every kept history must come back.
  std::thread timers([&] {
    for (int advanced = 0; !done.load();) {
      if (advanced < 8) {
        rig.clock.advance(std::chrono::seconds(OffloadEngineRig::kIdleSeconds));
        ++advanced;
      }
      rig.executor.run_due();
      std::this_thread::yield();
    }
  });
  std::vector<Transcript> transcripts(kClients);
  std::vector<std::thread> clients;
  for (uint32_t c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::string history;
      for (int t = 0; t < kTurns; ++t) {
        const std::string prompt =
            history + " client " + std::to_string(c) + " turn " + std::to_string(t);
        Result<GenerateResult> got = rig.engine->generate(turn(prompt, key(c))).get();
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        transcripts[c].prompts.push_back(prompt);
        transcripts[c].answers.push_back(got->text);
        transcripts[c].cached.push_back(got->cached_tokens);
        history = prompt + got->text;
      }
    });
  }
  for (std::thread& client : clients) client.join();
  done = true;
  timers.join();
  status.join();
  EXPECT_EQ(over_budget.load(), 0u) << "of " << polls.load() << " polls";
  expect_as_if_alone(transcripts);
}

TEST(EngineSessionsRaceTest, ClientsTimersAndStatusAtOnce) { clients_timers_and_status(1, 3, 4); }

TEST(EngineSessionsRaceTest, WritesAheadBesideRestoresAndEvictionsShareTheStagingRing) {
  clients_timers_and_status(2, 5, 6);
}

TEST(EngineSessionsRaceTest, TheEvictedSessionsOwnRequestArrivesDuringItsEviction) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2, /*offload=*/true));
  std::vector<Transcript> transcripts(2);
  auto record = [&](uint32_t c, const std::string& prompt, const Result<GenerateResult>& got) {
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    transcripts[c].prompts.push_back(prompt);
    transcripts[c].answers.push_back(got->text);
    transcripts[c].cached.push_back(got->cached_tokens);
  };
  const std::string a0 = "conversation a";
  record(0, a0, rig.engine->generate(turn(a0, key(0))).get());
  for (int round = 0; round < 6; ++round) {
    // b needs a's room (a is evicted), and a's own next turn arrives from another thread while
    // b's command evicts it: a waits in the queue, then is restored (evicting b).
    const std::string b = "conversation b round " + std::to_string(round);
    const std::string kept = transcripts[0].prompts.back() + transcripts[0].answers.back();
    const std::string a = kept + " r" + std::to_string(round);
    auto for_b = rig.engine->generate(turn(b, key(1)));
    std::future<Result<GenerateResult>> for_a;
    std::thread arrives([&] { for_a = rig.engine->generate(turn(a, key(0))); });
    arrives.join();
    record(1, b, for_b.get());
    Result<GenerateResult> got_a = for_a.get();
    record(0, a, got_a);
    ASSERT_TRUE(got_a.ok());
    EXPECT_TRUE(got_a->admission.restored) << "round " << round;
    EXPECT_EQ(got_a->cached_tokens, kept.size() - 1) << "round " << round;
  }
  EXPECT_LE(rig.backend->stats().committed_bytes, rig.resident_committed);
  expect_as_if_alone({transcripts[0], Transcript{}});
}

TEST(EngineSessionsRaceTest, TwoRequestsOpenTheSameNewConversationOnce) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(2, 4, /*offload=*/true));
  std::future<Result<GenerateResult>> first;
  std::future<Result<GenerateResult>> second;
  std::thread one([&] { first = rig.engine->generate(turn("same key", key(7))); });
  std::thread two([&] { second = rig.engine->generate(turn("same key", key(7))); });
  one.join();
  two.join();
  Result<GenerateResult> a = first.get();
  Result<GenerateResult> b = second.get();
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<SessionStatus> all = rig.engine->sessions();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(all[0].keyed);
  EXPECT_EQ(all[0].commands, 2u);
  // The second to run found the first's longer history, rolled back to the newest recurrent
  // checkpoint before the prompt's end (none: the start) and read the prompt again: both
  // answers are the same conversation's first turn.
  EXPECT_EQ(a->text, b->text);
}

}  // namespace
}  // namespace siesta::engine
