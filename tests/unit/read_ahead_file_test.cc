#include "core/base/read_ahead_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/posix_file_system.h"
#include "tests/support/aligned_reads_file.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using testing::AlignedReadsFile;

constexpr size_t kKiB = 1024;

// A file of `bytes` pseudo-random bytes, and the bytes.
class ReadAheadFileTest : public ::testing::Test {
 protected:
  void make_file(size_t bytes) {
    content_.resize(bytes);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (std::byte& b : content_) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<std::byte>(x);
    }
    path_ = dir_.file("f");
    auto file = fs_.create_exclusive(path_, 0600);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    ASSERT_TRUE((*file)->write_at(0, content_).ok());
    ASSERT_TRUE((*file)->close().ok());
    auto cached = fs_.open_readable(path_);
    ASSERT_TRUE(cached.ok()) << cached.status().to_string();
    cached_ = std::move(cached).value();
  }

  // A read-ahead of [begin, end) whose reads "around the cache" are AlignedReadsFile's.
  std::unique_ptr<ReadAheadFile> start(uint64_t begin, uint64_t end, ReadAheadOptions options,
                                       std::optional<uint64_t> fail_from = std::nullopt) {
    auto direct = fs_.open_readable(path_);
    EXPECT_TRUE(direct.ok());
    auto file = ReadAheadFile::start(
        *cached_,
        std::make_unique<AlignedReadsFile>(std::move(direct).value(), counters_, fail_from), begin,
        end, options);
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    return file.ok() ? std::move(file).value() : nullptr;
  }

  // Reads [begin, end) through `file` in records of `record` bytes, each as three reads (a
  // 16-byte head, the middle, a 16-byte tail, as a snapshot's chunk records are read), the
  // records taken in order by `threads` threads. Returns what was read. With `stop_short`, the
  // reader of that record reads only its head, then calls `stopped` (what a chunk that fails
  // its header's check does).
  static std::vector<std::byte> read_records(ReadableFile& file, uint64_t begin, uint64_t end,
                                             size_t record, size_t threads,
                                             std::optional<uint64_t> stop_short = std::nullopt,
                                             const std::function<void()>& stopped = {}) {
    std::vector<std::byte> out(end - begin);
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::vector<std::thread> readers;
    for (size_t t = 0; t < threads; ++t) {
      readers.emplace_back([&] {
        for (uint64_t i = next++; begin + i * record < end; i = next++) {
          const uint64_t at = begin + i * record;
          const size_t length = static_cast<size_t>(std::min<uint64_t>(record, end - at));
          const size_t head = std::min<size_t>(16, length);
          const size_t tail = std::min<size_t>(16, length - head);
          const size_t parts[3] = {head, length - head - tail, tail};
          uint64_t offset = at;
          for (size_t part : parts) {
            auto got = file.read_at(offset, std::span(out).subspan(offset - begin, part));
            if (!got.ok() || *got != part) failed = true;
            offset += part;
            if (stop_short == i) {
              stopped();
              break;
            }
          }
        }
      });
    }
    for (std::thread& reader : readers) reader.join();
    EXPECT_FALSE(failed.load());
    return out;
  }

  std::vector<std::byte> slice(uint64_t begin, uint64_t end) const {
    return {content_.begin() + static_cast<long>(begin), content_.begin() + static_cast<long>(end)};
  }

  PosixFileSystem fs_;
  testing::TempDir dir_;
  std::string path_;
  std::vector<std::byte> content_;
  std::unique_ptr<ReadableFile> cached_;
  std::shared_ptr<AlignedReadsFile::Counters> counters_ =
      std::make_shared<AlignedReadsFile::Counters>();
};

TEST_F(ReadAheadFileTest, ManyThreadsReadTheRangeAsTheFileHasItThroughAlignedBlocks) {
  // An unaligned range ending before the file does, records that straddle blocks, and a ring
  // smaller than a record (three 64 KiB blocks, 200 KiB records): every block is read once,
  // aligned, and the bytes are the file's.
  make_file(3 * 1024 * kKiB + 123);
  const uint64_t begin = 1000, end = 3 * 1024 * kKiB;
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  options.blocks = 2;  // raised to the loader's block and two more
  auto file = start(begin, end, options);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(read_records(*file, begin, end, 200 * kKiB + 32, 8), slice(begin, end));
  const ReadAheadFile::Counts counts = file->counts();
  EXPECT_EQ(counts.loaded, (end + 64 * kKiB - 1) / (64 * kKiB));
  EXPECT_EQ(counts.failed, 0u);
  EXPECT_EQ(counters_->misaligned.load(), 0u);
  EXPECT_EQ(counters_->reads.load(), counts.loaded);
}

TEST_F(ReadAheadFileTest, AReaderThatStopsShortAndAbandonsLetsEveryOtherReadEnd) {
  // The fifth record's reader reads its head only and abandons: its blocks are never read
  // out, and readers of records beyond the ring (3 blocks of 64 KiB against eight threads
  // reading 40 KiB records) would wait for them forever. After abandon() they read through
  // the cache: every byte but the skipped ones is the file's.
  make_file(2 * 1024 * kKiB);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  options.blocks = 3;
  auto file = start(0, content_.size(), options);
  ASSERT_NE(file, nullptr);
  ReadAheadFile* const raw = file.get();
  std::vector<std::byte> got =
      read_records(*file, 0, content_.size(), 40 * kKiB, 8, 4, [raw] { raw->abandon(); });
  const size_t skipped_from = 4 * 40 * kKiB + 16, skipped_to = 5 * 40 * kKiB;
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + skipped_from, content_.begin()));
  EXPECT_TRUE(std::equal(got.begin() + skipped_to, got.end(), content_.begin() + skipped_to));
  EXPECT_EQ(counters_->misaligned.load(), 0u);
}

TEST_F(ReadAheadFileTest, TheLastBlockIsReadWholeWhereTheFileEndsInIt) {
  make_file(200 * kKiB + 7);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  auto file = start(0, content_.size(), options);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(read_records(*file, 0, content_.size(), 4 * kKiB, 3), content_);
  EXPECT_EQ(file->counts().loaded, 4u);
  EXPECT_EQ(counters_->misaligned.load(), 0u);
}

TEST_F(ReadAheadFileTest, ABlockWhoseReadFailsIsReadThroughTheCacheInstead) {
  // Fault injected: every read around the cache from 300 KiB on fails with IoError.
  make_file(1024 * kKiB);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  options.reads_in_flight = 2;
  auto file = start(0, content_.size(), options, 300 * kKiB);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(read_records(*file, 0, content_.size(), 48 * kKiB, 4), content_);
  const ReadAheadFile::Counts counts = file->counts();
  EXPECT_EQ(counts.loaded, 4u) << "blocks wholly before 300 KiB";
  EXPECT_EQ(counts.failed, 12u);
}

TEST_F(ReadAheadFileTest, BytesReadASecondTimeAreTheFilesToo) {
  make_file(512 * kKiB);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  auto file = start(0, content_.size(), options);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(read_records(*file, 0, content_.size(), 32 * kKiB, 2), content_);
  // Every block was given back; the second pass reads through the cache.
  EXPECT_EQ(read_records(*file, 0, content_.size(), 32 * kKiB, 2), content_);
  EXPECT_EQ(file->counts().loaded, 8u);
}

TEST_F(ReadAheadFileTest, ReadsOutsideTheRangeGoThroughTheCache) {
  make_file(256 * kKiB);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  auto file = start(64 * kKiB, 128 * kKiB, options);
  ASSERT_NE(file, nullptr);
  std::vector<std::byte> head(100), across(200), tail(50);
  ASSERT_EQ(*file->read_at(0, head), head.size());
  EXPECT_EQ(head, slice(0, 100));
  // Starts in the range, ends past it.
  ASSERT_EQ(*file->read_at(128 * kKiB - 100, across), across.size());
  EXPECT_EQ(across, slice(128 * kKiB - 100, 128 * kKiB + 100));
  ASSERT_EQ(*file->read_at(256 * kKiB - 50, tail), tail.size());
  EXPECT_EQ(tail, slice(256 * kKiB - 50, 256 * kKiB));
  EXPECT_EQ(*file->size(), 256 * kKiB);
}

TEST_F(ReadAheadFileTest, DestroyedBeforeItsRangeIsReadItStopsItsLoaders) {
  // The ring fills and the loaders wait for room that never comes: the destructor ends them.
  make_file(1024 * kKiB);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  options.reads_in_flight = 3;
  auto file = start(0, content_.size(), options);
  ASSERT_NE(file, nullptr);
  std::vector<std::byte> first(10);
  ASSERT_EQ(*file->read_at(0, first), first.size());
  EXPECT_EQ(first, slice(0, 10));
  file.reset();
  // The ring: max(4 blocks, 3 loaders + 2) = 5, none given back (block 0 is not read out).
  EXPECT_LE(counters_->reads.load(), 5u);
}

TEST_F(ReadAheadFileTest, ReadAheadsOnSeveralThreadsAtOnceShareTheKeptRings) {
  // Four restores at once, each its own read-ahead, twice: the rings kept between them are
  // taken and given back from several threads.
  make_file(1024 * kKiB);
  ReadAheadOptions options;
  options.block_bytes = 64 * kKiB;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> restores;
    restores.reserve(4);
    std::atomic<int> equal{0};
    for (int t = 0; t < 4; ++t) {
      restores.emplace_back([&] {
        auto direct = fs_.open_readable(path_);
        if (!direct.ok()) return;
        auto file =
            ReadAheadFile::start(*cached_, std::move(direct).value(), 0, content_.size(), options);
        if (!file.ok()) return;
        if (read_records(**file, 0, content_.size(), 40 * kKiB, 2) == content_) ++equal;
      });
    }
    for (std::thread& restore : restores) restore.join();
    EXPECT_EQ(equal.load(), 4) << "round " << round;
  }
}

TEST_F(ReadAheadFileTest, RefusesAnEmptyRangeAndNoLoaders) {
  make_file(4 * kKiB);
  auto direct = fs_.open_readable(path_);
  ASSERT_TRUE(direct.ok());
  ReadAheadOptions options;
  EXPECT_EQ(
      ReadAheadFile::start(*cached_, std::move(direct).value(), 10, 10, options).status().code(),
      StatusCode::kInvalidArgument);
  direct = fs_.open_readable(path_);
  options.reads_in_flight = 0;
  EXPECT_EQ(
      ReadAheadFile::start(*cached_, std::move(direct).value(), 0, 10, options).status().code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace siesta
