// A snapshot file out of the page cache: read around the cache, in order, ahead of the chunk
// threads (core/base/read_ahead_file.h), with the same outcome as through it, and the way a
// ColdReadChoice picks. The file system here says every file is out of the cache (or in it),
// and its reads "around the cache" are AlignedReadsFile's, which refuse unaligned reads as
// O_DIRECT does, on any file system the tests run on.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/file_system_wrapper.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/aligned_reads_file.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot_test::HostRegion;
using testing::AlignedReadsFile;

// Files opened here say `cached_fraction` of any range is in the page cache, and, unless
// `no_direct`, open_direct() gives an AlignedReadsFile over the file (failing from
// `fail_direct_from` when set).
class ColdFileSystem final : public FileSystemWrapper {
 public:
  ColdFileSystem() : FileSystemWrapper(posix_) {}

  Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) override {
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, target().open_readable(path));
    return std::unique_ptr<ReadableFile>(std::make_unique<Readable>(std::move(file), *this, path));
  }

  double cached_fraction = 0;
  bool no_direct = false;
  std::optional<uint64_t> fail_direct_from;
  std::shared_ptr<AlignedReadsFile::Counters> direct_reads =
      std::make_shared<AlignedReadsFile::Counters>();

 private:
  static inline PosixFileSystem posix_;

  class Readable final : public ReadableFileWrapper {
   public:
    Readable(std::unique_ptr<ReadableFile> file, ColdFileSystem& fs, std::string path)
        : ReadableFileWrapper(std::move(file)), fs_(fs), path_(std::move(path)) {}
    Result<uint64_t> cached_bytes(uint64_t, uint64_t length) override {
      return static_cast<uint64_t>(static_cast<double>(length) * fs_.cached_fraction);
    }
    Result<std::unique_ptr<ReadableFile>> open_direct() override {
      if (fs_.no_direct) return Unsupported("no reads around the cache here");
      SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> again,
                              fs_.target().open_readable(path_));
      return std::unique_ptr<ReadableFile>(std::make_unique<AlignedReadsFile>(
          std::move(again), fs_.direct_reads, fs_.fail_direct_from));
    }

   private:
    ColdFileSystem& fs_;
    const std::string path_;
  };
};

class SnapshotColdReadTest : public ::testing::Test {
 protected:
  // One host region of `bytes`, in chunks of an odd size, so that records straddle blocks.
  void write(size_t bytes, uint64_t seed = 1) {
    source_ = snapshot_test::host_region("kv", bytes, {{0, bytes}}, seed);
    SnapshotWriteOptions o;
    o.path = path();
    o.mode = snapshot::SnapshotMode::kSessionEncrypted;
    o.fingerprint = snapshot_test::fingerprint(3);
    o.expiry_unix = clock_.unix_seconds() + 100;
    o.chunk_bytes = 100'003;
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    ASSERT_TRUE(writer.write(o, std::span(&source_.region, 1)).ok());
  }

  Result<SnapshotReadResult> read(SnapshotReadOptions options = {}) {
    into_ =
        snapshot_test::host_region("kv", source_.bytes.size(), source_.region.layout.extents, 0);
    std::memset(into_.bytes.data(), 0, into_.bytes.size());
    options.path = path();
    options.mode = snapshot::SnapshotMode::kSessionEncrypted;
    options.fingerprint = snapshot_test::fingerprint(3);
    options.read_ahead.block_bytes = 64 << 10;  // many blocks for a small file
    SnapshotReader reader(fs_, clock_, key_, nullptr);
    return reader.read(options, std::span(&into_.region, 1));
  }

  std::string path() const { return dir_.file("s.snap"); }

  testing::TempDir dir_;
  ColdFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(5);
  HostRegion source_, into_;
};

TEST_F(SnapshotColdReadTest, AFileOutOfTheCacheIsReadAroundItWithTheSameBytes) {
  write(3 << 20);
  auto read = this->read();
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_TRUE(read->cold);
  EXPECT_TRUE(read->read_around_cache);
  EXPECT_EQ(into_.bytes, source_.bytes);
  // The whole file but its header's first block and the trailer, in 64 KiB blocks.
  EXPECT_GE(fs_.direct_reads->reads.load(), (3u << 20) / (64u << 10));
  EXPECT_EQ(fs_.direct_reads->misaligned.load(), 0u);
}

TEST_F(SnapshotColdReadTest, AFileMostlyInTheCacheIsReadThroughIt) {
  write(1 << 20);
  fs_.cached_fraction = 0.5;  // half: not "out of the cache"
  auto read = this->read();
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_FALSE(read->cold);
  EXPECT_FALSE(read->read_around_cache);
  EXPECT_EQ(into_.bytes, source_.bytes);
  EXPECT_EQ(fs_.direct_reads->reads.load(), 0u);
}

TEST_F(SnapshotColdReadTest, ThroughCacheReadsEveryFileThroughIt) {
  write(1 << 20);
  SnapshotReadOptions options;
  options.cold_read = SnapshotReadOptions::ColdRead::kThroughCache;
  auto read = this->read(options);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_FALSE(read->read_around_cache);
  EXPECT_EQ(into_.bytes, source_.bytes);
  EXPECT_EQ(fs_.direct_reads->reads.load(), 0u);
}

TEST_F(SnapshotColdReadTest, AFailingReadAroundTheCacheCostsSpeedNotTheRestore) {
  // Fault injected: every read around the cache from 1 MiB on fails with IoError.
  write(3 << 20);
  fs_.fail_direct_from = 1 << 20;
  auto read = this->read();
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_TRUE(read->read_around_cache);
  EXPECT_EQ(into_.bytes, source_.bytes);
  EXPECT_GT(fs_.direct_reads->failed.load(), 0u) << "the fault fired";
}

TEST_F(SnapshotColdReadTest, WithoutReadsAroundTheCacheAColdFileIsReadThroughIt) {
  write(1 << 20);
  fs_.no_direct = true;
  auto read = this->read();
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_TRUE(read->cold);
  EXPECT_FALSE(read->read_around_cache);
  EXPECT_EQ(into_.bytes, source_.bytes);
}

TEST_F(SnapshotColdReadTest, ACorruptChunkReadAroundTheCacheIsStillCorrupt) {
  write(2 << 20);
  std::vector<uint8_t> bytes = snapshot_test::read_file(path());
  bytes[bytes.size() / 2] ^= 0x01;
  snapshot_test::write_file(path(), bytes);
  auto read = this->read();
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kCorrupt) << read.status().to_string();
}

TEST_F(SnapshotColdReadTest, AChunkOutOfPlaceStopsTheReadWithoutWaitingForItsUnreadBytes) {
  // The tenth chunk's header names another index: that chunk is read no further (its payload
  // and tag never are), so the blocks holding them are never read out. Four threads and a ring
  // of four 64 KiB blocks keep chunks in flight beyond the ring: they must not wait for it.
  write(3 << 20);
  std::vector<uint8_t> bytes = snapshot_test::read_file(path());
  const uint64_t full = snapshot::chunk_record_layout(100'003).size;
  const uint64_t last = snapshot::chunk_record_layout((3 << 20) % 100'003).size;
  const uint64_t chunks_at =
      bytes.size() - snapshot::kTrailerBytes - ((3 << 20) / 100'003) * full - last;
  bytes[chunks_at + 10 * full + 4] ^= 0x01;  // the header's chunk index
  snapshot_test::write_file(path(), bytes);
  SnapshotReadOptions options;
  options.threads = 4;
  auto read = this->read(options);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kCorrupt) << read.status().to_string();
  EXPECT_NE(read.status().message().find("chunk 10"), std::string::npos)
      << read.status().to_string();
}

TEST_F(SnapshotColdReadTest, AChoiceTakesTurnsAndLearnsFromEachColdRead) {
  write(ColdReadChoice::kLeastBytes);
  ColdReadChoice choice;
  SnapshotReadOptions options;
  options.cold_read_choice = &choice;
  std::vector<bool> around;
  for (size_t i = 0; i < 2 * ColdReadChoice::kSamples; ++i) {
    auto read = this->read(options);
    ASSERT_TRUE(read.ok()) << read.status().to_string();
    EXPECT_EQ(into_.bytes, source_.bytes);
    around.push_back(read->read_around_cache);
  }
  EXPECT_EQ(around, (std::vector<bool>{true, false, true, false, true, false}));
  EXPECT_GT(choice.rate(ColdReadChoice::Way::kAroundCache), 0);
  EXPECT_GT(choice.rate(ColdReadChoice::Way::kThroughCache), 0);
}

}  // namespace
}  // namespace siesta
