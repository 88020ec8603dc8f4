// The SnapshotWriter's protocol in every mode: NoSpace before a byte, cancellation before,
// during and after the last read (no temporary left, the previous snapshot untouched, no
// fdatasync after a late cancel), the memory-read report, and the write-back window.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/snapshot_file_fixture.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

class SnapshotWriteProtocolTest : public snapshot_test::SnapshotFileFixture {};

TEST_P(SnapshotWriteProtocolTest, NoSpaceWritesNothing) {
  snapshot_test::TestFileSystem small(100);
  auto regions = sample(1);
  SnapshotWriter writer(small, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(write_options(), views(regions)), StatusCode::kNoSpace);
  EXPECT_EQ(small.creates, 0);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

TEST_P(SnapshotWriteProtocolTest, CancelLeavesThePreviousSnapshotAndNoTemporary) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto previous = snapshot_test::read_file(path());
  std::atomic<bool> cancel{true};
  SnapshotWriteOptions o = write_options();
  o.cancel = &cancel;
  auto regions = sample(2);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(o, views(regions)), StatusCode::kCancelled);
  EXPECT_EQ(snapshot_test::read_file(path()), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
  SIESTA_EXPECT_OK(read_sample(key_));
}

TEST_P(SnapshotWriteProtocolTest, CancelMidwayRemovesTheTemporaryFile) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto previous = snapshot_test::read_file(path());
  std::atomic<bool> cancel{false};
  int writes = 0;
  snapshot_test::TestFileSystem fs;
  fs.after_write = [&] {
    if (++writes == 3) cancel = true;  // header and two chunks are on disk by then
  };
  SnapshotWriteOptions o = write_options();
  o.cancel = &cancel;
  // The memory is let go before the temporary file is unlinked (slow for a large file).
  size_t files_when_read = 0;
  int reads_done = 0;
  o.on_memory_read = [&] {
    ++reads_done;
    files_when_read = snapshot_test::count_files(dir_.path());
  };
  auto regions = sample(2);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(o, views(regions)), StatusCode::kCancelled);
  EXPECT_GE(writes, 3);
  EXPECT_EQ(reads_done, 1);
  EXPECT_EQ(files_when_read, 2u) << "the previous snapshot and the temporary one";
  EXPECT_EQ(snapshot_test::read_file(path()), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
}

// The Offloader lets a waiting command run as soon as the writer has read the memory; a cancel
// raised then abandons the file before fdatasync (the slow step) and leaves nothing behind.
TEST_P(SnapshotWriteProtocolTest, ACancelAfterTheLastReadAbandonsTheFileBeforeSyncing) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto previous = snapshot_test::read_file(path());
  std::atomic<bool> cancel{false};
  int reads_done = 0;
  int writes_when_read = 0;
  snapshot_test::TestFileSystem fs;
  int writes = 0;
  fs.after_write = [&] { ++writes; };
  SnapshotWriteOptions o = write_options();
  o.cancel = &cancel;
  o.on_memory_read = [&] {
    ++reads_done;
    writes_when_read = writes;
    cancel = true;
  };
  auto regions = sample(2);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(o, views(regions)), StatusCode::kCancelled);
  EXPECT_EQ(reads_done, 1);
  EXPECT_GE(writes_when_read, 2) << "called after the header and the chunks were written";
  EXPECT_EQ(writes, writes_when_read + 1) << "only the trailer after it";
  EXPECT_EQ(fs.syncs, 0) << "a cancelled write never waits for fdatasync";
  EXPECT_EQ(snapshot_test::read_file(path()), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
}

TEST_P(SnapshotWriteProtocolTest, MemoryReadIsReportedOnceOnASuccessfulWrite) {
  int reads_done = 0;
  SnapshotWriteOptions o = write_options();
  o.on_memory_read = [&] { ++reads_done; };
  auto regions = sample(2);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(o, views(regions)).status());
  EXPECT_EQ(reads_done, 1);
  SIESTA_EXPECT_OK(read_sample(key_));
}

// The writer keeps its dirty bytes to a window: write-back starts for every chunk as it is
// written, and what lies further behind than the window is waited for, so no write stalls long
// in the kernel's throttling (a cancelling command waits for the write under way).
TEST_P(SnapshotWriteProtocolTest, WriteBackFollowsTheWritesWithinTheWindow) {
  snapshot_test::TestFileSystem fs;
  SnapshotWriteOptions o = write_options();  // 1000-byte chunks: several windows' worth
  o.writeback_window_bytes = 2500;
  auto regions = sample(3);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written, writer.write(o, views(regions)));
  ASSERT_GT(written.chunk_count, 5u);
  const uint64_t largest_record = snapshot::kChunkHeaderBytes + 1000 + snapshot::kTagBytes;
  EXPECT_TRUE(fs.writeback.started_in_order) << "one contiguous range, header first";
  EXPECT_EQ(fs.writeback.started_end, written.file_bytes - snapshot::kTrailerBytes)
      << "every chunk's write-back started (the trailer goes with fdatasync)";
  EXPECT_GT(fs.writeback.waited_end, 0u);
  EXPECT_LE(fs.writeback.max_unwaited, o.writeback_window_bytes + largest_record);
  SIESTA_EXPECT_OK(read_sample(key_));
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotWriteProtocolTest, snapshot_test::kEveryMode,
                         snapshot_test::mode_test_name);

}  // namespace
}  // namespace siesta
