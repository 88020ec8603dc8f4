// The Offloader with a RAM tier (core/offload/ram_tier.h): a released session's snapshot is
// kept in the tier when it fits and on disk otherwise; it is restored from wherever it is, and
// always from exactly one place; the tier gets its memory back whenever the copy stops being
// the session's snapshot (restore, expiry, forget, a command over a copy written ahead).
// On the simulator with a ManualClock and a ManualExecutor (tests/support/offloader_fixture.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "core/offload/offloader.h"
#include "core/offload/ram_tier.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;
using test_util::OffloaderSetup;

// A budget far above the fake target's snapshot (256 positions of 1 KiB rows and a little more).
constexpr uint64_t kRoomy = uint64_t{16} << 20;

OffloaderSetup with_tier(uint64_t bytes, uint32_t delta_segments = 0) {
  OffloaderSetup setup;
  setup.ram_tier_bytes = bytes;
  setup.max_delta_segments = delta_segments;
  return setup;
}

// The tier's bytes in use are exactly what the session's status says its copy holds.
void expect_tier_holds(const OffloaderFixture& f, uint64_t bytes) {
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, bytes);
  EXPECT_EQ(f.offloader_->status().ram_bytes, bytes);
}

TEST(OffloaderRamTest, AnIdleSessionGoesToRamAndComesBackWithEveryByte) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(37).ok());
  const auto before = f.target_->snapshot_regions();
  f.pass(OffloaderFixture::kIdle);
  const OffloadStatus slept = f.offloader_->status();
  EXPECT_EQ(slept.state, OffloadState::kRam);
  EXPECT_FALSE(f.snapshot_exists()) << "one place holds it: the RAM tier";
  EXPECT_EQ(slept.disk_bytes, 0u);
  EXPECT_GE(slept.ram_bytes, 37 * test_util::FakeOffloadTarget::kRowBytes);
  expect_tier_holds(f, slept.ram_bytes);
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u) << "the device memory is released";
  EXPECT_EQ(slept.counters.ram_saves, 1u);

  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(f.target_->length(), 37u);
  EXPECT_EQ(f.target_->verify(), "");
  const auto after = f.target_->snapshot_regions();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].device, after[i].device) << "the same addresses";
  }
  // Deltas off: nothing builds on the copy, so the tier has its room back at once, not only
  // when the command ends (a long generation would hold it for nothing).
  expect_tier_holds(f, 0);
  lease->release();
  const OffloadStatus woke = f.offloader_->status();
  EXPECT_EQ(woke.state, OffloadState::kResident);
  EXPECT_EQ(woke.counters.ram_restores, 1u);
  EXPECT_EQ(woke.counters.restore_hits, 1u);
  expect_tier_holds(f, 0);  // given back once the device holds it again
  EXPECT_FALSE(f.snapshot_exists());
}

// When a command ends, the tier hears how large the session's next save will be (a pinned pool
// prepares that room while the session is idle, instead of refusing its first save): exactly
// the block the save then takes, and more once the history has grown.
TEST(OffloaderRamTest, ACommandsEndTellsTheTierTheSizeOfTheNextSave) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(37).ok());
  const uint64_t announced = f.ram_pages_->expected.load();
  EXPECT_GT(announced, 0u);
  f.pass(OffloaderFixture::kIdle);
  const OffloadStatus slept = f.offloader_->status();
  ASSERT_EQ(slept.state, OffloadState::kRam);
  EXPECT_EQ(slept.ram_bytes, announced) << "the block the save took is the one announced";

  ASSERT_TRUE(f.command(100).ok());
  EXPECT_GT(f.ram_pages_->expected.load(), announced) << "a longer history, a larger block";
}

TEST(OffloaderRamTest, ASnapshotTheTierHasNoRoomForIsWrittenToDisk) {
  OffloaderFixture f(with_tier(4096));  // one page: far too small
  ASSERT_TRUE(f.command(37).ok());
  f.pass(OffloaderFixture::kIdle);
  const OffloadStatus slept = f.offloader_->status();
  EXPECT_EQ(slept.state, OffloadState::kDisk);
  EXPECT_TRUE(f.snapshot_exists());
  EXPECT_EQ(slept.counters.ram_full, 1u);
  EXPECT_EQ(slept.counters.ram_saves, 0u);
  expect_tier_holds(f, 0);
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->verify(), "");
  EXPECT_EQ(f.target_->length(), 38u);
}

TEST(OffloaderRamTest, ARefusedAllocationSendsTheSnapshotToDiskAndLosesNothing) {
  std::printf("fault: the RAM tier's pages are refused (RamPages::map: OutOfMemory)\n");
  OffloaderFixture f(with_tier(kRoomy));
  f.ram_pages_->refuse = true;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_EQ(f.ram_tier_->stats().allocation_failures, 1u);
  EXPECT_EQ(f.offloader_->status().counters.ram_full, 1u);
  Result<Admission> admitted = f.command(1);
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE(admitted->restored);
  EXPECT_EQ(f.target_->verify(), "");

  // The tier serves again once the system gives pages.
  f.ram_pages_->refuse = false;
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kRam);
  EXPECT_FALSE(f.snapshot_exists()) << "the file of the earlier save is gone";
}

TEST(OffloaderRamTest, ExpiryInRamGivesTheMemoryBackAndTheNextCommandStartsFresh) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kRam);
  f.pass(OffloaderFixture::kExpire - OffloaderFixture::kIdle - 1);
  EXPECT_EQ(f.state(), OffloadState::kRam);
  f.pass(1);
  EXPECT_EQ(f.state(), OffloadState::kExpired);
  expect_tier_holds(f, 0);
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE(admitted->fresh_after_expiry);
  EXPECT_EQ(f.target_->length(), 0u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamTest, ForgettingASessionInRamGivesItsMemoryBack) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kRam);
  ASSERT_TRUE(f.offloader_->forget().ok());
  EXPECT_EQ(f.state(), OffloadState::kExpired);
  expect_tier_holds(f, 0);
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE(admitted->fresh_after_expiry);
  EXPECT_EQ(f.target_->length(), 0u);
}

TEST(OffloaderRamTest, ACopyWrittenAheadIsReleasedByAnEvictionAndRestored) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(30).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.pass(0);
  OffloadStatus ahead = f.offloader_->status();
  EXPECT_EQ(ahead.state, OffloadState::kResident);
  EXPECT_GT(ahead.ram_bytes, 0u) << "written ahead into the tier, the memory kept";
  EXPECT_GT(f.sim_->stats().committed_bytes, 0u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(f.state(), OffloadState::kRam);
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u);
  EXPECT_EQ(f.offloader_->status().counters.ram_saves, 1u) << "no second copy";
  Result<Admission> admitted = f.command(2);
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE(admitted->restored);
  EXPECT_EQ(f.target_->verify(), "");
  EXPECT_EQ(f.target_->length(), 32u);
  expect_tier_holds(f, 0);
}

TEST(OffloaderRamTest, ACommandOverACopyWrittenAheadGivesItBack) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(30).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.pass(0);
  ASSERT_GT(f.offloader_->status().ram_bytes, 0u);
  ASSERT_TRUE(f.command(5).ok());
  expect_tier_holds(f, 0);  // it no longer holds what the command changed
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kRam);
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 35u);
  EXPECT_EQ(f.target_->verify(), "");
}

// With delta saves, a restored disk chain stays as the base of the next delta; a save that
// then goes to RAM holds the whole session, and the chain's files go.
TEST(OffloaderRamTest, ASaveToRamSupersedesADiskChain) {
  OffloaderFixture f(with_tier(kRoomy, /*delta_segments=*/4));
  f.ram_pages_->refuse = true;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  ASSERT_TRUE(f.command(3).ok());
  ASSERT_TRUE(f.snapshot_exists()) << "kept as the base of a delta";
  f.ram_pages_->refuse = false;
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kRam);
  EXPECT_FALSE(f.snapshot_exists());
  EXPECT_EQ(f.offloader_->status().disk_bytes, 0u);
  EXPECT_EQ(f.offloader_->status().snapshot_segments, 0u);
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 23u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderRamTest, AnOffloaderDestroyedInRamGivesTheTierItsMemoryBack) {
  OffloaderFixture f(with_tier(kRoomy));
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_GT(f.ram_tier_->stats().used_bytes, 0u);
  f.offloader_.reset();
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, 0u);
  EXPECT_EQ(f.ram_tier_->stats().blocks, 0u);
}

}  // namespace
}  // namespace siesta
