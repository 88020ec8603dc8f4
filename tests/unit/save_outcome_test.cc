// A save's outcome step alone (core/offload/internal/save_outcome.h): from what the write left
// -- the phase, the write's status, the plan, the chain -- which end the save takes, what the
// phase is told, which files must go and how long a failure waits.
#include "core/offload/internal/save_outcome.h"

#include <gtest/gtest.h>

#include <chrono>

namespace siesta::offload {
namespace {

using End = SaveOutcome::End;
using Remove = SaveOutcome::Remove;
using std::chrono::seconds;

SaveFacts durable_whole() {
  SaveFacts facts;
  facts.phase = Phase::kSaveFinishing;
  facts.written = StatusCode::kOk;
  facts.segment = 0;
  facts.chain_segments = 3;  // a base and two deltas before
  facts.backoff_initial = seconds(1);
  facts.backoff_max = seconds(60);
  return facts;
}

TEST(SaveOutcomeTest, ADurableWholeSaveStartsANewChainAndIsReleased) {
  const SaveOutcome out = decide_save_outcome(durable_whole());
  EXPECT_EQ(out.end, End::kDurable);
  EXPECT_EQ(out.event, Event::kFileDurable);
  EXPECT_TRUE(out.new_chain);
  EXPECT_EQ(out.remove, Remove::kNothing) << "the superseded deltas went in the write step";
}

TEST(SaveOutcomeTest, ASaveAheadKeepsTheMemory) {
  SaveFacts facts = durable_whole();
  facts.keep_memory = true;
  const SaveOutcome out = decide_save_outcome(facts);
  EXPECT_EQ(out.end, End::kWrittenAhead);
  EXPECT_EQ(out.event, Event::kFileKept);
}

TEST(SaveOutcomeTest, ADurableDeltaExtendsTheChain) {
  SaveFacts facts = durable_whole();
  facts.segment = 3;
  const SaveOutcome out = decide_save_outcome(facts);
  EXPECT_EQ(out.end, End::kDurable);
  EXPECT_FALSE(out.new_chain);
  EXPECT_EQ(out.remove, Remove::kNothing);
}

TEST(SaveOutcomeTest, ACompleteSaveACommandCancelledRemovesWhatNoLongerHoldsTheMemory) {
  for (Phase phase : {Phase::kCommandSaveTail, Phase::kSaveTail}) {
    SCOPED_TRACE(phase_name(phase));
    SaveFacts facts = durable_whole();
    facts.phase = phase;
    SaveOutcome out = decide_save_outcome(facts);
    EXPECT_EQ(out.end, End::kCancelled);
    EXPECT_EQ(out.event, Event::kSaveCancelled);
    EXPECT_EQ(out.remove, Remove::kChain) << "a whole save replaced the chain's base";
    facts.segment = 2;
    out = decide_save_outcome(facts);
    EXPECT_EQ(out.remove, Remove::kThisDelta) << "the chain below a delta still holds its bytes";
  }
}

TEST(SaveOutcomeTest, AClosingOffloaderCancelsEvenAFinishedSave) {
  SaveFacts facts = durable_whole();
  facts.closing = true;
  const SaveOutcome out = decide_save_outcome(facts);
  EXPECT_EQ(out.end, End::kCancelled);
  EXPECT_EQ(out.remove, Remove::kChain);
}

TEST(SaveOutcomeTest, AWriteThatStoppedOnItsCancelFlagLeftNoFile) {
  SaveFacts facts = durable_whole();
  facts.phase = Phase::kCommandSaveTail;
  facts.written = StatusCode::kCancelled;
  const SaveOutcome out = decide_save_outcome(facts);
  EXPECT_EQ(out.end, End::kCancelled);
  EXPECT_EQ(out.remove, Remove::kNothing);
  facts.phase = Phase::kSaveFinishing;  // cancelled by closing, without a command
  EXPECT_EQ(decide_save_outcome(facts).end, End::kCancelled);
}

TEST(SaveOutcomeTest, AFailedSaveRemovesWhatItNamedAndNothingElse) {
  SaveFacts facts = durable_whole();
  facts.written = StatusCode::kIoError;  // the directory's sync, after the rename
  facts.named = true;
  SaveOutcome out = decide_save_outcome(facts);
  EXPECT_EQ(out.end, End::kFailed);
  EXPECT_EQ(out.event, Event::kSaveFailed);
  EXPECT_EQ(out.remove, Remove::kChain) << "the base may be the new one: no chain over it";
  facts.chain_segments = 0;
  EXPECT_EQ(decide_save_outcome(facts).remove, Remove::kChain)
      << "a first file, named but not durable: not left outside any chain";
  facts.chain_segments = 2;
  facts.segment = 2;  // a delta named but not durable: it goes, the chain below stands
  EXPECT_EQ(decide_save_outcome(facts).remove, Remove::kThisDelta);
  facts.to_ram = true;  // a copy into the RAM tier names no file
  EXPECT_EQ(decide_save_outcome(facts).remove, Remove::kNothing);
  facts.to_ram = false;
  // Failing before the name (the device wait, free space, a write): the path is as it was.
  facts.named = false;
  for (uint32_t segment : {0u, 2u}) {
    facts.segment = segment;
    EXPECT_EQ(decide_save_outcome(facts).remove, Remove::kNothing) << "segment " << segment;
  }
}

TEST(SaveOutcomeTest, FailuresBackOffDoublingUpToTheCap) {
  SaveFacts facts = durable_whole();
  facts.written = StatusCode::kNoSpace;
  for (uint32_t failures : {0u, 1u, 2u, 5u, 6u, 20u, 40u, 1000u}) {
    facts.failures_in_a_row = failures;
    const auto expected =
        failures >= 6 ? seconds(60) : seconds(uint64_t{1} << failures);  // 64 s > the cap
    EXPECT_EQ(decide_save_outcome(facts).backoff, expected) << failures << " failures before";
  }
}

}  // namespace
}  // namespace siesta::offload
