// RecordBufferPool (core/snapshot/record_buffer_pool.h) alone, and as the snapshot writer and
// reader use it: they take their record buffers from it and give every one back, so that a second
// save and restore allocate nothing new and still restore exactly the saved bytes.
#include "core/snapshot/record_buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "core/base/clock.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

TEST(RecordBufferPool, EmptyPoolGivesAnEmptyBuffer) {
  RecordBufferPool pool;
  EXPECT_EQ(pool.take().capacity(), 0u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

TEST(RecordBufferPool, GivesBackTheLargestKeptBufferFirst) {
  RecordBufferPool pool;
  for (size_t bytes : {100u, 300u, 200u}) pool.give_back(std::vector<uint8_t>(bytes));
  EXPECT_EQ(pool.kept_bytes(), 600u);
  std::vector<size_t> taken;
  taken.reserve(3);
  for (int i = 0; i < 3; ++i) taken.push_back(pool.take().capacity());
  EXPECT_EQ(taken, (std::vector<size_t>{300, 200, 100}));
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

TEST(RecordBufferPool, KeepsTheSameMemoryWithItsContents) {
  RecordBufferPool pool;
  std::vector<uint8_t> buffer(64, 7);
  const uint8_t* memory = buffer.data();
  pool.give_back(std::move(buffer));
  std::vector<uint8_t> again = pool.take();
  EXPECT_EQ(again.data(), memory);
  EXPECT_EQ(again, std::vector<uint8_t>(64, 7));
}

TEST(RecordBufferPool, DropsBuffersWithoutCapacity) {
  RecordBufferPool pool;
  pool.give_back({});
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

// Saves and restores one host region through a writer and a reader sharing `pool`.
class PooledSnapshotTest : public ::testing::TestWithParam<snapshot::SnapshotMode> {
 protected:
  static constexpr size_t kRegionBytes = 300000;
  static constexpr uint32_t kChunkBytes = 4096;

  // One save and one restore into a zeroed copy; returns the restored bytes.
  std::vector<std::byte> save_and_restore(uint64_t pattern_seed) {
    snapshot_test::HostRegion source = snapshot_test::host_region(
        "kv", kRegionBytes, {{0, 100000}, {150001, 120000}}, pattern_seed);
    SnapshotWriteOptions write;
    write.path = dir_.file("s.snap");
    write.mode = GetParam();
    write.fingerprint = snapshot_test::fingerprint(1);
    write.expiry_unix = clock_.unix_seconds() + 60;
    write.chunk_bytes = kChunkBytes;
    write.threads = 3;
    write.record_buffers = &pool_;
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    EXPECT_TRUE(writer.write(write, std::span(&source.region, 1)).ok());

    snapshot_test::HostRegion into = source;
    std::fill(into.bytes.begin(), into.bytes.end(), std::byte{0});
    into.region.host = into.bytes.data();
    SnapshotReadOptions read{write.path, write.mode, write.fingerprint};
    read.threads = 3;
    SnapshotReader reader(fs_, clock_, key_, nullptr);
    EXPECT_TRUE(reader.read(read, std::span(&into.region, 1)).ok());
    EXPECT_TRUE(fs_.remove(write.path).ok());

    std::vector<std::byte> expected(kRegionBytes, std::byte{0});
    for (const snapshot::Extent& e : source.region.layout.extents) {
      std::memcpy(expected.data() + e.offset, source.bytes.data() + e.offset, e.length);
    }
    EXPECT_EQ(into.bytes, expected);
    return into.bytes;
  }

  RecordBufferPool pool_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(3);
  testing::TempDir dir_;
  snapshot_test::TestFileSystem fs_{UINT64_MAX, /*skip_syncs=*/true};
};

TEST_P(PooledSnapshotTest, BuffersComeBackAndAreReusedWithoutGrowing) {
  save_and_restore(1);
  const uint64_t after_first = pool_.kept_bytes();
  if (GetParam() == snapshot::SnapshotMode::kSessionEncrypted) {
    EXPECT_GE(after_first, 4u * kChunkBytes) << "3 threads + 1: four record buffers kept";
  } else {
    // The digest writer writes the plaintext as it is, and reads go to their destination.
    EXPECT_EQ(after_first, 0u) << "a digest write or a read kept a record buffer";
  }
  // A different pattern through the same (stale) buffers still restores exactly.
  save_and_restore(2);
  EXPECT_EQ(pool_.kept_bytes(), after_first) << "the second cycle allocated new buffers";
}

INSTANTIATE_TEST_SUITE_P(Modes, PooledSnapshotTest,
                         ::testing::Values(snapshot::SnapshotMode::kSessionEncrypted,
                                           snapshot::SnapshotMode::kSessionDigest),
                         [](const auto& param_info) {
                           return param_info.param == snapshot::SnapshotMode::kSessionEncrypted
                                      ? std::string("Encrypted")
                                      : std::string("Digest");
                         });

}  // namespace
}  // namespace siesta
