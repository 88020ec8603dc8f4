// The Offloader's error paths that the transition tests do not take: a host range that fails
// to release after the device memory went, a history that cannot be discarded after a
// fallback or an expiry (DeviceError, no lease), a snapshot of another format version (the
// `unsupported` fallback), and a retire that fails (the file removed where it is). Each names
// the fault it injects.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/offload/offloader.h"
#include "core/snapshot/snapshot_format.h"
#include "tests/support/multi_range_offloader_rig.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::MultiRangeOffloaderRig;
using test_util::OffloaderFixture;

constexpr int64_t kIdleAfter = OffloaderFixture::kIdle;
constexpr int64_t kExpireAfter = OffloaderFixture::kExpire;

// Guards: a host release failure after the device ranges were decommitted treated as "nothing
// released" (the session marked resident over decommitted device memory) or not reported; or
// the restore committing the host range that was never released.
TEST(OffloaderErrorPathTest, AHostRangeThatFailsToReleaseKeepsWhatWasReleasedReleased) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(12).ok());
  const uint64_t host_before = f.host_.stats().committed_bytes;
  // Injected: every host release fails.
  f.host_.set_fault_hook([](HostVmmCall call, const HostRange&) {
    return call == HostVmmCall::kRelease ? IoError("injected: host release refused") : Status::Ok();
  });
  f.pass(kIdleAfter);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kDisk) << "the device memory is released: disk";
  EXPECT_EQ(status.counters.saves, 1u);
  EXPECT_EQ(status.counters.write_failures, 1u) << "the failed release is counted";
  EXPECT_NE(status.last_error.find("injected: host release refused"), std::string::npos)
      << status.last_error;
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u);
  EXPECT_GT(status.released_vram_bytes, 0u);
  EXPECT_EQ(status.released_host_bytes, 0u);
  EXPECT_EQ(f.host_.stats().committed_bytes, host_before) << "the host range stayed";
  bool logged = false;
  for (const std::string& line : f.log_) {
    logged |= line.find("releasing the session's memory failed") != std::string::npos;
  }
  EXPECT_TRUE(logged);
  f.host_.set_fault_hook(nullptr);
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(f.target_->verify(), "");
  EXPECT_EQ(f.host_.stats().committed_bytes, host_before);
}

// Guards: a device decommit that fails before anything was released taken for a release (the
// state disk over memory that is still committed) or not retried.
TEST(OffloaderErrorPathTest, ADecommitThatReleasesNothingKeepsTheSessionResident) {
  OffloaderFixture f(OffloaderFixture::Setup{
      .backend_faults = {FaultKind::kDecommitFails, 1, false}});  // injected: decommit call 1
  ASSERT_TRUE(f.command(12).ok());
  const uint64_t committed = f.sim_->stats().committed_bytes;
  f.pass(kIdleAfter);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident);
  EXPECT_EQ(status.counters.saves, 0u);
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_EQ(f.sim_->stats().committed_bytes, committed);
  f.pass(1);  // retried after the initial backoff; decommit call 2 succeeds
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->restored);
  EXPECT_EQ(f.target_->verify(), "");
}

// Guards: a release that stops half way (the second device range's decommit fails) taken for
// "nothing released" or for a full release, or a restore that commits a range that was never
// released (a double commit) or forgets one that was.
TEST(OffloaderErrorPathTest, AReleaseThatStopsHalfWayRestoresExactlyWhatItReleased) {
  MultiRangeOffloaderRig rig;
  ASSERT_TRUE(rig.ok());
  const uint64_t device_before = rig.f.sim_->stats().committed_bytes;
  const uint64_t first_range = rig.target->device_memory()[0].size;
  // Injected: the save's second decommit (the second device range) fails.
  rig.f.faulty_backend_->set_plan({FaultKind::kDecommitFails, 2, false});
  ASSERT_NO_FATAL_FAILURE(rig.sleep_after_a_command());
  OffloadStatus status = rig.offloader->status();
  EXPECT_EQ(status.counters.saves, 1u);
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_EQ(status.released_vram_bytes, first_range);
  EXPECT_EQ(rig.f.sim_->stats().committed_bytes, device_before - first_range);
  EXPECT_EQ(status.released_host_bytes, 0u) << "the release stops at the first failure";
  Result<Offloader::Lease> lease = rig.offloader->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(rig.target->verify(), "");
  EXPECT_EQ(rig.f.sim_->stats().committed_bytes, device_before);
  lease->release();
  // The next save releases everything.
  rig.f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(rig.state(), OffloadState::kDisk);
  EXPECT_EQ(rig.f.sim_->stats().committed_bytes,
            device_before - first_range - rig.target->device_memory()[1].size);
}

// Guards: a failed discard after a fallback handed out as a lease (the command would run on a
// history in an unknown state), or the phase left holding a command (every later command
// refused as "already running").
TEST(OffloaderErrorPathTest, ADiscardThatFailsAfterAFallbackIsADeviceErrorWithoutALease) {
  MultiRangeOffloaderRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_NO_FATAL_FAILURE(rig.sleep_after_a_command());
  std::filesystem::remove(rig.f.snapshot_path());  // the snapshot is gone: NotFound
  // Injected: discarding the history fails as a kernel error would.
  rig.target->discard_result = DeviceError("injected: discard failed");
  Result<Offloader::Lease> refused = rig.offloader->acquire();
  EXPECT_EQ(refused.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(refused.status().message().find("discarding the session's history failed"),
            std::string::npos)
      << refused.status().to_string();
  OffloadStatus status = rig.offloader->status();
  EXPECT_EQ(status.state, OffloadState::kResident) << "the memory is back; the command ended";
  EXPECT_EQ(status.counters.fallbacks[static_cast<size_t>(FallbackReason::kNotFound)], 1u);
  EXPECT_NE(status.last_error.find("injected: discard failed"), std::string::npos)
      << status.last_error;
  EXPECT_TRUE(rig.fatal.empty()) << "not a lost session";
  rig.target->discard_result = Status::Ok();
  Result<Offloader::Lease> next = rig.offloader->acquire();
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_FALSE(next->admission().restored);
  EXPECT_FALSE(next->admission().fallback.has_value()) << "resident: nothing to restore";
}

// Guards: the same after an expiry (a fresh session whose discard fails).
TEST(OffloaderErrorPathTest, ADiscardThatFailsAfterAnExpiryIsADeviceErrorWithoutALease) {
  MultiRangeOffloaderRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_NO_FATAL_FAILURE(rig.sleep_after_a_command());
  rig.f.pass(kExpireAfter - kIdleAfter);
  ASSERT_EQ(rig.state(), OffloadState::kExpired);
  // Injected: discarding the history fails as a kernel error would.
  rig.target->discard_result = DeviceError("injected: discard failed");
  Result<Offloader::Lease> refused = rig.offloader->acquire();
  EXPECT_EQ(refused.status().code(), StatusCode::kDeviceError);
  EXPECT_EQ(rig.state(), OffloadState::kResident);
  rig.target->discard_result = Status::Ok();
  EXPECT_TRUE(rig.offloader->acquire().ok()) << "no command is left holding the session";
}

// Guards: a file of another format version mapped to another fallback reason (the reader's
// Unsupported counted as corrupt or io_error).
TEST(OffloaderErrorPathTest, ASnapshotOfAnotherFormatVersionFallsBackAsUnsupported) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(9).ok());
  f.pass(kIdleAfter);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  {
    // The version: u32 little-endian at offset 8, after the magic (docs/SNAPSHOT_FORMAT.md).
    std::fstream file(f.snapshot_path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(8);
    const char version[4] = {static_cast<char>(snapshot::kFormatVersion + 1), 0, 0, 0};
    file.write(version, sizeof version);
  }
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  ASSERT_TRUE(admitted->fallback.has_value());
  EXPECT_EQ(*admitted->fallback, FallbackReason::kUnsupported)
      << fallback_reason_name(*admitted->fallback);
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.fallbacks[static_cast<size_t>(FallbackReason::kUnsupported)], 1u);
  EXPECT_EQ(f.target_->length(), 0u);
  EXPECT_EQ(f.target_->verify(), "");
  EXPECT_FALSE(f.snapshot_exists());
}

// Guards: a retire that fails (here its rename) leaving the snapshot in place, where it would
// be read again by the next restore: it is removed where it is instead.
TEST(OffloaderErrorPathTest, ARetireThatFailsRemovesTheSnapshotWhereItIs) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(9).ok());
  f.pass(kIdleAfter);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  // Injected: the retire's rename fails with EIO.
  f.fs_.set_plan({FsOp::kRename, 1, FsFaultKind::kIoError, false});
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->restored);
  EXPECT_FALSE(f.snapshot_exists());
  EXPECT_EQ(f.store_->disk_bytes().value(), 0u) << "removed, not renamed";
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.disk_bytes, 0u);
  EXPECT_EQ(status.counters.delete_failures, 0u);
}

}  // namespace
}  // namespace siesta
