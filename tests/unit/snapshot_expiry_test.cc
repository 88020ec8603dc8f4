// read_snapshot_expiry: the expiry of a real file, "never" for a durable export without one,
// and a typed error for every kind of bad file (a FIFO refused without blocking). And the
// store wired as the server wires it: names carry the process key's nonce (the one in the
// headers), and the store reads expiries itself by default (read_snapshot_expiry), so a live
// owner's expired snapshot is removed at another's start.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_store.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::SnapshotMode;
using snapshot_test::host_region;

class SnapshotExpiryTest : public ::testing::Test {
 protected:
  // Writes a small host-region snapshot at `path`.
  Status write(const std::string& path, int64_t expiry,
               SnapshotMode mode = SnapshotMode::kSessionEncrypted) {
    auto region = host_region("ckpt", 3000, {{0, 3000}}, 4);
    SnapshotWriteOptions options;
    options.path = path;
    options.mode = mode;
    options.fingerprint = snapshot_test::fingerprint(2);
    options.expiry_unix = expiry;
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    return writer.write(options, std::span(&region.region, 1)).status();
  }
  std::string path() const { return dir_.file("s.snap"); }

  siesta::testing::TempDir dir_;
  PosixFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(3);
};

TEST_F(SnapshotExpiryTest, ReturnsTheWrittenExpiryInEveryMode) {
  for (SnapshotMode mode : {SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest,
                            SnapshotMode::kDurableExport}) {
    const std::string file = dir_.file(std::string(snapshot::snapshot_mode_name(mode)));
    SIESTA_ASSERT_OK(write(file, 1'900'000'123, mode));
    SIESTA_ASSERT_OK_AND_ASSIGN(int64_t expiry, read_snapshot_expiry(fs_, file));
    EXPECT_EQ(expiry, 1'900'000'123) << snapshot::snapshot_mode_name(mode);
  }
}

// The deadline second itself is expired (a snapshot is valid strictly before it), in the
// format's one rule; guards an off-by-one that accepts a snapshot at its expiry second.
TEST_F(SnapshotExpiryTest, ExpiredAtItsDeadlineSecondAndNotBefore) {
  for (SnapshotMode mode : {SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest,
                            SnapshotMode::kDurableExport}) {
    snapshot::SnapshotHeader header;
    header.mode = mode;
    header.expiry_unix = 1'900'000'000;
    EXPECT_FALSE(snapshot::is_expired(header, 1'899'999'999)) << snapshot::snapshot_mode_name(mode);
    EXPECT_TRUE(snapshot::is_expired(header, 1'900'000'000)) << snapshot::snapshot_mode_name(mode);
    EXPECT_TRUE(snapshot::is_expired(header, 1'900'000'001)) << snapshot::snapshot_mode_name(mode);
  }
}

TEST_F(SnapshotExpiryTest, ADurableExportWithoutDeadlineNeverExpires) {
  SIESTA_ASSERT_OK(write(path(), snapshot::kNeverExpires, SnapshotMode::kDurableExport));
  SIESTA_ASSERT_OK_AND_ASSIGN(int64_t expiry, read_snapshot_expiry(fs_, path()));
  EXPECT_EQ(expiry, std::numeric_limits<int64_t>::max());
  // In a session mode 0 is a deadline long past, as the reader sees it.
  SIESTA_ASSERT_OK(write(dir_.file("session.snap"), 0));
  SIESTA_ASSERT_OK_AND_ASSIGN(expiry, read_snapshot_expiry(fs_, dir_.file("session.snap")));
  EXPECT_EQ(expiry, 0);
}

TEST_F(SnapshotExpiryTest, EachBadFileHasItsTypedError) {
  EXPECT_EQ(read_snapshot_expiry(fs_, dir_.file("missing")).status().code(), StatusCode::kNotFound);
  SIESTA_ASSERT_OK(write(path(), 1'900'000'000));
  const std::vector<uint8_t> good = snapshot_test::read_file(path());
  auto code_of = [&](const std::vector<uint8_t>& bytes) {
    snapshot_test::write_file(path(), bytes);
    return read_snapshot_expiry(fs_, path()).status().code();
  };
  EXPECT_EQ(code_of({}), StatusCode::kTruncated);
  EXPECT_EQ(code_of({good.begin(), good.begin() + 12}), StatusCode::kTruncated);
  EXPECT_EQ(code_of({good.begin(), good.begin() + 100}), StatusCode::kTruncated);
  auto bad_magic = good;
  bad_magic[0] ^= 1;
  EXPECT_EQ(code_of(bad_magic), StatusCode::kCorrupt);
  auto other_version = good;
  snapshot::put_u32(other_version.data() + 8, snapshot::kFormatVersion + 1);
  EXPECT_EQ(code_of(other_version), StatusCode::kUnsupported);
  snapshot::put_u32(other_version.data() + 8, 1);  // the layout before the generation
  EXPECT_EQ(code_of(other_version), StatusCode::kUnsupported);
  auto bad_flags = good;
  snapshot::put_u32(bad_flags.data() + 12, 7);
  EXPECT_EQ(code_of(bad_flags), StatusCode::kCorrupt);
  auto huge_header = good;
  snapshot::put_u32(huge_header.data() + 16, snapshot::kMaxHeaderBytes + 1);
  EXPECT_EQ(code_of(huge_header), StatusCode::kCorrupt);
  auto longer_header = good;  // states more header than the file holds
  snapshot::put_u32(longer_header.data() + 16, static_cast<uint32_t>(good.size() + 1));
  EXPECT_EQ(code_of(longer_header), StatusCode::kTruncated);
  EXPECT_EQ(code_of(good), StatusCode::kOk);
}

TEST_F(SnapshotExpiryTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path().c_str(), 0600), 0);
  Status read;
  EXPECT_TRUE(test_util::finishes_without_blocking(path(), [&] {
    read = read_snapshot_expiry(fs_, path()).status();
  })) << "read_snapshot_expiry blocked on a FIFO";
  EXPECT_EQ(read.code(), StatusCode::kFailedPrecondition) << read.to_string();
}

TEST_F(SnapshotExpiryTest, StoreNamesCarryTheHeaderNonceAndExpiredFilesOfALiveOwnerGo) {
  const std::string dir = dir_.file("cache");
  SnapshotStore::Options options;
  options.nonce = SnapshotStore::nonce_hex(key_.nonce());  // no read_expiry: the store's own
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SnapshotStore> owner,
                              SnapshotStore::open(fs_, clock_, dir, options));
  EXPECT_EQ(owner->nonce().size(), 32u);
  SIESTA_ASSERT_OK_AND_ASSIGN(std::string soon, owner->snapshot_path("soon"));
  SIESTA_ASSERT_OK_AND_ASSIGN(std::string later, owner->snapshot_path("later"));
  SIESTA_ASSERT_OK(write(soon, clock_.unix_seconds() + 10));
  SIESTA_ASSERT_OK(write(later, clock_.unix_seconds() + 1000));
  // The header's process nonce (offset 36, 16 bytes) is the one in the name.
  const std::vector<uint8_t> bytes = snapshot_test::read_file(later);
  ASSERT_GE(bytes.size(), 52u);
  snapshot::ProcessNonce in_header{};
  std::copy(bytes.begin() + 36, bytes.begin() + 52, in_header.begin());
  EXPECT_EQ(SnapshotStore::nonce_hex(in_header), owner->nonce());

  // Another process starts while the owner lives, at the first one's deadline.
  clock_.advance(std::chrono::seconds(10));
  ProcessKey other_key = snapshot_test::fixed_key(9);
  SnapshotStore::Options other = options;
  other.nonce = SnapshotStore::nonce_hex(other_key.nonce());
  ASSERT_NE(*other.nonce, *options.nonce);
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SnapshotStore> second,
                              SnapshotStore::open(fs_, clock_, dir, other));
  EXPECT_EQ(second->startup_cleanup().removed_expired_files, 1u);
  EXPECT_EQ(second->startup_cleanup().removed_dead_owner_files, 0u);
  EXPECT_EQ(read_snapshot_expiry(fs_, soon).status().code(), StatusCode::kNotFound);
  SIESTA_EXPECT_OK(read_snapshot_expiry(fs_, later).status());
}

TEST(SnapshotStoreNonceTest, HexIsLowerCaseAndInOrder) {
  snapshot::ProcessNonce nonce{};
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(SnapshotStore::nonce_hex(nonce), "00112233445566778899aabbccddeeff");
}

}  // namespace
}  // namespace siesta
