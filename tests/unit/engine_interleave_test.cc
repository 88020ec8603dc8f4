// Several commands running at once (EngineSessions::parallel > 1): their steps take turns, so a
// short request beside a long generation gets its first token after its own few steps, not
// after the long one ends; a conversation still runs its commands one at a time, in the order
// they came, while other conversations' commands go ahead of them; and interleaving changes no
// byte of any answer (each equals the same request run alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;
using siesta::testing::OffloadEngineRigOptions;

OffloadEngineRigOptions two_at_once() {
  OffloadEngineRigOptions options = siesta::testing::rig_with_sessions(2, 2, /*offload=*/false);
  options.model = model_config_from_spec("synthetic:tiny", 2048, std::nullopt).value();
  return options;
}

GenerateRequest request(std::string prompt, uint32_t max_tokens, uint32_t slot) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.route = route_by_slot(slot);
  return r;
}

// The bug this guards: head-of-line blocking. A request that waits for the running generation
// to end would see all of the long one's remaining ~1,000 tokens go first.
TEST(EngineInterleaveTest, AShortRequestBesideALongGenerationWaitsOnlyForItsOwnSteps) {
  constexpr uint32_t kLong = 1000;
  constexpr size_t kArrivesAt = 10;  // the long one's token at which the short one is sent
  OffloadEngineRig rig(two_at_once());
  OffloadEngineRig alone(two_at_once());

  std::mutex mutex;
  size_t long_tokens = 0;
  std::optional<size_t> long_tokens_at_short_first;
  std::future<Result<GenerateResult>> short_done;
  const std::string short_prompt = "hi";

  GenerateRequest long_request = request("tell me a long story", kLong, 0);
  long_request.on_text = [&](std::string_view) {
    std::lock_guard lock(mutex);
    ++long_tokens;
    if (long_tokens == kArrivesAt) {
      // Sent from the engine thread itself: generate() only queues the command.
      GenerateRequest short_request = request(short_prompt, 1, 1);
      short_request.on_text = [&](std::string_view) {
        std::lock_guard inner(mutex);
        long_tokens_at_short_first = long_tokens;
      };
      short_done = rig.engine->generate(std::move(short_request));
    }
  };
  Result<GenerateResult> long_result = rig.engine->generate(long_request).get();
  ASSERT_TRUE(long_result.ok()) << long_result.status().to_string();
  ASSERT_TRUE(short_done.valid());
  Result<GenerateResult> short_result = short_done.get();
  ASSERT_TRUE(short_result.ok()) << short_result.status().to_string();

  ASSERT_TRUE(long_tokens_at_short_first.has_value());
  // The short prompt's steps: two prefill blocks (1 token, then 1) and its token; the long one
  // takes one step beside each, and one more for the round in which the short one was sent.
  EXPECT_LE(*long_tokens_at_short_first - kArrivesAt, 4u)
      << "the short request waited behind the long generation";
  EXPECT_EQ(long_result->completion_tokens, kLong);

  // Interleaving changed no byte: each answer is the one the request gets alone.
  Result<GenerateResult> long_alone =
      alone.engine->generate(request("tell me a long story", kLong, 0)).get();
  Result<GenerateResult> short_alone = alone.engine->generate(request(short_prompt, 1, 1)).get();
  ASSERT_TRUE(long_alone.ok() && short_alone.ok());
  EXPECT_EQ(long_result->text, long_alone->text);
  EXPECT_EQ(short_result->text, short_alone->text);
}

// A conversation runs one command at a time, in order; another conversation's command queued
// behind it does not wait for it.
TEST(EngineInterleaveTest, ACommandForABusyConversationWaitsAndOthersGoAhead) {
  OffloadEngineRig rig(two_at_once());
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::string> order;  // who streamed a token, in order
  auto record = [&](const char* who) {
    return [&, who](std::string_view) {
      std::lock_guard lock(mutex);
      order.emplace_back(who);
    };
  };
  GenerateRequest first = request("first turn of a", 40, 0);
  first.on_text = [&, tokens = 0](std::string_view) mutable {
    std::unique_lock lock(mutex);
    order.emplace_back("a1");
    // The engine thread holds here, in a1's first token, until both others are queued.
    if (++tokens == 1) cv.wait(lock, [&] { return release; });
  };
  auto a1 = rig.engine->generate(std::move(first));
  ASSERT_TRUE(rig.engine->wait_for_status([](const EngineStatus& s) { return s.busy; },
                                          std::chrono::seconds(30)));
  GenerateRequest second = request("second turn of a", 4, 0);
  second.on_text = record("a2");
  auto a2 = rig.engine->generate(std::move(second));
  GenerateRequest other = request("b", 4, 1);
  other.on_text = record("b");
  auto b = rig.engine->generate(std::move(other));
  ASSERT_TRUE(rig.engine->wait_for_status(
      [](const EngineStatus& s) { return s.queued_commands == 2; }, std::chrono::seconds(30)));
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(a1.get().ok());
  ASSERT_TRUE(a2.get().ok());
  ASSERT_TRUE(b.get().ok());

  auto first_of = [&](const std::string& who) {
    return std::find(order.begin(), order.end(), who) - order.begin();
  };
  auto last_of = [&](const std::string& who) {
    return order.rend() - std::find(order.rbegin(), order.rend(), who) - 1;
  };
  EXPECT_LT(last_of("b"), last_of("a1")) << "b waited for a's first command";
  EXPECT_GT(first_of("a2"), last_of("a1")) << "a's second command overtook its first";
  EXPECT_EQ(rig.engine->status().commands_run, 3u);
}

}  // namespace
}  // namespace siesta::engine
