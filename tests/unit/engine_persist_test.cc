// The engine's side of conversations kept across a restart (EngineOffload::persist), read back
// from the files themselves: every snapshot carries its conversation's route (its number, its
// history's tokens and, for a keyed one, an HMAC under the snapshot key of the key's SHA-256,
// never the SHA-256 itself, which a guess of a weak key could be checked against), and a
// restart under the same key file finds the conversation by that key again.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/snapshot/snapshot_reader.h"
#include "engine/conversation_route.h"
#include "engine/engine.h"
#include "runtime/engine_stack.h"
#include "tests/support/engine_test_device.h"
#include "tests/support/temp_dir.h"

namespace siesta::engine {
namespace {

class EnginePersistTest : public ::testing::Test {
 protected:
  std::unique_ptr<runtime::EngineStack> open() {
    runtime::EngineStackOptions options;
    options.device = siesta::testing::engine_test_device();
    options.model = model_config_from_spec("synthetic:tiny").value();
    options.offload.config.idle_seconds = 60;
    options.offload.config.expire_seconds = 600;
    options.offload.config.disk_dir = dir_.file("cache");
    options.offload.persist = true;
    options.offload.key_file = dir_.file("key");
    options.sessions.parallel = 1;
    options.sessions.max_sessions = 4;
    options.log = [](const std::string&) {};
    options.executor = &executor_;
    return runtime::EngineStack::open(std::move(options), clock_).value();
  }

  Result<GenerateResult> generate(Engine& engine, const std::string& prompt, SessionRoute route) {
    GenerateRequest request;
    request.prompt = prompt;
    request.max_tokens = 6;
    request.route = route;
    return engine.generate(std::move(request)).get();
  }

  siesta::testing::TempDir dir_;
  ManualClock clock_;
  ManualExecutor executor_{clock_};
};

TEST_F(EnginePersistTest, ASnapshotsRouteHoldsItsNumberItsHistoryAndAKeyedHmac) {
  std::unique_ptr<runtime::EngineStack> stack = open();
  Result<GenerateResult> first = generate(stack->engine(), "a keyed turn", route_by_key("k"));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(stack->engine().offload_now().ok());
  executor_.run_due();
  Result<std::string> path = stack->store()->snapshot_path(std::to_string(first->session));
  ASSERT_TRUE(path.ok());

  SnapshotReader reader(stack->fs(), clock_, *stack->key(), nullptr);
  SnapshotHeaderCheck check;
  check.path = *path;
  check.fingerprint = stack->engine().fingerprint();
  Result<SnapshotReadResult> header = reader.read_header(check);
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  Result<ConversationRoute> route = decode_route(header->header.route);
  ASSERT_TRUE(route.ok()) << route.status().to_string();
  EXPECT_EQ(route->slot, first->session);
  // The history the session holds: the prompt and every generated token but the last, which
  // was sampled and never fed.
  const std::string said = "a keyed turn" + first->text;
  EXPECT_EQ(std::string(route->history.begin(), route->history.end()),
            said.substr(0, said.size() - 1));
  ASSERT_TRUE(route->key.has_value());
  const SessionKey digest = session_key_of("k");
  EXPECT_NE(*route->key, digest) << "the key's SHA-256 is not what the file keeps";
  Result<snapshot::HeaderDigest> hmac =
      keyed_digest(*stack->key(), "siesta-conversation-key-v1", digest);
  ASSERT_TRUE(hmac.ok());
  EXPECT_TRUE(std::equal(hmac->begin(), hmac->end(), route->key->begin()));

  // A keyless conversation's route has no key.
  Result<GenerateResult> by_slot = generate(stack->engine(), "by its number", route_by_slot(2));
  ASSERT_TRUE(by_slot.ok()) << by_slot.status().to_string();
  ASSERT_TRUE(stack->engine().offload_now().ok());
  executor_.run_due();
  check.path = stack->store()->snapshot_path("2").value();
  header = reader.read_header(check);
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  route = decode_route(header->header.route);
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(route->slot, 2u);
  EXPECT_FALSE(route->key.has_value());
}

TEST_F(EnginePersistTest, ARestartUnderTheSameKeyFileFindsTheConversationByItsKey) {
  std::string history;
  {
    std::unique_ptr<runtime::EngineStack> stack = open();
    Result<GenerateResult> first = generate(stack->engine(), "remember this", route_by_key("k"));
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    history = "remember this" + first->text;
  }  // the close saves it
  std::unique_ptr<runtime::EngineStack> stack = open();
  EXPECT_EQ(stack->engine().status().adoption.adopted, 1u);
  EXPECT_TRUE(stack->engine().status().persist);
  Result<GenerateResult> other = generate(stack->engine(), history + " more", route_by_key("x"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->cached_tokens, 0u) << "another key never reaches it";
  Result<GenerateResult> again = generate(stack->engine(), history + " more", route_by_key("k"));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->cached_tokens, history.size() - 1);
  EXPECT_FALSE(again->admission.fallback.has_value());
}

}  // namespace
}  // namespace siesta::engine
