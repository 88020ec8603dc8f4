// Delta saves in the RAM tier (core/offload/offloader_save.cc, ram_snapshot.h's RamCopy): a
// conversation restored from its RAM copy keeps that copy as the base of its next save, which
// then copies only what changed, as one more segment beside it; the restore applies them in
// order. The base is the first room the tier takes back (no write: the device holds every
// byte); a delta without room beside its base replaces it with a whole copy, or goes to disk
// whole; a copy with deltas spills as a chain of files. Every byte comes back each time.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "core/offload/offloader.h"
#include "core/offload/ram_tier.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/ram_tier_scene.h"

namespace siesta {
namespace {

using test_util::expect_one_place;
using test_util::file_of;
using test_util::kSceneLength;
using test_util::NeighbourSession;
using test_util::OffloaderFixture;
using test_util::OffloaderSetup;
using test_util::one_copy_bytes;
using test_util::tier_for;

// Session "0" offloaded to RAM at kSceneLength - 4 positions, then back for 4 more: resident,
// its copy kept as the base. Returns the copy's bytes (0 when a step failed).
uint64_t back_from_ram_with_its_base(OffloaderFixture& f) {
  if (!f.command(kSceneLength - 4).ok() || !f.offloader_->evict().ok()) return 0;
  const uint64_t copy = f.offloader_->status().ram_bytes;
  Result<Admission> back = f.command(4);
  if (!back.ok() || !back->restored) return 0;
  return copy;
}

TEST(OffloaderRamDeltaTest, AReturningConversationCopiesOnlyWhatChangedBesideItsCopy) {
  OffloaderFixture f(tier_for(4, kDefaultDeltaSegments));
  const uint64_t base = back_from_ram_with_its_base(f);
  ASSERT_GT(base, 0u);
  OffloadStatus st = f.offloader_->status();
  EXPECT_EQ(st.state, OffloadState::kResident);
  EXPECT_EQ(st.ram_bytes, base) << "the copy stays as the base of the next save";
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, base);

  ASSERT_TRUE(f.offloader_->evict().ok());
  st = f.offloader_->status();
  EXPECT_EQ(st.state, OffloadState::kRam);
  EXPECT_EQ(st.counters.ram_saves, 2u);
  EXPECT_EQ(st.counters.delta_saves, 1u);
  EXPECT_GT(st.ram_bytes, base);
  EXPECT_LT(st.ram_bytes - base, base / 2) << "the delta holds 4 positions and the state";
  EXPECT_EQ(f.ram_tier_->stats().blocks, 2u);
  EXPECT_FALSE(file_of(f, "0"));

  // Back from both segments, and once more: the third save builds on both.
  Result<Admission> again = f.command(1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->restored);
  EXPECT_EQ(f.target_->length(), kSceneLength + 1);
  EXPECT_EQ(f.target_->verify(), "");
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 2u);
  EXPECT_EQ(f.ram_tier_->stats().blocks, 3u);
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamDeltaTest, WithDeltasOffTheCopyGoesBackAtTheRestore) {
  OffloaderFixture f(tier_for(4, /*delta_segments=*/0));
  ASSERT_GT(back_from_ram_with_its_base(f), 0u);
  EXPECT_EQ(f.offloader_->status().ram_bytes, 0u);
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, 0u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 0u);
  EXPECT_EQ(f.ram_tier_->stats().blocks, 1u);
}

TEST(OffloaderRamDeltaTest, AHistoryRewrittenFromItsStartGivesTheBaseBack) {
  OffloaderFixture f(tier_for(4, kDefaultDeltaSegments));
  ASSERT_GT(back_from_ram_with_its_base(f), 0u);
  {
    Result<Offloader::Lease> lease = f.offloader_->acquire();
    ASSERT_TRUE(lease.ok());
    f.target_->rewind(0);  // another conversation takes the session over
    f.target_->advance(3);
  }
  EXPECT_EQ(f.offloader_->status().ram_bytes, 0u) << "no delta can build on it";
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, 0u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 0u);
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->length(), 4u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamDeltaTest, AResidentConversationsBaseIsTheFirstRoomTaken) {
  // Room for two copies: "0"'s base and an older idle copy of "2"; the newcomer "1" needs one.
  OffloaderFixture f(tier_for(2, kDefaultDeltaSegments));
  NeighbourSession b(f, "1", /*seed=*/7);
  NeighbourSession c(f, "2", /*seed=*/9);
  ASSERT_TRUE(c.command(kSceneLength).ok());
  ASSERT_TRUE(c.offloader->evict().ok());
  ASSERT_EQ(c.offloader->status().state, OffloadState::kRam);
  f.pass(1);
  ASSERT_GT(back_from_ram_with_its_base(f), 0u);
  ASSERT_TRUE(b.command(kSceneLength).ok());

  ASSERT_TRUE(b.offloader->evict().ok());
  EXPECT_EQ(b.offloader->status().state, OffloadState::kRam);
  EXPECT_EQ(c.offloader->status().state, OffloadState::kRam)
      << "the idle copy, older, stays: giving up a base writes nothing";
  EXPECT_EQ(f.offloader_->status().ram_bytes, 0u);
  const RamTierStats tier = f.ram_tier_->stats();
  EXPECT_EQ(tier.bases_dropped, 1u);
  EXPECT_EQ(tier.spills, 0u);
  for (auto [offloader, name] :
       {std::pair{f.offloader_.get(), "0"}, {b.offloader.get(), "1"}, {c.offloader.get(), "2"}}) {
    expect_one_place(f, *offloader, name);
  }

  // Without its base, "0"'s next save is whole, and every conversation comes back whole.
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 0u);
  for (auto* session : {&b, &c}) {
    ASSERT_TRUE(session->command(1).ok());
    EXPECT_EQ(session->target->verify(), "");
  }
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamDeltaTest, ADeltaWithoutRoomBesideItsBaseReplacesItWithAWholeCopy) {
  // The base and the delta, measured on a roomy tier; then a tier one page short of both.
  uint64_t base_and_delta = 0;
  {
    OffloaderFixture roomy(tier_for(4, kDefaultDeltaSegments));
    ASSERT_GT(back_from_ram_with_its_base(roomy), 0u);
    ASSERT_TRUE(roomy.offloader_->evict().ok());
    ASSERT_EQ(roomy.offloader_->status().counters.delta_saves, 1u);
    base_and_delta = roomy.ram_tier_->stats().used_bytes;
  }
  OffloaderSetup setup = tier_for(1, kDefaultDeltaSegments);
  setup.ram_tier_bytes = base_and_delta - 4096;
  ASSERT_GE(setup.ram_tier_bytes, one_copy_bytes()) << "the whole copy fits";
  OffloaderFixture f(setup);
  ASSERT_GT(back_from_ram_with_its_base(f), 0u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  const OffloadStatus st = f.offloader_->status();
  EXPECT_EQ(st.state, OffloadState::kRam);
  EXPECT_EQ(st.counters.delta_saves, 0u);
  EXPECT_EQ(f.ram_tier_->stats().blocks, 1u) << "the base was given back for the whole copy";
  EXPECT_FALSE(file_of(f, "0"));
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamDeltaTest, WithoutRoomForEitherTheSaveGoesToDiskWholeAndTheBaseWithIt) {
  OffloaderFixture f(tier_for(1, kDefaultDeltaSegments));
  ASSERT_GT(back_from_ram_with_its_base(f), 0u);
  ASSERT_TRUE(f.command(kSceneLength).ok());  // twice as long: no copy of it fits
  ASSERT_TRUE(f.offloader_->evict().ok());
  const OffloadStatus st = f.offloader_->status();
  EXPECT_EQ(st.state, OffloadState::kDisk);
  EXPECT_EQ(st.snapshot_segments, 1u) << "a whole file: no chain of files was under it";
  EXPECT_EQ(st.ram_bytes, 0u);
  EXPECT_EQ(st.counters.ram_full, 1u);
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, 0u);
  expect_one_place(f, *f.offloader_, "0");
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->length(), 2 * kSceneLength + 1);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamDeltaTest, ACopyWithADeltaSpillsAsAChainOfFilesThatRestoresWhole) {
  OffloaderFixture f(tier_for(2, kDefaultDeltaSegments));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_GT(back_from_ram_with_its_base(f), 0u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_EQ(f.offloader_->status().counters.delta_saves, 1u);
  ASSERT_TRUE(b.command(2 * kSceneLength).ok());
  ASSERT_TRUE(b.offloader->evict().ok());  // needs the room of both of "0"'s segments

  const OffloadStatus st = f.offloader_->status();
  EXPECT_EQ(st.state, OffloadState::kDisk);
  EXPECT_EQ(st.snapshot_segments, 2u);
  EXPECT_TRUE(file_of(f, "0", 0));
  EXPECT_TRUE(file_of(f, "0", 1));
  EXPECT_EQ(st.counters.ram_spills, 1u);
  EXPECT_EQ(b.offloader->status().state, OffloadState::kRam);
  Result<Admission> back = f.command(1);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->restored);
  EXPECT_EQ(f.target_->length(), kSceneLength + 1);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamDeltaTest, TwoConversationsTakingEachOthersRoomOnTwoThreadsLoseNoByte) {
  // Room for two copies: each conversation's saves (deltas over its base, or whole) take the
  // other's base or spill its copy, while that one runs its own commands and saves.
  OffloaderFixture f(tier_for(2, kDefaultDeltaSegments));
  NeighbourSession b(f, "1", /*seed=*/7);
  constexpr int kTurnsEach = 60;
  std::string a_failure;
  std::thread a_thread([&] {
    for (int i = 0; i < kTurnsEach && a_failure.empty(); ++i) {
      Result<Admission> admitted = f.command(1);
      if (!admitted.ok()) a_failure = "command: " + admitted.status().to_string();
      if (const std::string bad = f.target_->verify(); !bad.empty()) a_failure = bad;
      if (const Status saved = f.offloader_->evict(); !saved.ok()) {
        a_failure = "evict: " + saved.to_string();
      }
    }
  });
  std::string b_failure;
  for (int i = 0; i < kTurnsEach && b_failure.empty(); ++i) {
    Result<Admission> admitted = b.command(1);
    if (!admitted.ok()) b_failure = "command: " + admitted.status().to_string();
    if (const std::string bad = b.target->verify(); !bad.empty()) b_failure = bad;
    if (const Status saved = b.offloader->evict(); !saved.ok()) {
      b_failure = "evict: " + saved.to_string();
    }
  }
  a_thread.join();
  EXPECT_EQ(a_failure, "");
  EXPECT_EQ(b_failure, "");
  expect_one_place(f, *f.offloader_, "0");
  expect_one_place(f, *b.offloader, "1");
  const RamTierStats tier = f.ram_tier_->stats();
  EXPECT_LE(tier.used_bytes, tier.budget_bytes);
  EXPECT_EQ(tier.used_bytes, f.offloader_->status().ram_bytes + b.offloader->status().ram_bytes);
  std::printf("bases dropped %llu, spills %llu, delta saves %llu + %llu\n",
              static_cast<unsigned long long>(tier.bases_dropped),
              static_cast<unsigned long long>(tier.spills),
              static_cast<unsigned long long>(f.offloader_->status().counters.delta_saves),
              static_cast<unsigned long long>(b.offloader->status().counters.delta_saves));
  EXPECT_GT(tier.bases_dropped + tier.spills, 0u) << "the two took each other's room";
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->length(), kTurnsEach + 1u);
  EXPECT_EQ(f.target_->verify(), "");
  ASSERT_TRUE(b.command(1).ok());
  EXPECT_EQ(b.target->verify(), "");
}

}  // namespace
}  // namespace siesta
