// The snapshot writer and reader when the device side is taken or fails under them: a staging
// ring that another user holds whole (waited for, as long as the options' staging_wait: the
// buffer another session's pipeline gives back is taken; one nobody gives back ends in the
// ring's FailedPrecondition, never a hang), and a device copy that fails when it is waited for
// (DeviceError). A failed write leaves no file behind and the error is the call's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/memory_backend_wrapper.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/failing_waits_backend.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using test_util::FailingWaitsBackend;

// Forwards everything; says when a caller starts waiting for a staging buffer.
class SignalingBackend final : public MemoryBackendWrapper {
 public:
  explicit SignalingBackend(MemoryBackend& inner) : MemoryBackendWrapper(inner) {}
  Result<StagingBuffer> acquire_staging_waiting(std::chrono::nanoseconds timeout) override {
    {
      std::lock_guard lock(mutex_);
      waiting_ = true;
    }
    changed_.notify_all();
    return MemoryBackendWrapper::acquire_staging_waiting(timeout);
  }
  // True once a caller waits, or once `done` is ready (it returned without waiting).
  template <class F>
  bool wait_until_waiting_or(F& done) {
    for (int i = 0; i < 30000; ++i) {  // bounded: 30 s
      {
        std::unique_lock lock(mutex_);
        if (changed_.wait_for(lock, std::chrono::milliseconds(1), [&] { return waiting_; })) {
          waiting_ = false;
          return true;
        }
      }
      if (done.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return true;
    }
    return false;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool waiting_ = false;
};
using ::testing::HasSubstr;

constexpr size_t kStaging = 16u << 10;
constexpr size_t kRegionBytes = 4 * kStaging;  // four chunks, one staging copy each

class SnapshotDeviceFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimBackendOptions options;
    options.granularity = 64u << 10;
    options.staging_buffer_bytes = kStaging;
    options.staging_buffer_count = 2;
    sim_ = SimBackend::create(options).value();
    device_ = ReservedRange::reserve(*sim_, kRegionBytes).value();
    ASSERT_TRUE(sim_->commit(device_.range()).ok());
    region_.layout = {
        "device", snapshot::PersistKind::kContents, kRegionBytes, {{0, kRegionBytes}}};
    region_.place = SnapshotRegion::Place::kDevice;
    region_.device = device_.range().base;
  }
  void TearDown() override { device_.reset(); }

  Result<SnapshotWriteResult> write(MemoryBackend& backend) {
    SnapshotWriteOptions o;
    o.staging_wait = staging_wait_;
    o.path = path_;
    o.fingerprint = snapshot_test::fingerprint(2);
    o.expiry_unix = clock_.unix_seconds() + 60;
    o.generation = 1;
    o.threads = 1;
    SnapshotWriter writer(fs_, clock_, key_, &backend);
    return writer.write(o, std::span(&region_, 1));
  }
  Result<SnapshotReadResult> read(MemoryBackend& backend) {
    SnapshotReadOptions o;
    o.staging_wait = staging_wait_;
    o.path = path_;
    o.fingerprint = snapshot_test::fingerprint(2);
    o.generation = 1;
    o.threads = 1;
    SnapshotReader reader(fs_, clock_, key_, &backend);
    return reader.read(o, std::span(&region_, 1));
  }
  std::vector<StagingBuffer> hold_the_ring() {
    std::vector<StagingBuffer> held;
    for (size_t i = 0; i < sim_->staging_buffer_count(); ++i) {
      held.push_back(sim_->acquire_staging().value());
    }
    return held;
  }

  siesta::testing::TempDir dir_;
  const std::string path_ = dir_.file("s.snap");
  PosixFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(5);
  std::unique_ptr<SimBackend> sim_;
  ReservedRange device_;
  SnapshotRegion region_;
  std::chrono::nanoseconds staging_wait_ = std::chrono::milliseconds(20);
};

// Guards: a writer or reader that waits without bound for staging buffers nobody gives back (a
// hang), or takes the ring's refusal for success.
TEST_F(SnapshotDeviceFaultTest, ARingHeldWholeElsewhereFailsTheWriteAndTheReadAfterItsWait) {
  {
    std::vector<StagingBuffer> held = hold_the_ring();
    const Result<SnapshotWriteResult> written = write(*sim_);
    EXPECT_EQ(written.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(written.status().message(), HasSubstr("staging buffers are held"));
    EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u) << "the temporary is removed";
  }
  SIESTA_ASSERT_OK(write(*sim_));
  std::vector<StagingBuffer> held = hold_the_ring();
  EXPECT_EQ(read(*sim_).status().code(), StatusCode::kFailedPrecondition);
}

// Guards: a pipeline that fails when another session's pipeline holds the ring for a moment
// (a background save beside a restore: the bug a benchmark of 256 conversations hit) instead
// of waiting for the buffer that pipeline gives back. The holder here gives its buffers back
// once the write or read has asked to wait (or, failing, has returned).
TEST_F(SnapshotDeviceFaultTest, ARingHeldElsewhereForAMomentIsWaitedFor) {
  staging_wait_ = std::chrono::seconds(60);
  SignalingBackend signaling(*sim_);
  for (bool reading : {false, true}) {
    SCOPED_TRACE(reading ? "read" : "write");
    std::vector<StagingBuffer> held = hold_the_ring();
    auto done = std::async(std::launch::async, [&]() -> Status {
      return reading ? read(signaling).status() : write(signaling).status();
    });
    ASSERT_TRUE(signaling.wait_until_waiting_or(done)) << "neither waited nor returned";
    held.clear();  // the other pipeline is done: its buffers come back
    SIESTA_EXPECT_OK(done.get());
  }
}

// Guards: a device copy's failed wait ignored (the chunk sealed or restored from a buffer the
// device never filled or emptied).
TEST_F(SnapshotDeviceFaultTest, ACopyWhoseWaitFailsFailsTheWriteAndTheRead) {
  // Injected: the second wait fails, in the middle of the four chunks' copies.
  FailingWaitsBackend failing_write(*sim_, 2);
  const Result<SnapshotWriteResult> written = write(failing_write);
  EXPECT_EQ(written.status().code(), StatusCode::kDeviceError);
  EXPECT_THAT(written.status().message(), HasSubstr("injected"));
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);

  SIESTA_ASSERT_OK(write(*sim_));
  for (uint64_t nth : {uint64_t{1}, uint64_t{4}}) {  // the first copy back, and the last
    SCOPED_TRACE(nth);
    FailingWaitsBackend failing_read(*sim_, nth);
    const Result<SnapshotReadResult> read_back = read(failing_read);
    EXPECT_EQ(read_back.status().code(), StatusCode::kDeviceError);
    EXPECT_EQ(failing_read.waits(), nth) << "the read stops at the failed wait";
  }
  SIESTA_EXPECT_OK(read(*sim_));
}

}  // namespace
}  // namespace siesta
