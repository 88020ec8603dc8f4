// Engine threads: status() answers while a command is blocked mid-generation; commands run
// one at a time in submission order; submitters on many threads get the bytes of a
// sequential run; wait_for_status() wakes on each change of the queue; the destructor lets the
// running command finish and cancels the queued ones. Every wait is a real synchronisation
// (latch, future, the engine's own condition), never a sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using testing::EngineRig;
using testing::text_of;

// A request whose first streamed piece announces itself and then blocks until released.
GenerateRequest blocking_request(std::latch& entered, std::latch& release, uint32_t tokens) {
  GenerateRequest request;
  request.prompt = "A long story begins";
  request.max_tokens = tokens;
  auto first = std::make_shared<bool>(true);
  request.on_text = [&entered, &release, first](std::string_view) {
    if (!*first) return;
    *first = false;
    entered.count_down();
    release.wait();
  };
  return request;
}

TEST(EngineConcurrencyTest, StatusAnswersWhileAGenerationIsBlocked) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  std::latch entered(1), release(1);
  auto running = rig.engine().generate(blocking_request(entered, release, 40));
  auto queued = rig.engine().reset();
  entered.wait();

  // The engine thread is inside the callback: status() must not wait for it.
  EngineStatus s = rig.engine().status();
  EXPECT_TRUE(s.busy);
  EXPECT_EQ(s.queued_commands, 1u);
  EXPECT_EQ(s.commands_run, 0u);
  EXPECT_EQ(s.model, "synthetic:tiny");
  EXPECT_EQ(s.history_tokens, std::string("A long story begins").size());  // prompt fed
  EXPECT_EQ(running.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  release.count_down();
  auto result = running.get();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->completion_tokens, 40u);
  ASSERT_TRUE(queued.get().ok());
  s = rig.engine().status();
  EXPECT_FALSE(s.busy);
  EXPECT_EQ(s.queued_commands, 0u);
  EXPECT_EQ(s.commands_run, 2u);
  EXPECT_EQ(s.history_tokens, 0u);  // the reset ran after the generation
}

TEST(EngineConcurrencyTest, CommandsRunOneAtATimeInSubmissionOrder) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  std::latch entered(1), release(1);
  std::vector<int> order;  // appended only on the engine thread
  auto first = rig.engine().generate(blocking_request(entered, release, 5));
  entered.wait();
  std::vector<std::future<Result<GenerateResult>>> rest;
  for (int id = 1; id <= 4; ++id) {
    GenerateRequest r;
    r.prompt = "request " + std::to_string(id);
    r.max_tokens = 3;
    auto seen = std::make_shared<bool>(false);
    r.on_text = [&order, id, seen](std::string_view) {
      if (!*seen) order.push_back(id);
      *seen = true;
    };
    rest.push_back(rig.engine().generate(std::move(r)));
  }
  EXPECT_EQ(rig.engine().status().queued_commands, 4u);
  release.count_down();
  ASSERT_TRUE(first.get().ok());
  for (auto& f : rest) ASSERT_TRUE(f.get().ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));
}

TEST(EngineConcurrencyTest, WaitForStatusSeesCommandsQueuedStartedAndEnded) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  Engine& engine = rig.engine();
  const auto queued = [](size_t n) {
    return [n](const EngineStatus& s) { return s.queued_commands == n; };
  };
  EXPECT_TRUE(engine.wait_for_status(queued(0), std::chrono::seconds(0))) << "true at once";
  EXPECT_FALSE(engine.wait_for_status(queued(1), std::chrono::milliseconds(1)));

  std::latch entered(1), release(1);
  auto running = engine.generate(blocking_request(entered, release, 4));
  // Submitted from another thread, as an HTTP handler would.
  std::thread submitter([&] { (void)engine.reset().get(); });
  EXPECT_TRUE(
      engine.wait_for_status([](const EngineStatus& s) { return s.busy && s.queued_commands == 1; },
                             std::chrono::seconds(30)));
  entered.wait();
  release.count_down();
  EXPECT_TRUE(
      engine.wait_for_status([](const EngineStatus& s) { return s.commands_run == 2 && !s.busy; },
                             std::chrono::seconds(30)));
  submitter.join();
  EXPECT_TRUE(running.get().ok());
}

TEST(EngineConcurrencyTest, ManySubmittersGetTheBytesOfASequentialRun) {
  const std::vector<std::string> prompts = {"alpha beta",   "alpha gamma",      "delta",
                                            "alpha beta x", "epsilon zeta eta", "delta delta"};
  std::vector<std::string> expected;
  {
    EngineRig reference;
    ASSERT_TRUE(reference.ok());
    for (const auto& p : prompts) expected.push_back(text_of(reference.generate(p, 12)));
  }
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  constexpr int kThreads = 4;
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0};
  std::thread poller([&] {  // status() from yet another thread, all along
    while (!done.load()) {
      EngineStatus s = rig.engine().status();
      if (s.context != 256u) mismatches.fetch_add(1);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> submitters;
  submitters.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        const size_t i = (t + round * kThreads) % prompts.size();
        GenerateRequest r;
        r.prompt = prompts[i];
        r.max_tokens = 12;
        auto result = rig.engine().generate(std::move(r)).get();
        if (!result.ok() || result->text != expected[i]) mismatches.fetch_add(1);
      }
    });
  }
  for (auto& s : submitters) s.join();
  done.store(true);
  poller.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(rig.engine().status().commands_run, uint64_t{kThreads * 3});
}

TEST(EngineConcurrencyTest, DestructorFinishesTheRunningCommandAndCancelsTheQueued) {
  auto rig = std::make_unique<EngineRig>();
  ASSERT_TRUE(rig->ok());
  std::latch entered(1), release(1);
  auto running = rig->engine().generate(blocking_request(entered, release, 20));
  entered.wait();
  GenerateRequest queued_request;
  queued_request.prompt = "never run";
  queued_request.on_text = [](std::string_view) { ADD_FAILURE() << "a queued command ran"; };
  auto queued_generate = rig->engine().generate(std::move(queued_request));
  auto queued_reset = rig->engine().reset();
  auto queued_export = rig->engine().export_conversation("x");

  std::thread destroyer([&rig] { rig->stop(); });
  // The destructor fails the queued commands before it waits for the running one.
  EXPECT_EQ(queued_generate.get().status().code(), StatusCode::kCancelled);
  EXPECT_EQ(queued_reset.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(queued_export.get().status().code(), StatusCode::kCancelled);
  EXPECT_EQ(running.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  release.count_down();
  destroyer.join();
  auto result = running.get();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->completion_tokens, 20u);  // finished, not cut short
  EXPECT_EQ(result->finish, FinishReason::kLength);
}

}  // namespace
}  // namespace siesta::engine
