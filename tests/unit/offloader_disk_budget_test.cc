// The snapshot directory's budget (core/offload/disk_budget.h) with Offloaders on one store:
// every file is reserved before it is written, so the directory's snapshot files never pass
// the budget; a save that would pass it deletes the least recently used released
// conversation's snapshot (that conversation starts afresh, never with a wrong history); a
// snapshot larger than the budget, or one no deletion can make room for, fails as a full disk
// does (the memory kept), and so does a filesystem full before the budget; a resident
// conversation's files stay; a failed deletion keeps its files counted; a chain with a member
// missing is deleted all the same; a file named but not known durable (its directory's sync
// failed) is removed with its room; a retired file keeps its room until it is unlinked.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "core/offload/disk_budget.h"
#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/ram_tier_scene.h"

namespace siesta {
namespace {

using test_util::FakeOffloadTarget;
using test_util::file_of;
using test_util::kSceneLength;
using test_util::NeighbourSession;
using test_util::OffloaderFixture;
using test_util::OffloaderSetup;

// The file of one session of kSceneLength positions saved whole, measured once.
uint64_t one_file_bytes() {
  static const uint64_t bytes = [] {
    OffloaderFixture scratch;
    EXPECT_TRUE(scratch.command(kSceneLength).ok());
    EXPECT_TRUE(scratch.offloader_->evict().ok());
    return scratch.offloader_->status().disk_bytes;
  }();
  return bytes;
}

// Room for `files` such files and a little more (less than one more).
OffloaderSetup budget_for(uint64_t files, uint32_t delta_segments = 0) {
  OffloaderSetup setup;
  setup.disk_budget_bytes = files * one_file_bytes() + one_file_bytes() / 2;
  setup.max_delta_segments = delta_segments;
  return setup;
}

// What the store's directory holds in regular files.
uint64_t directory_bytes(const OffloaderFixture& f) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(f.dir_.path())) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

void expect_within_budget(const OffloaderFixture& f) {
  const DiskBudgetStats stats = f.disk_budget_->stats();
  EXPECT_LE(stats.used_bytes, stats.budget_bytes);
  EXPECT_LE(directory_bytes(f), stats.budget_bytes) << "the directory itself";
}

TEST(OffloaderDiskBudgetTest, ASaveThatWouldPassTheBudgetDeletesTheLeastRecentlyUsedSnapshot) {
  OffloaderFixture f(budget_for(2));
  NeighbourSession b(f, "1", /*seed=*/7);
  NeighbourSession c(f, "2", /*seed=*/9);
  ASSERT_TRUE(f.command(kSceneLength).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  f.pass(1);
  ASSERT_TRUE(b.command(kSceneLength).ok());
  ASSERT_TRUE(b.offloader->evict().ok());
  f.pass(1);
  ASSERT_TRUE(c.command(kSceneLength).ok());
  expect_within_budget(f);

  ASSERT_TRUE(c.offloader->evict().ok()) << "room made for it";
  expect_within_budget(f);
  EXPECT_EQ(f.state(), OffloadState::kExpired) << "\"0\" was used least recently";
  EXPECT_FALSE(file_of(f, "0"));
  EXPECT_EQ(f.offloader_->status().counters.disk_drops, 1u);
  EXPECT_EQ(b.offloader->status().state, OffloadState::kDisk);
  EXPECT_EQ(c.offloader->status().state, OffloadState::kDisk);
  const DiskBudgetStats stats = f.disk_budget_->stats();
  EXPECT_EQ(stats.deleted_for_room, 1u);
  EXPECT_EQ(stats.refused, 0u);
  EXPECT_EQ(stats.used_bytes, b.offloader->status().disk_bytes + c.offloader->status().disk_bytes);

  // "0" starts afresh (its prompt read again), the others come back whole.
  Result<Admission> fresh = f.command(1);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  EXPECT_TRUE(fresh->fresh_after_expiry);
  EXPECT_EQ(f.target_->length(), 1u);
  EXPECT_EQ(f.target_->verify(), "");
  for (NeighbourSession* kept : {&b, &c}) {
    Result<Admission> back = kept->command(1);
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(back->restored);
    EXPECT_EQ(kept->target->verify(), "");
  }
  expect_within_budget(f);
}

TEST(OffloaderDiskBudgetTest, ASnapshotLargerThanTheBudgetFailsAsAFullDiskAndKeepsTheMemory) {
  OffloaderSetup setup;
  setup.disk_budget_bytes = one_file_bytes() - 1;
  OffloaderFixture f(setup);
  ASSERT_TRUE(f.command(kSceneLength).ok());
  const Status saved = f.offloader_->evict();
  EXPECT_EQ(saved.code(), StatusCode::kNoSpace) << saved.to_string();
  EXPECT_EQ(f.state(), OffloadState::kResident) << "the memory is kept";
  EXPECT_FALSE(file_of(f, "0")) << "nothing was written";
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 1u);
  EXPECT_EQ(f.disk_budget_->stats().refused, 1u);
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, 0u);
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->length(), kSceneLength + 1);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDiskBudgetTest, AResidentConversationsFilesAreNotDeletedForRoom) {
  // Deltas on: "0" comes back from disk and keeps its file as the base of its next delta.
  OffloaderFixture f(budget_for(1, kDefaultDeltaSegments));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(f.command(kSceneLength).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_TRUE(f.command(1).ok());
  ASSERT_TRUE(file_of(f, "0")) << "kept as a base";
  ASSERT_TRUE(b.command(kSceneLength).ok());

  const Status saved = b.offloader->evict();
  EXPECT_EQ(saved.code(), StatusCode::kNoSpace) << saved.to_string();
  EXPECT_EQ(b.offloader->status().state, OffloadState::kResident);
  EXPECT_TRUE(file_of(f, "0"));
  EXPECT_EQ(f.disk_budget_->stats().deleted_for_room, 0u);
  expect_within_budget(f);
  EXPECT_EQ(b.target->verify(), "");
}

TEST(OffloaderDiskBudgetTest, AFailedDeletionForRoomKeepsItsFilesCountedAndIsTriedAgain) {
  OffloaderFixture f(budget_for(1));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(f.command(kSceneLength).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_TRUE(b.command(kSceneLength).ok());
  // Injected: the first removal (the deletion for room of "0"'s snapshot) fails with EIO.
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, false};
  std::printf("fault: %s (the deletion for room)\n", plan.describe().c_str());
  f.fs_.set_plan(plan);
  const Status saved = b.offloader->evict();
  EXPECT_EQ(saved.code(), StatusCode::kNoSpace) << saved.to_string();
  EXPECT_EQ(b.offloader->status().state, OffloadState::kResident) << "the memory is kept";
  EXPECT_TRUE(file_of(f, "0")) << "the failed deletion left the file";
  EXPECT_EQ(f.state(), OffloadState::kExpired) << "its history is given up all the same";
  const DiskBudgetStats stats = f.disk_budget_->stats();
  EXPECT_EQ(stats.delete_failures, 1u);
  EXPECT_EQ(stats.used_bytes, one_file_bytes()) << "still counted: the file is there";
  expect_within_budget(f);

  // The timer tries again after the backoff; then the newcomer's save has its room.
  f.fs_.set_plan(FsFaultPlan::none());
  f.pass(1);
  EXPECT_FALSE(file_of(f, "0"));
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, 0u);
  ASSERT_TRUE(b.offloader->evict().ok());
  EXPECT_EQ(b.offloader->status().state, OffloadState::kDisk);
  Result<Admission> fresh = f.command(1);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->fresh_after_expiry);
  EXPECT_EQ(f.target_->verify(), "");
  expect_within_budget(f);
}

TEST(OffloaderDiskBudgetTest, AFilesystemFullBeforeTheBudgetFailsTheSaveAndGivesItsRoomBack) {
  OffloaderFixture f(budget_for(4));
  ASSERT_TRUE(f.command(kSceneLength).ok());
  // Injected: the first write finds the filesystem full (another program filled it).
  const FsFaultPlan plan{FsOp::kWrite, 1, FsFaultKind::kNoSpace, false};
  std::printf("fault: %s (the filesystem full before the budget)\n", plan.describe().c_str());
  f.fs_.set_plan(plan);
  const Status saved = f.offloader_->evict();
  EXPECT_EQ(saved.code(), StatusCode::kNoSpace) << saved.to_string();
  EXPECT_EQ(f.state(), OffloadState::kResident) << "the memory is kept";
  EXPECT_FALSE(file_of(f, "0"));
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, 0u) << "the file's reservation went with it";
  f.fs_.set_plan(FsFaultPlan::none());
  ASSERT_TRUE(f.offloader_->evict().ok()) << "the next save has its room";
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, f.offloader_->status().disk_bytes);
}

TEST(OffloaderDiskBudgetTest, AChainWithAMissingMemberIsDeletedForRoomAllTheSame) {
  // Deltas on: "0" leaves a base and a delta on disk, then its delta file disappears.
  OffloaderFixture f(budget_for(2, kDefaultDeltaSegments));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(f.command(kSceneLength).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_TRUE(f.command(4).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_EQ(f.offloader_->status().snapshot_segments, 2u);
  ASSERT_TRUE(std::filesystem::remove(f.store_->snapshot_path("0", 1).value()));
  std::printf("fault: segment 1 of \"0\" removed behind the store's back\n");
  ASSERT_TRUE(b.command(2 * kSceneLength).ok());  // needs "0"'s room

  ASSERT_TRUE(b.offloader->evict().ok());
  EXPECT_EQ(b.offloader->status().state, OffloadState::kDisk);
  EXPECT_EQ(f.state(), OffloadState::kExpired);
  EXPECT_FALSE(file_of(f, "0", 0)) << "the rest of the chain went";
  EXPECT_EQ(f.disk_budget_->stats().deleted_for_room, 1u);
  EXPECT_EQ(f.disk_budget_->stats().delete_failures, 0u);
  expect_within_budget(f);
  Result<Admission> fresh = f.command(1);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->fresh_after_expiry);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDiskBudgetTest, AFileNamedButNotDurableIsRemovedAndItsRoomGivenBack) {
  OffloaderFixture f(budget_for(2, kDefaultDeltaSegments));
  ASSERT_TRUE(f.command(kSceneLength).ok());
  // Injected: the directory's sync after the rename fails, first for a whole file...
  const FsFaultPlan plan{FsOp::kSyncDirectory, 1, FsFaultKind::kIoError, false};
  std::printf("fault: %s (after a whole file's rename)\n", plan.describe().c_str());
  f.fs_.set_plan(plan);
  EXPECT_EQ(f.offloader_->evict().code(), StatusCode::kIoError);
  EXPECT_EQ(f.state(), OffloadState::kResident) << "the memory is kept";
  EXPECT_FALSE(file_of(f, "0")) << "a file not known durable is no snapshot";
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, 0u);
  expect_within_budget(f);

  f.fs_.set_plan(FsFaultPlan::none());
  f.pass(60);  // past the retry's backoff: the save runs again, and now succeeds
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  ASSERT_TRUE(f.command(4).ok());  // restored: its file is the base of the next save's delta
  // ...then for a delta: the delta goes, the base below it stands.
  std::printf("fault: %s (after a delta's rename)\n", plan.describe().c_str());
  f.fs_.set_plan(plan);
  EXPECT_EQ(f.offloader_->evict().code(), StatusCode::kIoError);
  EXPECT_FALSE(file_of(f, "0", 1));
  EXPECT_TRUE(file_of(f, "0", 0));
  EXPECT_EQ(f.offloader_->status().snapshot_segments, 1u);
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, f.offloader_->status().disk_bytes);
  expect_within_budget(f);

  f.fs_.set_plan(FsFaultPlan::none());
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(f.offloader_->status().snapshot_segments, 2u);
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.target_->verify(), "");
  expect_within_budget(f);
}

TEST(OffloaderDiskBudgetTest, ARetiredFileKeepsItsRoomUntilItIsUnlinked) {
  OffloaderFixture f(budget_for(1));  // deltas off: a restored file is retired
  ASSERT_TRUE(f.command(kSceneLength).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  const uint64_t file = f.offloader_->status().disk_bytes;
  ASSERT_TRUE(f.command(1).ok());
  EXPECT_EQ(f.offloader_->status().disk_bytes, 0u) << "no longer the session's snapshot";
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, file) << "renamed, not yet unlinked";
  expect_within_budget(f);
  f.pass(0);  // the executor unlinks it
  EXPECT_EQ(f.disk_budget_->stats().used_bytes, 0u);
  EXPECT_EQ(directory_bytes(f), 0u);
}

TEST(OffloaderDiskBudgetTest, TwoConversationsTakingEachOthersRoomOnTwoThreadsStayWithinIt) {
  // Room for one file and a half: each eviction may delete the other's snapshot while that
  // one runs its own commands and saves; a conversation whose snapshot went starts afresh.
  // Deltas on: a restored file stays as a base (the manual executor unlinks no retired file
  // until the end).
  OffloaderFixture f(budget_for(1, kDefaultDeltaSegments));
  NeighbourSession b(f, "1", /*seed=*/7);
  constexpr int kTurnsEach = 40;
  const auto turns = [&](Offloader& offloader, FakeOffloadTarget& target, std::string& failure) {
    for (int i = 0; i < kTurnsEach && failure.empty(); ++i) {
      {
        Result<Offloader::Lease> lease = offloader.acquire();
        if (!lease.ok()) {
          failure = "acquire: " + lease.status().to_string();
          break;
        }
        target.advance(1);
        if (const std::string bad = target.verify(); !bad.empty()) failure = bad;
      }
      const Status saved = offloader.evict();
      if (!saved.ok() && saved.code() != StatusCode::kNoSpace) failure = saved.to_string();
    }
  };
  std::string a_failure;
  std::string b_failure;
  std::thread a_thread([&] { turns(*f.offloader_, *f.target_, a_failure); });
  turns(*b.offloader, *b.target, b_failure);
  a_thread.join();
  EXPECT_EQ(a_failure, "");
  EXPECT_EQ(b_failure, "");
  f.pass(0);  // retired files unlinked
  expect_within_budget(f);
  const DiskBudgetStats stats = f.disk_budget_->stats();
  std::printf("deleted for room %llu, refused %llu\n",
              static_cast<unsigned long long>(stats.deleted_for_room),
              static_cast<unsigned long long>(stats.refused));
  EXPECT_GT(stats.deleted_for_room + stats.refused, 0u) << "the two wanted the same room";
  EXPECT_EQ(stats.used_bytes, f.offloader_->status().disk_bytes + b.offloader->status().disk_bytes);
}

}  // namespace
}  // namespace siesta
