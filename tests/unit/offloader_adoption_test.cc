// Offloader::adopt: a fresh session takes the snapshot a process before a restart wrote under
// the same key (found by the store, authenticated by SnapshotReader::read_header, renamed to
// this session's names) and is `disk` at once, without writing; its next command restores
// the history, reading each file with its writer's nonce. A session that is not fresh, and a
// directory budget without free room, refuse it with nothing changed.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/offload/offloader.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_store.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/ram_tier_scene.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using test_util::FakeOffloadTarget;
using test_util::kSceneLength;
using test_util::OffloaderFixture;

// The process after a restart: the same key bytes under a new nonce, a store on another
// directory into which the earlier process's files were carried under their own names (as a
// crash leaves them, without a lock), opened to adopt them, and a fresh session's Offloader.
class Restarted {
 public:
  explicit Restarted(OffloaderFixture& before, uint64_t disk_budget_bytes = 0) : before_(before) {
    snapshot::ProcessNonce nonce{};
    nonce.fill(0x5c);
    key_ = std::make_unique<ProcessKey>(ProcessKey::from_bytes(before.key_->key_bytes(), nonce));
    const std::string dir = dir_.file("cache");
    std::filesystem::create_directory(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    for (const auto& entry : std::filesystem::directory_iterator(before.dir_.path())) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with(".snap")) std::filesystem::copy_file(entry.path(), dir + "/" + name);
    }
    SnapshotStore::Options options;
    options.nonce = SnapshotStore::nonce_hex(key_->nonce());
    options.keep_dead_owners_snapshots = true;
    store_ = SnapshotStore::open(before.fs_, before.clock_, dir, options).value();
    if (disk_budget_bytes > 0) budget_ = std::make_unique<DiskBudget>(disk_budget_bytes);
    target = FakeOffloadTarget::create(*before.sim_, before.host_, before.setup_.positions);
    OffloaderOptions offload;
    offload.config.idle_seconds = before.setup_.idle_seconds;
    offload.config.expire_seconds = before.setup_.expire_seconds;
    offload.config.encrypt = true;
    offload.chunk_bytes = before.setup_.chunk_bytes;
    offload.config.delta_segments = before.setup_.max_delta_segments;
    offloader = Offloader::create(
                    {*target, *before.hooked_backend_, before.host_, before.fs_, before.clock_,
                     &before.executor_, store_.get(), key_.get(), nullptr, budget_.get()},
                    offload)
                    .value();
  }

  // Authenticates the one offered chain and renames it to session "0"; its segments and the
  // newest one's expiry.
  std::vector<Offloader::AdoptedSegment> take_offered(int64_t& expiry_unix) {
    EXPECT_EQ(store_->adoption_candidates().size(), 1u);
    const SnapshotStore::AdoptionCandidate candidate = store_->adoption_candidates().at(0);
    SnapshotReader reader(before_.fs_, before_.clock_, *key_, nullptr);
    std::vector<Offloader::AdoptedSegment> segments;
    for (size_t i = 0; i < candidate.segment_paths.size(); ++i) {
      SnapshotHeaderCheck check;
      check.path = candidate.segment_paths[i];
      check.fingerprint = target->fingerprint();
      check.process_nonce = before_.key_->nonce();
      check.check_expiry = i + 1 == candidate.segment_paths.size();
      Result<SnapshotReadResult> header = reader.read_header(check);
      EXPECT_TRUE(header.ok()) << header.status().to_string();
      if (!header.ok()) return {};
      segments.push_back(
          {header->header.generation, header->file_bytes, 0, 0, header->header.process_nonce});
      routes.push_back(header->header.route);
      expiry_unix = header->header.expiry_unix;
    }
    EXPECT_TRUE(store_->adopt(candidate, "0").ok());
    EXPECT_TRUE(store_->finish_adoption().ok());
    return segments;
  }

 private:
  // Declared (so built) before the Offloader, destroyed after it: it holds room on the budget
  // and files in the store.
  OffloaderFixture& before_;
  siesta::testing::TempDir dir_;
  std::unique_ptr<ProcessKey> key_;
  std::unique_ptr<SnapshotStore> store_;

 public:
  std::unique_ptr<DiskBudget> budget_;
  std::unique_ptr<FakeOffloadTarget> target;
  std::unique_ptr<Offloader> offloader;
  std::vector<std::vector<uint8_t>> routes;  // each offered file's, as take_offered read them
};

TEST(OffloaderAdoptionTest, AnAdoptedChainIsOnDiskAtOnceAndRestoresTheHistory) {
  test_util::OffloaderSetup setup;
  setup.max_delta_segments = kDefaultDeltaSegments;
  uint8_t saves = 0;  // each file's route says which save wrote it
  setup.route = [&saves] { return std::vector<uint8_t>{0x72, ++saves}; };
  OffloaderFixture before(setup);
  ASSERT_TRUE(before.command(kSceneLength).ok());
  ASSERT_TRUE(before.offloader_->evict().ok());
  ASSERT_TRUE(before.command(3).ok());  // restored; the next save is a delta over it
  ASSERT_TRUE(before.offloader_->evict().ok());
  ASSERT_EQ(before.offloader_->status().snapshot_segments, 2u);

  Restarted after(before);
  // The fake target checks restored bytes against what it wrote itself: it is told what the
  // earlier process wrote (the same positions, then cut back to none), which leaves it fresh.
  after.target->advance(kSceneLength + 3);
  after.target->rewind(0);
  int64_t expiry = 0;
  const std::vector<Offloader::AdoptedSegment> segments = after.take_offered(expiry);
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(after.routes, (std::vector<std::vector<uint8_t>>{{0x72, 1}, {0x72, 2}}))
      << "each file carries the route its save was given";
  const uint64_t committed = after.target->committed_device_bytes();
  ASSERT_TRUE(after.offloader->adopt(segments, expiry).ok());
  const OffloadStatus adopted = after.offloader->status();
  EXPECT_EQ(adopted.state, OffloadState::kDisk);
  EXPECT_EQ(adopted.snapshot_segments, 2u);
  EXPECT_EQ(adopted.disk_bytes, segments[0].file_bytes + segments[1].file_bytes);
  EXPECT_EQ(adopted.released_vram_bytes, committed) << "the fresh session's memory is given back";

  Result<Offloader::Lease> lease = after.offloader->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);

  EXPECT_EQ(after.target->length(), kSceneLength + 3);
  EXPECT_EQ(after.target->verify(), "");
}

TEST(OffloaderAdoptionTest, OnlyAFreshSessionAdoptsAndOnlyWithFreeRoomInTheBudget) {
  OffloaderFixture before;
  ASSERT_TRUE(before.command(kSceneLength).ok());
  ASSERT_TRUE(before.offloader_->evict().ok());
  const uint64_t file = before.offloader_->status().disk_bytes;

  {
    Restarted after(before, /*disk_budget_bytes=*/file - 1);
    int64_t expiry = 0;
    const auto segments = after.take_offered(expiry);
    EXPECT_EQ(after.offloader->adopt(segments, expiry).code(), StatusCode::kNoSpace);
    EXPECT_EQ(after.offloader->status().state, OffloadState::kResident) << "nothing changed";
    EXPECT_EQ(after.budget_->stats().used_bytes, 0u);
    EXPECT_EQ(after.offloader->adopt({}, expiry).code(), StatusCode::kInvalidArgument);
  }
  Restarted after(before);
  int64_t expiry = 0;
  const auto segments = after.take_offered(expiry);
  {
    Result<Offloader::Lease> lease = after.offloader->acquire();  // a command ran: not fresh
    ASSERT_TRUE(lease.ok());
    after.target->advance(1);
  }
  EXPECT_EQ(after.offloader->adopt(segments, expiry).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(after.offloader->status().state, OffloadState::kResident);
}

}  // namespace
}  // namespace siesta
