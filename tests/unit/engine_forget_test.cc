// Forgetting a conversation by its route (Engine::forget(), OpenAI's Responses API DELETE):
// the table part (SessionTable::find() and forget(): the key dropped, the number reused for a
// fresh conversation) and the engine's (the history discarded when resident, the snapshot
// deleted without a restore when offloaded, NotFound for a key never seen, the slot rules,
// a forget that waits for its conversation's running command).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <span>
#include <string>

#include "engine/engine.h"
#include "engine/session_table.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/offload_engine_rig.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;
using std::chrono::seconds;

std::span<const uint8_t> bytes(const std::string& text) {
  return std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// ---- SessionTable ----

TEST(SessionTableForgetTest, FindNamesOnlyAnExistingConversation) {
  SessionTable table({4, 0.5});
  SIESTA_EXPECT_CODE(table.find(route_by_key("alice"), seconds(1)), StatusCode::kNotFound);
  SIESTA_EXPECT_CODE(table.find(route_by_slot(2), seconds(1)), StatusCode::kNotFound);
  SIESTA_EXPECT_CODE(table.find(route_by_slot(4), seconds(1)), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(table.find(SessionRoute{}, seconds(1)), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.conversations(), 0u) << "find() never creates a conversation";

  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice opened,
                              table.route(route_by_key("alice"), bytes("hello"), seconds(2)));
  // While its command runs, a find waits for it.
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice busy, table.find(route_by_key("alice"), seconds(3)));
  EXPECT_TRUE(busy.wait);
  table.end(opened.id, bytes("hello there"), seconds(3));
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice found, table.find(route_by_key("alice"), seconds(4)));
  EXPECT_EQ(found.id, opened.id);
  EXPECT_FALSE(found.wait || found.create || found.forget);
  EXPECT_TRUE(table.entries().at(0).busy);
  // A client's slot does not reach a keyed conversation; an operator's does.
  SIESTA_EXPECT_CODE(table.find(route_by_slot(opened.id), seconds(4)),
                     StatusCode::kFailedPrecondition);
  table.end(found.id, std::nullopt, seconds(4));
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice by_operator,
                              table.find(operator_route_to_slot(opened.id), seconds(5)));
  EXPECT_EQ(by_operator.id, opened.id);
  table.end(by_operator.id, std::nullopt, seconds(5));
}

TEST(SessionTableForgetTest, AForgottenKeyOpensAFreshConversationAndItsNumberIsReused) {
  SessionTable table({2, 0.5});
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice alice,
                              table.route(route_by_key("alice"), bytes("hello"), seconds(1)));
  table.end(alice.id, bytes("hello alice"), seconds(1));
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice found, table.find(route_by_key("alice"), seconds(2)));
  table.forget(found.id);
  table.end(found.id, std::nullopt, seconds(2));
  const TableEntry entry = table.entries().at(0);
  EXPECT_EQ(entry.history_tokens, 0u);
  EXPECT_FALSE(entry.keyed);
  EXPECT_FALSE(entry.busy);
  EXPECT_EQ(table.counters().forgotten, 0u) << "counts only those dropped to make room";
  SIESTA_EXPECT_CODE(table.find(route_by_key("alice"), seconds(3)), StatusCode::kNotFound);
  // The next fresh conversation takes the emptied number, not a new one.
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice bob,
                              table.route(route_by_key("bob"), bytes("hi"), seconds(4)));
  EXPECT_EQ(bob.id, alice.id);
  EXPECT_FALSE(bob.create || bob.forget);
  table.end(bob.id, bytes("hi bob"), seconds(4));
  // And alice, back, is a fresh conversation of her own.
  SIESTA_ASSERT_OK_AND_ASSIGN(RouteChoice again,
                              table.route(route_by_key("alice"), bytes("hello"), seconds(5)));
  EXPECT_NE(again.id, bob.id);
  EXPECT_TRUE(again.create);
  table.end(again.id, bytes("hello"), seconds(5));
}

// ---- Engine ----

Result<GenerateResult> ask(OffloadEngineRig& rig, const std::string& prompt, SessionRoute route) {
  return rig.generate(prompt, 8, route);
}

TEST(EngineForgetTest, AResidentConversationIsForgottenAndItsKeyStartsAfresh) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(2, 2, /*offload=*/false));
  OffloadEngineRig fresh(siesta::testing::rig_with_sessions(2, 2, /*offload=*/false));
  const std::string prompt = "Tell me about the sea.";
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult first, ask(rig, prompt, route_by_key("alice")));
  SIESTA_ASSERT_OK(ask(rig, "Something else entirely", route_by_key("bob")));
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult again, ask(rig, prompt, route_by_key("alice")));
  EXPECT_EQ(again.cached_tokens, prompt.size()) << "alice's history is kept";

  SIESTA_EXPECT_OK(rig.engine->forget(route_by_key("alice")).get());
  SIESTA_EXPECT_CODE(rig.engine->forget(route_by_key("alice")).get(), StatusCode::kNotFound);
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult after, ask(rig, prompt, route_by_key("alice")));
  EXPECT_EQ(after.cached_tokens, 0u) << "the key opened a fresh conversation";
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult want, ask(fresh, prompt, route_by_key("alice")));
  EXPECT_EQ(after.text, want.text);
  EXPECT_EQ(after.text, first.text);
  // Bob's conversation is untouched.
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult bob,
                              ask(rig, "Something else entirely", route_by_key("bob")));
  EXPECT_EQ(bob.cached_tokens, std::string("Something else entirely").size());
}

TEST(EngineForgetTest, AKeyNeverSeenIsNotFoundAndChangesNothing) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  SIESTA_ASSERT_OK(ask(rig, "hello there", route_by_key("alice")));
  const auto before = rig.engine->sessions();
  SIESTA_EXPECT_CODE(rig.engine->forget(route_by_key("mallory")).get(), StatusCode::kNotFound);
  SIESTA_EXPECT_CODE(rig.engine->forget(SessionRoute{}).get(), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(rig.engine->forget(route_by_slot(1)).get(), StatusCode::kNotFound);
  SIESTA_EXPECT_CODE(rig.engine->forget(route_by_slot(2)).get(), StatusCode::kInvalidArgument);
  // A client's slot number does not reach a keyed conversation.
  SIESTA_EXPECT_CODE(rig.engine->forget(route_by_slot(0)).get(), StatusCode::kFailedPrecondition);
  const auto after = rig.engine->sessions();
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(after[0].tokens, before[0].tokens);
  EXPECT_TRUE(after[0].keyed);
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult back, ask(rig, "hello there", route_by_key("alice")));
  EXPECT_EQ(back.cached_tokens, std::string("hello there").size());
}

TEST(EngineForgetTest, AnOffloadedConversationsSnapshotIsDeletedWithoutARestore) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(1, 2));
  SIESTA_ASSERT_OK(ask(rig, "the first conversation", route_by_key("alice")));
  // Bob's command evicts alice's session: her conversation is on disk.
  SIESTA_ASSERT_OK(ask(rig, "the second conversation", route_by_key("bob")));
  rig.executor.run_due();
  const std::string alice_file = rig.store->snapshot_path("0").value();
  ASSERT_TRUE(std::filesystem::exists(alice_file));
  const auto restores = [&] { return rig.engine->cache_status().counters.restores; };
  const uint64_t restores_before = restores();
  const uint64_t committed_before = rig.backend->stats().committed_bytes;

  SIESTA_EXPECT_OK(rig.engine->forget(route_by_key("alice")).get());
  EXPECT_FALSE(std::filesystem::exists(alice_file));
  EXPECT_EQ(restores(), restores_before) << "forgetting must not restore the conversation";
  EXPECT_EQ(rig.backend->stats().committed_bytes, committed_before);
  EXPECT_EQ(rig.engine->sessions().at(0).state, OffloadState::kExpired);

  // Bob is still resident and kept; alice comes back to a fresh conversation.
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult bob,
                              ask(rig, "the second conversation", route_by_key("bob")));
  EXPECT_EQ(bob.cached_tokens, std::string("the second conversation").size());
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult alice,
                              ask(rig, "the first conversation", route_by_key("alice")));
  EXPECT_EQ(alice.cached_tokens, 0u);
}

TEST(EngineForgetTest, AConversationWrittenAheadLosesItsFileToo) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(2, 3));
  SIESTA_ASSERT_OK(ask(rig, "the first conversation", route_by_key("alice")));
  SIESTA_ASSERT_OK(ask(rig, "the second conversation", route_by_key("bob")));
  SIESTA_ASSERT_OK(ask(rig, "the third conversation", route_by_key("carol")));
  rig.executor.run_due();  // the writes ahead (more conversations than sessions)
  const std::string carol_file = rig.store->snapshot_path("2").value();
  ASSERT_TRUE(std::filesystem::exists(carol_file));
  ASSERT_TRUE(rig.engine->sessions().at(2).state == OffloadState::kResident);

  SIESTA_EXPECT_OK(rig.engine->forget(route_by_key("carol")).get());
  rig.executor.run_due();
  EXPECT_FALSE(std::filesystem::exists(carol_file));
  EXPECT_EQ(rig.engine->sessions().at(2).tokens, 0u);
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult carol,
                              ask(rig, "the third conversation", route_by_key("carol")));
  EXPECT_EQ(carol.cached_tokens, 0u);
}

TEST(EngineForgetTest, AnOperatorsSlotRouteForgetsTheSingleConversation) {
  OffloadEngineRig rig;  // one conversation, offload on
  SIESTA_ASSERT_OK(rig.generate("hello there, single session"));
  EXPECT_GT(rig.engine->status().history_tokens, 0u);
  SIESTA_EXPECT_OK(rig.engine->forget(operator_route_to_slot(0)).get());
  EXPECT_EQ(rig.engine->status().history_tokens, 0u);
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult after, rig.generate("hello there, single session"));
  EXPECT_EQ(after.cached_tokens, 0u);
}

TEST(EngineForgetTest, AForgetWaitsForTheConversationsRunningCommand) {
  OffloadEngineRig rig(siesta::testing::rig_with_sessions(2, 2, /*offload=*/false));
  std::promise<void> let_go;
  std::shared_future<void> go = let_go.get_future().share();
  std::promise<void> started;
  bool first_piece = true;
  GenerateRequest request;
  request.prompt = "a long answer, please";
  request.max_tokens = 6;
  request.route = route_by_key("alice");
  request.on_text = [&](std::string_view) {
    if (!first_piece) return;
    first_piece = false;
    started.set_value();
    go.wait();
  };
  auto running = rig.engine->generate(std::move(request));
  started.get_future().wait();
  auto forgotten = rig.engine->forget(route_by_key("alice"));
  EXPECT_EQ(forgotten.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  let_go.set_value();
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult result, running.get());
  EXPECT_EQ(result.completion_tokens, 6u);
  SIESTA_EXPECT_OK(forgotten.get());
  SIESTA_ASSERT_OK_AND_ASSIGN(GenerateResult after,
                              ask(rig, "a long answer, please", route_by_key("alice")));
  EXPECT_EQ(after.cached_tokens, 0u);
}

}  // namespace
}  // namespace siesta::engine
