// A conversation restores only its own snapshot. Two conversations over two sessions of the real
// engine (OffloadEngineRig: ManualClock, ManualExecutor, real files, delta saves on), each
// offloaded after its turns, so that both leave files of the same process, key, fingerprint,
// layout and save count in one directory. Injected: the files swapped between them (whole
// snapshots, deltas), one conversation's chain put under the other's name, a conversation
// imported over a kept chain. Each restore must refuse what is not its own (a `foreign`
// fallback, the prompt read again) and every answer must equal an engine's that never offloaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/support/snapshot_test_util.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;
using siesta::testing::rig_with_sessions;

// Two conversations (slots 0 and 1) on an offloading engine, and the same turns on a twin that
// never offloads, whose answers are the reference.
struct TwoConversations {
  OffloadEngineRig rig{rig_with_sessions(2, 2)};
  OffloadEngineRig reference{rig_with_sessions(2, 2, /*offload=*/false)};
  std::string history[2];

  // One turn of conversation `c` on both engines; the offloading one's answer must be the
  // reference's. Returns the offloading engine's result.
  Result<GenerateResult> turn(uint32_t c, const std::string& words) {
    const std::string prompt = history[c] + words;
    Result<GenerateResult> got = rig.generate(prompt, 8, route_by_slot(c));
    Result<GenerateResult> want = reference.generate(prompt, 8, route_by_slot(c));
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_TRUE(want.ok()) << want.status().to_string();
    if (!got.ok() || !want.ok()) return got;
    EXPECT_EQ(got->text, want->text) << "conversation " << c << " after " << quoted(words);
    history[c] = prompt + got->text;
    return got;
  }
  // Both idle past the deadline: both saved, their memory released.
  void sleep_both() {
    rig.sleep_session();
    for (const SessionStatus& s : rig.engine->sessions()) {
      EXPECT_EQ(s.state, OffloadState::kDisk) << "session " << s.id;
    }
  }
  std::string path(uint32_t c, uint32_t segment = 0) const {
    return rig.store->snapshot_path(std::to_string(c), segment).value();
  }
  static std::string quoted(const std::string& s) { return "\"" + s + "\""; }
};

void swap_files(const std::string& a, const std::string& b) {
  const std::vector<uint8_t> bytes_a = snapshot_test::read_file(a);
  snapshot_test::write_file(a, snapshot_test::read_file(b));
  snapshot_test::write_file(b, bytes_a);
}

uint64_t foreign_fallbacks(const OffloadEngineRig& rig) {
  return rig.engine->cache_status()
      .counters.fallbacks[static_cast<size_t>(FallbackReason::kForeign)];
}
uint64_t delta_saves(const OffloadEngineRig& rig) {
  return rig.engine->cache_status().counters.delta_saves;
}

// The next turn of conversation `c` after its files were tampered with: refused (foreign), the
// prompt read from the start, the answer the reference's.
void expect_refused_and_right(TwoConversations& two, uint32_t c) {
  const uint64_t before = foreign_fallbacks(two.rig);
  Result<GenerateResult> after = two.turn(c, " and what next?");
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  ASSERT_TRUE(after->admission.fallback.has_value())
      << "conversation " << c << " restored a file that is not its own";
  EXPECT_EQ(*after->admission.fallback, FallbackReason::kForeign);
  EXPECT_EQ(after->cached_tokens, 0u);
  EXPECT_EQ(foreign_fallbacks(two.rig), before + 1);
}

TEST(SnapshotOwnershipTest, WholeSnapshotsSwappedBetweenConversationsAreRefused) {
  TwoConversations two;
  ASSERT_TRUE(two.turn(0, "The first user's secret plan").ok());
  ASSERT_TRUE(two.turn(1, "Another user's entirely different words").ok());
  two.sleep_both();
  ASSERT_TRUE(std::filesystem::exists(two.path(0)));
  ASSERT_TRUE(std::filesystem::exists(two.path(1)));
  swap_files(two.path(0),
             two.path(1));  // injected: each conversation's file under the other's name
  expect_refused_and_right(two, 0);
  expect_refused_and_right(two, 1);
}

TEST(SnapshotOwnershipTest, DeltasSwappedBetweenConversationsAreRefused) {
  TwoConversations two;
  ASSERT_TRUE(two.turn(0, "The first user's secret plan").ok());
  ASSERT_TRUE(two.turn(1, "Another user's entirely different words").ok());
  two.sleep_both();
  ASSERT_TRUE(two.turn(0, " goes on").ok());
  ASSERT_TRUE(two.turn(1, " goes on too").ok());
  two.sleep_both();
  // Each conversation's chain is its base and one delta, both deltas its second save.
  ASSERT_TRUE(std::filesystem::exists(two.path(0, 1)));
  ASSERT_TRUE(std::filesystem::exists(two.path(1, 1)));
  swap_files(two.path(0, 1), two.path(1, 1));  // injected: the deltas swapped
  expect_refused_and_right(two, 0);
  expect_refused_and_right(two, 1);
}

TEST(SnapshotOwnershipTest, OneConversationsChainUnderTheOthersNameIsRefused) {
  TwoConversations two;
  ASSERT_TRUE(two.turn(0, "The first user's secret plan").ok());
  ASSERT_TRUE(two.turn(1, "Another user's entirely different words").ok());
  two.sleep_both();
  ASSERT_TRUE(two.turn(0, " goes on").ok());
  ASSERT_TRUE(two.turn(1, " goes on too").ok());
  two.sleep_both();
  // Injected: conversation 1's whole chain (base and delta) copied over conversation 0's.
  for (uint32_t segment : {0u, 1u}) {
    snapshot_test::write_file(two.path(0, segment), snapshot_test::read_file(two.path(1, segment)));
  }
  expect_refused_and_right(two, 0);
  // Conversation 1's own chain is untouched and restores.
  Result<GenerateResult> own = two.turn(1, " still mine");
  ASSERT_TRUE(own.ok());
  EXPECT_TRUE(own->admission.restored);
}

TEST(SnapshotOwnershipTest, AConversationImportedOverAKeptChainIsSavedWholeAndRestoresAsItself) {
  TwoConversations two;
  ASSERT_TRUE(two.turn(0, "The conversation that is exported").ok());
  ASSERT_TRUE(two.rig.engine->export_conversation("exported", 0).get().ok());
  ASSERT_TRUE(two.reference.engine->export_conversation("exported", 0).get().ok());
  ASSERT_TRUE(two.turn(1, "The conversation it replaces, which sleeps and comes back").ok());
  two.sleep_both();
  ASSERT_TRUE(two.turn(1, " once").ok());  // restored: its chain stays as the base of a delta

  // Conversation 1 is replaced by the export (on both engines), then goes on from it.
  ASSERT_TRUE(two.rig.engine->import_conversation("exported", 1).get().ok());
  ASSERT_TRUE(two.reference.engine->import_conversation("exported", 1).get().ok());
  two.history[1] = two.history[0];
  const uint64_t deltas_before = delta_saves(two.rig);
  ASSERT_TRUE(two.turn(1, " continued after the import").ok());
  two.sleep_both();
  EXPECT_EQ(delta_saves(two.rig), deltas_before)
      << "the imported conversation was saved as a delta of the one it replaced";
  Result<GenerateResult> back = two.turn(1, " and back again");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->admission.restored);
  EXPECT_GT(back->cached_tokens, 0u) << "the imported conversation's history was not kept";

  // A slot save after that restore holds the imported conversation, not the one it replaced.
  ASSERT_TRUE(two.rig.engine->export_conversation("after", 1).get().ok());
  ASSERT_TRUE(two.reference.engine->export_conversation("after", 1).get().ok());
  ASSERT_TRUE(two.rig.engine->import_conversation("after", 0).get().ok());
  ASSERT_TRUE(two.reference.engine->import_conversation("after", 0).get().ok());
  two.history[0] = two.history[1];
  ASSERT_TRUE(two.turn(0, " from the second save").ok());
}

}  // namespace
}  // namespace siesta::engine
