// A save reads the session's memory only after the device work queued before it: the
// Offloader's synchronize() before its first copy. The strict simulator runs work-stream jobs
// only once something waits for them, so a save that skipped synchronize() would copy the
// bytes from before the job, every time, as a GPU copying on its own stream may; and a
// synchronize() that fails keeps the memory, like any failed write.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::FakeOffloadTarget;
using test_util::OffloaderFixture;
using test_util::OffloaderSetup;

constexpr std::byte kKernelByte{0xa5};

// How many bytes of row `row` of the target's "rows" region, as the memory holds it now, are
// not `value`.
size_t row_bytes_other_than(const OffloaderFixture& f, uint32_t row, std::byte value) {
  const SnapshotRegion rows = f.target_->snapshot_regions()[0];
  // The simulator's device addresses are host addresses.
  const auto* at =
      reinterpret_cast<const std::byte*>(rows.device) +  // NOLINT(performance-no-int-to-ptr)
      size_t{row} * FakeOffloadTarget::kRowBytes;
  return static_cast<size_t>(std::count_if(at, at + FakeOffloadTarget::kRowBytes,
                                           [value](std::byte b) { return b != value; }));
}

// Guards: the synchronize() before a save's first device copy (run_save) deleted or moved
// after the writer. A "kernel" the last command left queued on the work stream rewrites row
// 3; the snapshot must hold the rewritten row, since that is what the device holds once the
// work has run.
TEST(OffloaderSaveSyncTest, ASaveWaitsForDeviceWorkQueuedBeforeIt) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(10).ok());
  const DeviceAddress rows = f.target_->snapshot_regions()[0].device;
  ASSERT_TRUE(f.sim_
                  ->enqueue_work([rows] {
                    std::memset(reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
                                    rows + 3 * FakeOffloadTarget::kRowBytes),
                                static_cast<int>(kKernelByte), FakeOffloadTarget::kRowBytes);
                    return Status::Ok();
                  })
                  .ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  ASSERT_TRUE(lease->admission().restored);
  EXPECT_EQ(row_bytes_other_than(f, 3, kKernelByte), 0u)
      << "the snapshot holds the row from before the queued kernel ran: the save did not "
         "synchronize before copying";
  EXPECT_EQ(f.target_->verify(), "row 3 differs") << "and nothing else changed";
}

// Guards: a failed synchronize() ignored (the save writing memory whose pending work failed)
// or taken for success. The error of a job on the work stream is what synchronize() returns;
// the save then fails like a failed write: memory kept, no file, retried after the backoff,
// and that retry (the error reported once) succeeds.
// With or without a RAM tier (whose copy would otherwise stand in for the failed write).
void expect_a_failed_synchronize_keeps_the_memory(uint64_t ram_tier_bytes) {
  SCOPED_TRACE("RAM tier of " + std::to_string(ram_tier_bytes) + " bytes");
  OffloaderSetup setup;
  setup.ram_tier_bytes = ram_tier_bytes;
  OffloaderFixture f(setup);
  ASSERT_TRUE(f.command(10).ok());
  const uint64_t committed = f.sim_->stats().committed_bytes;
  // Injected: the device work queued before the save fails.
  std::printf("fault: a job on the device's work stream fails before the save\n");
  ASSERT_TRUE(
      f.sim_->enqueue_work([] { return DeviceError("injected kernel failure before the save"); })
          .ok());
  f.pass(OffloaderFixture::kIdle);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident);
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_EQ(status.counters.saves, 0u);
  EXPECT_EQ(status.counters.ram_saves, 0u) << "no copy of memory whose work failed";
  EXPECT_EQ(status.ram_bytes, 0u);
  EXPECT_NE(status.last_error.find("injected kernel failure"), std::string::npos)
      << status.last_error;
  EXPECT_EQ(f.sim_->stats().committed_bytes, committed) << "memory kept";
  EXPECT_FALSE(f.snapshot_exists());
  EXPECT_EQ(f.fs_.counters().of(FsOp::kCreate), 0u) << "nothing written after a failed sync";
  ASSERT_EQ(f.log_.size(), 1u);
  EXPECT_NE(f.log_[0].find("snapshot write failed"), std::string::npos) << f.log_[0];
  f.pass(1);  // the first retry, after the initial backoff
  EXPECT_EQ(f.state(), ram_tier_bytes > 0 ? OffloadState::kRam : OffloadState::kDisk);
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderSaveSyncTest, ASynchronizeThatFailsKeepsTheMemoryAndIsRetried) {
  expect_a_failed_synchronize_keeps_the_memory(0);
}

TEST(OffloaderSaveSyncTest, ASynchronizeThatFailsKeepsTheMemoryWithARamTierToo) {
  expect_a_failed_synchronize_keeps_the_memory(uint64_t{16} << 20);
}

// Guards: a save of a session that marks its work (Session: a kernels fence at each command's
// end) waiting for the whole device anyway -- for another session's decode step queued after
// the mark. That work here is a job that does not finish until the test lets it (or 30 s
// pass): a save that synchronized the device would return only after it.
TEST(OffloaderSaveSyncTest, WithAMarkTheSaveWaitsForTheSessionsWorkNotTheDevices) {
  OffloaderFixture f;
  f.target_->marks = true;
  ASSERT_TRUE(f.command(10).ok());
  ASSERT_EQ(f.target_->marks_made, 1u);
  std::mutex mutex;
  std::condition_variable cv;
  bool let_go = false;
  std::atomic<bool> finished{false};
  Result<CopyTicket> other = f.sim_->enqueue_work([&] {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return let_go; });
    finished = true;
    return Status::Ok();
  });
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();  // the save, on this thread
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.saves_ahead, 1u) << status.last_error;
  EXPECT_EQ(f.target_->marked_waits, 1u);
  EXPECT_FALSE(finished) << "the save waited for work queued after the session's mark";
  {
    std::lock_guard lock(mutex);
    let_go = true;
  }
  cv.notify_all();
  EXPECT_TRUE(f.sim_->wait_work(*other).ok());
  EXPECT_EQ(f.target_->verify(), "");
}

}  // namespace
}  // namespace siesta
