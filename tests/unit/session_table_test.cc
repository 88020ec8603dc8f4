// SessionTable: each routing rule and their order, the --session-match threshold, the fresh
// conversation's choice (an empty one, a new number, then the least recently used idle one,
// forgotten), the slot range and the refusal when every conversation runs a command.
#include "engine/session_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <string>

namespace siesta::engine {
namespace {

using std::chrono::seconds;

std::span<const uint8_t> bytes(const std::string& text) {
  return std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Routes `prompt`, ends the command with `history` (default: the prompt) at time `at`.
RouteChoice run(SessionTable& table, const std::string& prompt, int at, SessionRoute route = {},
                const std::optional<std::string>& history = std::nullopt) {
  Result<RouteChoice> choice = table.route(route, bytes(prompt), seconds(at));
  EXPECT_TRUE(choice.ok()) << choice.status().to_string();
  if (!choice.ok()) return {};
  const std::string kept = history.value_or(prompt);
  table.end(choice->id, bytes(kept), seconds(at));
  return *choice;
}

TEST(SessionTableTest, KeysHashToDistinctDigests) {
  EXPECT_EQ(session_key_of("user-1"), session_key_of("user-1"));
  EXPECT_NE(session_key_of("user-1"), session_key_of("user-2"));
  EXPECT_NE(session_key_of(""), SessionKey{});
}

TEST(SessionTableTest, OneConversationServesEveryPrompt) {
  SessionTable table({1, 0.5});
  const RouteChoice first = run(table, "hello world", 1);
  EXPECT_EQ(first.id, 0u);
  EXPECT_TRUE(first.create);
  const RouteChoice other = run(table, "something else entirely", 2);
  EXPECT_EQ(other.id, 0u);
  EXPECT_EQ(other.rule, RouteRule::kSingle);
  EXPECT_FALSE(other.forget);  // the prompt keeps what it shares, as one session always did
  EXPECT_FALSE(other.create);
}

TEST(SessionTableTest, PrefixRoutingNeedsTheShareOfTheHistory) {
  SessionTable table({4, 0.5});
  EXPECT_EQ(run(table, "aaaaaaaaaa", 1).id, 0u);  // fresh: number 0
  EXPECT_EQ(run(table, "bbbbbbbbbb", 2).id, 1u);  // shares nothing: fresh, number 1
  // Repeats 6 of conversation 0's 10 tokens (>= 0.5 x 10): continues it.
  const RouteChoice continued = run(table, "aaaaaaXYZ", 3);
  EXPECT_EQ(continued.id, 0u);
  EXPECT_EQ(continued.rule, RouteRule::kPrefix);
  // Conversation 0 now holds "aaaaaaXYZ" (9); 4 shared < 4.5: a fresh one.
  const RouteChoice fresh = run(table, "aaaaQ", 4);
  EXPECT_EQ(fresh.id, 2u);
  EXPECT_EQ(fresh.rule, RouteRule::kFresh);
  EXPECT_TRUE(fresh.create);
}

TEST(SessionTableTest, TheLongestSharedPrefixWins) {
  SessionTable table({4, 0.0});
  run(table, "abcdef", 1);                    // 0
  run(table, "abcXYZ", 2, route_by_slot(1));  // 1, placed by number
  EXPECT_EQ(run(table, "abcdeQ", 3).id, 0u);  // 5 shared with 0, 3 with 1
  EXPECT_EQ(run(table, "abcXQ", 4).id, 1u);   // 4 shared with 1, 3 with 0
}

// Guards: a tie between two equally long matches broken by anything but the last use (the
// conversation number, the first found). The most recently used wins, whichever number it
// has.
TEST(SessionTableTest, ATieBetweenEquallyLongMatchesGoesToTheMostRecentlyUsed) {
  SessionTable table({4, 0.5});
  run(table, "abcdefgh", 1, route_by_slot(0));
  run(table, "abcdefXY", 2, route_by_slot(1));  // 6 shared with "abcdefQQ", as 0 has
  RouteChoice tie = run(table, "abcdefQQ", 3);
  EXPECT_EQ(tie.id, 1u) << "conversation 1 was used last";
  EXPECT_EQ(tie.rule, RouteRule::kPrefix);
  // Now the other way round: 0, with the same history again, is the more recent.
  run(table, "abcdefgh", 4, route_by_slot(0));
  run(table, "abcdefXY", 5, route_by_slot(1));
  run(table, "abcdefgh", 6, route_by_slot(0));
  tie = run(table, "abcdefZZ", 7);
  EXPECT_EQ(tie.id, 0u) << "conversation 0 was used last";
  EXPECT_EQ(tie.rule, RouteRule::kPrefix);
}

// Guards: prefix routing that weighs keyed conversations. A keyed conversation sharing more
// of the prompt than a keyless one (and used more recently) is skipped: the keyless one
// continues, and is told so (kPrefix), not a fresh one.
TEST(SessionTableTest, PrefixRoutingPassesOverAKeyedConversationThatMatchesBetter) {
  SessionTable table({4, 0.5});
  run(table, "shared prefix, keyless", 1);                               // 0: 13 shared below
  run(table, "shared prefix and a private rest", 2, route_by_key("k"));  // 1: 28 shared
  const RouteChoice routed = run(table, "shared prefix and a private guess", 3);
  EXPECT_EQ(routed.id, 0u);
  EXPECT_EQ(routed.rule, RouteRule::kPrefix);
  EXPECT_FALSE(routed.forget);
  EXPECT_EQ(table.entries()[1].commands, 1u) << "the keyed conversation was reached";
}

TEST(SessionTableTest, MatchOneNeedsTheWholeHistory) {
  SessionTable table({4, 1.0});
  run(table, "abcdef", 1);
  EXPECT_EQ(run(table, "abcdefgh", 2).id, 0u);  // extends it
  EXPECT_EQ(run(table, "abcdeX", 3).id, 1u);    // diverges: fresh
}

TEST(SessionTableTest, KeyComesFirstThenSlotThenPrefix) {
  SessionTable table({4, 0.5});
  const RouteChoice a = run(table, "shared prompt", 1, route_by_key("alice"));
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(a.rule, RouteRule::kKey);
  // The same prompt with another key: a new conversation, not the prefix match.
  const RouteChoice b = run(table, "shared prompt", 2, route_by_key("bob"));
  EXPECT_EQ(b.id, 1u);
  EXPECT_EQ(b.rule, RouteRule::kKey);
  // A key beats a slot number.
  SessionRoute both = route_by_key("alice");
  both.slot = 3;
  EXPECT_EQ(run(table, "x", 3, both).id, 0u);
  // A slot beats the prefix.
  const RouteChoice by_slot = run(table, "shared prompt", 4, route_by_slot(3));
  EXPECT_EQ(by_slot.id, 3u);
  EXPECT_EQ(by_slot.rule, RouteRule::kSlot);
  EXPECT_TRUE(by_slot.create);
  // Without key or slot, keyed conversations are never reached by prefix: number 3 (keyless)
  // holds "shared prompt".
  EXPECT_EQ(run(table, "shared prompt and more", 5).id, 3u);
  // Alice's key still finds her conversation.
  EXPECT_EQ(run(table, "y", 6, route_by_key("alice")).id, 0u);
}

// A conversation opened with a key is reached by that key alone: a client's id_slot is refused
// (nothing changes), and no keyless prompt reaches it by its prefix, however much of its history
// the prompt repeats and whatever --session-match says; only an operator's /slots command does.
TEST(SessionTableTest, AKeyedConversationIsReachedOnlyByItsKeyOrAnOperator) {
  SessionTable table({2, 0.0});
  EXPECT_EQ(run(table, "a private history", 1, route_by_key("owner")).id, 0u);
  Result<RouteChoice> by_slot =
      table.route(route_by_slot(0), bytes("a private history"), seconds(2));
  ASSERT_FALSE(by_slot.ok());
  EXPECT_EQ(by_slot.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(by_slot.status().message().find("private"), std::string::npos);
  EXPECT_EQ(table.entries()[0].commands, 1u) << "a refused route takes nothing";
  // A keyless prompt repeating the whole history (match 0: any shared prefix would do).
  const RouteChoice probe = run(table, "a private history and a guess", 3);
  EXPECT_NE(probe.id, 0u);
  EXPECT_EQ(probe.rule, RouteRule::kFresh);
  // The operator's route reaches it; the key still does.
  EXPECT_EQ(run(table, "", 4, operator_route_to_slot(0), "a private history").id, 0u);
  EXPECT_EQ(run(table, "a private history.", 5, route_by_key("owner")).id, 0u);
}

// With one conversation, a keyless prompt does not continue a keyed one (rule 3 skips it): it
// starts fresh, forgetting the keyed conversation when it runs no command.
TEST(SessionTableTest, WithOneConversationAKeylessPromptForgetsAKeyedOne) {
  SessionTable table({1, 0.5});
  EXPECT_EQ(run(table, "a private history", 1, route_by_key("owner")).id, 0u);
  const RouteChoice probe = run(table, "a private history and a guess", 2);
  EXPECT_EQ(probe.id, 0u);
  EXPECT_EQ(probe.rule, RouteRule::kFresh);
  EXPECT_TRUE(probe.forget) << "the keyed history is dropped, not continued";
  EXPECT_FALSE(table.entries()[0].keyed);
}

TEST(SessionTableTest, SlotOutOfRangeChangesNothing) {
  SessionTable table({2, 0.5});
  Result<RouteChoice> bad = table.route(route_by_slot(2), bytes("x"), seconds(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(table.entries().empty());
}

TEST(SessionTableTest, AFreshConversationAtNForgetsTheLeastRecentlyUsedIdleOne) {
  SessionTable table({3, 0.5});
  run(table, "one one one", 1, route_by_key("k1"));
  run(table, "two two two", 2, route_by_key("k2"));
  run(table, "three three", 3, route_by_key("k3"));
  run(table, "one one one more", 4, route_by_key("k1"));  // k1 used again: k2 is now the oldest
  const RouteChoice fresh = run(table, "four", 5, route_by_key("k4"));
  EXPECT_EQ(fresh.id, 1u);  // k2's number
  EXPECT_TRUE(fresh.forget);
  EXPECT_FALSE(fresh.create);
  EXPECT_EQ(table.counters().forgotten, 1u);
  // k2 is gone: its key opens a fresh conversation (forgetting the oldest again: k3).
  const RouteChoice back = run(table, "two two two", 6, route_by_key("k2"));
  EXPECT_EQ(back.id, 2u);
  EXPECT_TRUE(back.forget);
}

// Guards: a forgotten conversation's key kept on the conversation number that a keyless
// prompt took (its key not dropped), or a keyed conversation with an empty history taken as an
// empty keyless one: either way the key's owner, coming back, lands in the conversation that
// took its number, with another client's history. It must land in a fresh one.
TEST(SessionTableTest, AForgottenKeysOwnerLandsInAFreshConversation) {
  {
    SessionTable table({2, 0.5});
    run(table, "alice's history", 1, route_by_key("alice"));  // 0
    run(table, "bob's history", 2, route_by_key("bob"));      // 1
    // A keyless prompt at N: alice's conversation (least recently used) is forgotten for it.
    const RouteChoice keyless = run(table, "someone else", 3);
    ASSERT_EQ(keyless.id, 0u);
    ASSERT_TRUE(keyless.forget);
    EXPECT_FALSE(table.entries()[0].keyed) << "the forgotten key stayed with number 0";
    // Alice comes back: a fresh conversation (bob's, now the least recently used), never 0.
    const RouteChoice back = run(table, "alice's history, continued", 4, route_by_key("alice"));
    EXPECT_EQ(back.id, 1u) << "alice landed in the conversation that took her number";
    EXPECT_TRUE(back.forget);
    EXPECT_EQ(back.rule, RouteRule::kKey);
  }
  {
    // A keyed conversation whose history is empty (its operator reset it) is still its key's:
    // a keyless prompt takes the empty keyless one, not it.
    SessionTable table({2, 0.5});
    run(table, "carol's history", 1, route_by_key("carol"));  // 0
    run(table, "", 2, operator_route_to_slot(0));             // reset: its history is empty
    run(table, "", 3, operator_route_to_slot(1));             // 1: keyless and empty
    const RouteChoice keyless = run(table, "someone else", 4);
    EXPECT_EQ(keyless.id, 1u) << "a keyless prompt took carol's conversation";
    EXPECT_FALSE(keyless.forget);
    EXPECT_TRUE(table.entries()[0].keyed);
    const RouteChoice back = run(table, "carol again", 5, route_by_key("carol"));
    EXPECT_EQ(back.id, 0u) << "carol's own conversation, empty, is hers";
    EXPECT_EQ(back.rule, RouteRule::kKey);
  }
}

TEST(SessionTableTest, AnEmptyConversationIsReusedBeforeANewNumber) {
  SessionTable table({3, 0.5});
  run(table, "abc", 1);
  table.clear_history(0);
  const RouteChoice fresh = run(table, "zzz", 2);
  EXPECT_EQ(fresh.id, 0u);
  EXPECT_FALSE(fresh.forget);
}

TEST(SessionTableTest, BusyConversationsAreNeverForgotten) {
  SessionTable table({2, 0.5});
  ASSERT_TRUE(table.route(route_by_key("a"), bytes("a"), seconds(1)).ok());  // busy: not ended
  ASSERT_TRUE(table.route(route_by_key("b"), bytes("b"), seconds(2)).ok());  // busy
  Result<RouteChoice> third = table.route(route_by_key("c"), bytes("c"), seconds(3));
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->wait) << "every conversation runs a command: c waits for one to end";
  EXPECT_EQ(table.entries().size(), 2u) << "a waiting command takes nothing";
  table.end(1, std::nullopt, seconds(4));
  Result<RouteChoice> now = table.route(route_by_key("c"), bytes("c"), seconds(5));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->id, 1u);
  EXPECT_TRUE(now->forget);
}

// A conversation runs one command at a time: a second command for it waits, whichever rule
// chose it, and is routed to it once the first ends.
TEST(SessionTableTest, ACommandForABusyConversationWaitsForIt) {
  SessionTable table({3, 0.5});
  ASSERT_TRUE(table.route(route_by_key("a"), bytes("hello there"), seconds(1)).ok());
  for (const SessionRoute& route : {route_by_key("a"), operator_route_to_slot(0)}) {
    Result<RouteChoice> again = table.route(route, bytes("hello there again"), seconds(2));
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->wait);
    EXPECT_EQ(again->id, 0u);
  }
  EXPECT_EQ(table.entries()[0].commands, 1u) << "a waiting command is not counted";
  table.end(0, bytes("hello there"), seconds(3));
  Result<RouteChoice> now = table.route(route_by_key("a"), bytes("hello there again"), seconds(4));
  ASSERT_TRUE(now.ok());
  EXPECT_FALSE(now->wait);
  EXPECT_EQ(now->id, 0u);
}

TEST(SessionTableTest, LeastRecentIdleHonoursEligibilityAndBusy) {
  SessionTable table({3, 0.5});
  run(table, "a", 1, route_by_slot(0));
  run(table, "b", 2, route_by_slot(1));
  run(table, "c", 3, route_by_slot(2));
  EXPECT_EQ(table.least_recent_idle([](uint32_t) { return true; }), 0u);
  EXPECT_EQ(table.least_recent_idle([](uint32_t id) { return id != 0; }), 1u);
  ASSERT_TRUE(table.route(route_by_slot(1), bytes("b"), seconds(4)).ok());  // busy now
  EXPECT_EQ(table.least_recent_idle([](uint32_t id) { return id != 0; }), 2u);
  EXPECT_EQ(table.least_recent_idle([](uint32_t) { return false; }), std::nullopt);
}

TEST(SessionTableTest, ANumberNeverRoutedToGivesWayFirst) {
  // Conversation 0's session exists before any command: a first command for another slot must
  // find it to make room (before, it found none and was answered "all sessions busy").
  SessionTable table({4, 0.5});
  run(table, "d", 1, route_by_slot(3));
  EXPECT_EQ(table.least_recent_idle([](uint32_t id) { return id != 3; }), 0u);
  EXPECT_EQ(table.least_recent_idle([](uint32_t id) { return id == 3; }), 3u);
}

TEST(SessionTableTest, EntriesNeverHoldTheKey) {
  SessionTable table({2, 0.5});
  run(table, "hello", 1, route_by_key("secret-key"));
  const std::vector<TableEntry> entries = table.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(entries[0].keyed);
  EXPECT_EQ(entries[0].history_tokens, 5u);
  EXPECT_EQ(entries[0].commands, 1u);
}

}  // namespace
}  // namespace siesta::engine
