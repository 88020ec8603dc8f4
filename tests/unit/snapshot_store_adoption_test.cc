// SnapshotStore's adoption (Options::keep_dead_owners_snapshots): at start a dead owner's
// snapshots are offered as whole chains (segments 0..k, none missing) under that owner's lock,
// its temporaries go at once; adopt() renames a chain to this store's names; finish_adoption()
// removes what was not adopted and the dead owner's lock file. A live owner's files are never
// offered, and a second store starting meanwhile sees the owner as live.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_store.h"
#include "testing/faulty_file_system.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

constexpr char kGoneNonce[] = "0a0a0000000000000000000000000000";
constexpr char kGoneLockless[] = "0b0b0000000000000000000000000000";

class SnapshotStoreAdoptionTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0); }
  std::string name(const std::string& nonce, const std::string& rest) const {
    return dir_ + "/siesta-" + nonce + "-" + rest;
  }
  void plant(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::unique_ptr<SnapshotStore> open_adopting(FileSystem& fs) {
    SnapshotStore::Options options;
    options.keep_dead_owners_snapshots = true;
    auto store = SnapshotStore::open(fs, clock_, dir_, std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::unique_ptr<SnapshotStore> open_adopting() { return open_adopting(fs_); }
  static std::string text_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const SnapshotStore::AdoptionCandidate* offered(const SnapshotStore& store,
                                                  const std::string& session) const {
    for (const auto& c : store.adoption_candidates()) {
      if (c.session == session) return &c;
    }
    return nullptr;
  }

  siesta::testing::TempDir temp_;
  const std::string dir_ = temp_.file("cache");
  PosixFileSystem fs_;
  ManualClock clock_;
};

TEST_F(SnapshotStoreAdoptionTest, ADeadOwnersChainsAreOfferedWholeAndAdoptedUnderNewNames) {
  plant(dir_ + "/siesta-" + std::string(kGoneNonce) + ".lock", "");
  plant(name(kGoneNonce, "3.snap"), "base of 3");
  plant(name(kGoneNonce, "3.1.snap"), "delta 1 of 3");
  plant(name(kGoneNonce, "3.2.snap"), "delta 2 of 3");
  plant(name(kGoneNonce, "5.snap"), "base of 5");
  plant(name(kGoneNonce, "6.1.snap"), "a delta without its base");
  plant(name(kGoneNonce, "3.snap.tmp-9"), "a write the crash cut short");
  plant(name(kGoneLockless, "7.snap"), "no lock file at all");

  auto store = open_adopting();
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(std::filesystem::exists(name(kGoneNonce, "3.snap.tmp-9"))) << "temporaries go";
  EXPECT_EQ(store->adoption_candidates().size(), 3u) << "3, 5 and the lockless 7; not 6";
  const auto* three = offered(*store, "3");
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(three->owner_nonce, kGoneNonce);
  ASSERT_EQ(three->segment_paths.size(), 3u);
  EXPECT_EQ(three->segment_paths[2], name(kGoneNonce, "3.2.snap"));
  EXPECT_EQ(offered(*store, "6"), nullptr);

  SIESTA_ASSERT_OK(store->adopt(*three, "0"));
  for (uint32_t segment = 0; segment < 3; ++segment) {
    const std::string path = store->snapshot_path("0", segment).value();
    EXPECT_EQ(text_of(path),
              segment == 0 ? "base of 3" : "delta " + std::to_string(segment) + " of 3");
  }
  EXPECT_EQ(offered(*store, "3"), nullptr) << "offered once";
  // Adopting over a session that has files here renames nothing.
  const SnapshotStore::AdoptionCandidate five = *offered(*store, "5");
  SIESTA_EXPECT_CODE(store->adopt(five, "0"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(text_of(store->snapshot_path("0").value()), "base of 3");

  SIESTA_ASSERT_OK(store->finish_adoption());
  std::set<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    left.insert(entry.path().filename().string());
  }
  const std::set<std::string> expected = {
      "siesta-" + store->nonce() + ".lock", "siesta-" + store->nonce() + "-0.snap",
      "siesta-" + store->nonce() + "-0.1.snap", "siesta-" + store->nonce() + "-0.2.snap"};
  EXPECT_EQ(left, expected) << "what was not adopted went, with the dead owners' locks";
}

TEST_F(SnapshotStoreAdoptionTest, ALiveOwnersFilesAreNeverOfferedAndAnAdoptingStoreHoldsTheDead) {
  plant(name(kGoneNonce, "1.snap"), "dead");
  auto first = open_adopting();
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(first->adoption_candidates().size(), 1u);
  plant(first->snapshot_path("9").value(), "the first store's own");

  // A second server starting while the first adopts: the dead owner's lock is held, so its
  // files are a live owner's to it; the first's own files too.
  auto second = open_adopting();
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(second->adoption_candidates().empty());
  SIESTA_ASSERT_OK(first->adopt(first->adoption_candidates()[0], "2"));
  SIESTA_ASSERT_OK(first->finish_adoption());
  EXPECT_EQ(text_of(first->snapshot_path("2").value()), "dead");
  EXPECT_TRUE(std::filesystem::exists(first->snapshot_path("9").value()));
}

TEST_F(SnapshotStoreAdoptionTest, WithoutTheOptionADeadOwnersSnapshotsGoAtStartAsBefore) {
  plant(name(kGoneNonce, "1.snap"), "dead");
  auto store = SnapshotStore::open(fs_, clock_, dir_, {});
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->adoption_candidates().empty());
  EXPECT_FALSE(std::filesystem::exists(name(kGoneNonce, "1.snap")));
}

TEST_F(SnapshotStoreAdoptionTest, ARenameThatFailsPartWayLeavesNoTailWithoutItsBase) {
  plant(name(kGoneNonce, "4.snap"), "base");
  plant(name(kGoneNonce, "4.1.snap"), "delta");
  FaultyFileSystem faulty(fs_);
  auto store = open_adopting(faulty);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->adoption_candidates().size(), 1u);
  // Injected: the second rename (the base's: the newest segment goes first) fails.
  const FsFaultPlan plan{FsOp::kRename, 2, FsFaultKind::kIoError, false};
  std::printf("fault: %s (the base's rename)\n", plan.describe().c_str());
  faulty.set_plan(plan);
  SIESTA_EXPECT_CODE(store->adopt(store->adoption_candidates()[0], "1"), StatusCode::kIoError);
  faulty.set_plan(FsFaultPlan::none());
  EXPECT_FALSE(std::filesystem::exists(store->snapshot_path("1", 1).value()))
      << "the renamed delta went: no base under it";
  EXPECT_TRUE(store->adoption_candidates().empty());
  SIESTA_ASSERT_OK(store->finish_adoption());
  EXPECT_FALSE(std::filesystem::exists(name(kGoneNonce, "4.snap")));
}

}  // namespace
}  // namespace siesta
