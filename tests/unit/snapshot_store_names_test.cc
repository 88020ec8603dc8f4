// The SnapshotStore touches only names it makes: names that merely look like its own (a nonce
// with a letter past 'f', a nonce not followed by '-', a session name it would refuse) survive
// the start-up clean-up; removing a session leaves another whose name begins the same; a
// directory under a temporary's name holds no bytes; and retire refuses names it does not make.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_store.h"
#include "testing/faulty_file_system.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

class SnapshotStoreNameTest : public ::testing::Test {
 protected:
  std::unique_ptr<SnapshotStore> open() {
    return SnapshotStore::open(fs_, clock_, dir_, {}).value();
  }

  siesta::testing::TempDir temp_;
  const std::string dir_ = temp_.file("cache");
  PosixFileSystem fs_;
  ManualClock clock_;
};

// Guards: the name parser accepting what the store never writes, so that the clean-up of a
// "dead owner" removes another program's files.
TEST_F(SnapshotStoreNameTest, NamesThatOnlyLookLikeTheStoresAreLeftAlone) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  const std::vector<std::string> lookalikes = {
      "siesta-g0000000000000000000000000000000-s.snap",       // 'g' is no hex digit
      "siesta-00000000000000000000000000000000s.snap",        // no '-' after the nonce
      "siesta-00000000000000000000000000000000-s!.snap",      // a session name it refuses
      "siesta-00000000000000000000000000000000-.snap",        // an empty session name
      "siesta-0000000000000000000000000000000.lock",          // 31 digits
      "siesta-00000000000000000000000000000000-s.0.snap",     // segment 0 has no number
      "siesta-00000000000000000000000000000000-s.01.snap",    // a leading zero
      "siesta-00000000000000000000000000000000-s.1000.snap",  // four digits
      "siesta-00000000000000000000000000000000-s..snap",      // no digits
      "siesta-00000000000000000000000000000000-s.1x.snap",    // not all digits
      "siesta-00000000000000000000000000000000-s!.1.snap",    // a session name it refuses
  };
  for (const std::string& name : lookalikes) write_text(dir_ + "/" + name, "not ours");
  std::unique_ptr<SnapshotStore> store = open();
  EXPECT_EQ(store->startup_cleanup().removed_dead_owner_files, 0u);
  EXPECT_EQ(store->startup_cleanup().failures, 0u);
  for (const std::string& name : lookalikes) EXPECT_TRUE(file_exists(dir_ + "/" + name)) << name;
}

// Guards: a session's removal matching by prefix ("a" taking "ab"'s files).
TEST_F(SnapshotStoreNameTest, RemovingASessionLeavesOneWhoseNameBeginsTheSame) {
  std::unique_ptr<SnapshotStore> store = open();
  write_text(store->snapshot_path("a").value(), "a");
  write_text(store->temp_path("a").value(), "a temporary");
  write_text(store->snapshot_path("ab").value(), "ab");
  write_text(store->temp_path("ab").value(), "ab temporary");
  ASSERT_TRUE(store->remove("a").ok());
  EXPECT_FALSE(file_exists(store->snapshot_path("a").value()));
  EXPECT_TRUE(file_exists(store->snapshot_path("ab").value()));
  EXPECT_EQ(store->disk_bytes().value(), 2u + 12u) << "both of ab's files are left";
}

// Guards: a delta segment's name not taken for the store's (left behind by a dead owner, or
// by remove()), or a segment's removal reaching the base or another session.
TEST_F(SnapshotStoreNameTest, SegmentsAreNamedAfterTheirSessionAndRemovedWithIt) {
  std::unique_ptr<SnapshotStore> store = open();
  const std::string prefix = dir_ + "/siesta-" + store->nonce() + "-";
  EXPECT_EQ(store->snapshot_path("a", 0).value(), prefix + "a.snap");
  EXPECT_EQ(store->snapshot_path("a", 7).value(), prefix + "a.7.snap");
  EXPECT_EQ(store->snapshot_path("a", SnapshotStore::kMaxSnapshotSegment).value(),
            prefix + "a.255.snap");
  EXPECT_EQ(store->snapshot_path("a", SnapshotStore::kMaxSnapshotSegment + 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->temp_path("a", 7).value().starts_with(prefix + "a.7.snap.tmp-"));
  for (uint32_t segment : {0u, 1u, 2u}) {
    write_text(store->snapshot_path("a", segment).value(), "a");
    write_text(store->temp_path("a", segment).value(), "a temporary");
    write_text(store->snapshot_path("ab", segment).value(), "ab");
  }
  EXPECT_EQ(store->disk_bytes().value(), 3 * (1u + 11u + 2u)) << "every segment is the store's";
  ASSERT_TRUE(store->remove_segment("a", 2).ok());
  EXPECT_FALSE(file_exists(store->snapshot_path("a", 2).value()));
  EXPECT_TRUE(file_exists(store->snapshot_path("a", 1).value()));
  EXPECT_EQ(store->disk_bytes().value(), 2 * (1u + 11u) + 3 * 2u) << "its temporary went too";
  ASSERT_TRUE(store->remove_deltas("a").ok());
  EXPECT_TRUE(file_exists(store->snapshot_path("a", 0).value()));
  EXPECT_FALSE(file_exists(store->snapshot_path("a", 1).value()));
  EXPECT_EQ(store->disk_bytes().value(), 1u + 11u + 3 * 2u);
  ASSERT_TRUE(store->remove("a").ok());
  EXPECT_EQ(store->disk_bytes().value(), 3 * 2u) << "only ab's files are left";
  for (uint32_t segment : {0u, 1u, 2u}) {
    EXPECT_TRUE(file_exists(store->snapshot_path("ab", segment).value()));
  }
}

TEST_F(SnapshotStoreNameTest, ADeadOwnersSegmentsGoAtStartUp) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  const std::string dead = dir_ + "/siesta-00000000000000000000000000000000-s";
  write_text(dead + ".snap", "base");
  write_text(dead + ".3.snap", "delta");
  write_text(dead + ".3.snap.tmp-1", "delta being written");
  std::unique_ptr<SnapshotStore> store = open();
  EXPECT_EQ(store->startup_cleanup().removed_dead_owner_files, 4u);  // 3 and the lock probed
  EXPECT_FALSE(file_exists(dead + ".3.snap"));
  EXPECT_FALSE(file_exists(dead + ".3.snap.tmp-1"));
}

// Guards: a directory under one of the store's names counted as bytes on disk.
TEST_F(SnapshotStoreNameTest, ADirectoryUnderATemporarysNameHoldsNoBytes) {
  std::unique_ptr<SnapshotStore> store = open();
  write_text(store->snapshot_path("s").value(), "1234");
  ASSERT_EQ(::mkdir(store->temp_path("s").value().c_str(), 0700), 0);
  EXPECT_EQ(store->disk_bytes().value(), 4u);
}

// Guards: a retire of a name the store does not make (a path out of the directory).
TEST_F(SnapshotStoreNameTest, RetireTakesOnlySessionNamesItMakes) {
  std::unique_ptr<SnapshotStore> store = open();
  for (const std::string bad : {"", "../x", "a/b", "a.b"}) {
    EXPECT_EQ(store->retire(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(store->retire("absent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->remove_retired(temp_.file("elsewhere.snap.tmp-1")).code(),
            StatusCode::kInvalidArgument);
}

// Guards: a second failed removal replacing the first error (the caller is told about the
// last failure, not the first).
TEST_F(SnapshotStoreNameTest, TwoFailedRemovalsReportTheFirst) {
  FaultyFileSystem faulty(fs_);
  std::unique_ptr<SnapshotStore> store = SnapshotStore::open(faulty, clock_, dir_, {}).value();
  write_text(store->snapshot_path("a").value(), "1");
  write_text(store->snapshot_path("b").value(), "2");
  // Injected: every removal fails with EIO.
  faulty.set_plan({FsOp::kRemove, 1, FsFaultKind::kIoError, true});
  const Status removed = store->remove_own_files();
  EXPECT_EQ(removed.code(), StatusCode::kIoError);
  EXPECT_NE(removed.message().find("call 1 "), std::string::npos) << removed.to_string();
  EXPECT_EQ(faulty.counters().of(FsOp::kRemove), 2u) << "both were tried";
  faulty.set_plan(FsFaultPlan::none());
}

}  // namespace
}  // namespace siesta
