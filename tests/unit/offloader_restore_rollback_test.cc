// A restore that runs out of memory half way through committing the session's ranges gives
// back what it had committed: the backend and HostVmm hold what they held asleep, the state
// stays disk with the snapshot kept, and a later restore commits every range again and
// returns every byte. The session here has two device reservations and two host ranges
// (MultiRangeOffloadTarget), so the failing commit always has an earlier one to undo.
#include <gtest/gtest.h>

#include <string>

#include "core/offload/offloader.h"
#include "tests/support/multi_range_offloader_rig.h"

namespace siesta {
namespace {

using MultiRangeRig = test_util::MultiRangeOffloaderRig;

// The refused restore left everything as it was asleep; a later one restores every byte.
void expect_rolled_back_then_restored(MultiRangeRig& rig, uint64_t device_asleep,
                                      uint64_t host_asleep) {
  EXPECT_EQ(rig.f.sim_->stats().committed_bytes, device_asleep)
      << "the device ranges committed before the failure are decommitted again";
  EXPECT_EQ(rig.f.host_.stats().committed_bytes, host_asleep)
      << "the host ranges committed before the failure are released again";
  OffloadStatus status = rig.offloader->status();
  EXPECT_EQ(status.state, OffloadState::kDisk);
  EXPECT_FALSE(status.memory_lost);
  EXPECT_EQ(status.counters.out_of_memory_retries, 1u);
  EXPECT_NE(status.last_error.find("injected"), std::string::npos) << status.last_error;
  EXPECT_TRUE(rig.f.snapshot_exists()) << "the snapshot is kept for the next command";
  EXPECT_TRUE(rig.fatal.empty());

  Result<Offloader::Lease> lease = rig.offloader->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(rig.target->verify(), "");
  EXPECT_EQ(rig.target->generation(), 1u);
  lease->release();
  EXPECT_EQ(rig.offloader->status().counters.restore_hits, 1u);
}

// Guards: the first device range left committed when the second one's commit fails (the
// rollback of commit_released_memory skipped), or the rolled-back range no longer marked
// released (the later restore would not commit it again and could not copy into it).
TEST(OffloaderRestoreRollbackTest, ASecondDeviceCommitOutOfMemoryDecommitsTheFirst) {
  MultiRangeRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_NO_FATAL_FAILURE(rig.sleep_after_a_command());
  const uint64_t device_asleep = rig.f.sim_->stats().committed_bytes;
  const uint64_t host_asleep = rig.f.host_.stats().committed_bytes;
  // Injected: the restore's second commit (the second device range) is out of memory.
  rig.f.faulty_backend_->set_plan({FaultKind::kCommitOutOfMemory, 2, false});
  Result<Offloader::Lease> refused = rig.offloader->acquire();
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory) << refused.status().to_string();
  EXPECT_EQ(rig.f.faulty_backend_->counters().faults_fired, 1u);
  EXPECT_EQ(rig.f.faulty_backend_->counters().commit_calls, 2u);
  expect_rolled_back_then_restored(rig, device_asleep, host_asleep);
}

// Guards: a host range committed before a later host range's commit fails left committed, or
// the device ranges (all committed by then) left committed.
TEST(OffloaderRestoreRollbackTest, ASecondHostCommitOutOfMemoryGivesEverythingBack) {
  MultiRangeRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_NO_FATAL_FAILURE(rig.sleep_after_a_command());
  const uint64_t device_asleep = rig.f.sim_->stats().committed_bytes;
  const uint64_t host_asleep = rig.f.host_.stats().committed_bytes;
  // Injected: the restore's second host commit fails as the kernel refusing pages would.
  int host_commits = 0;
  rig.f.host_.set_fault_hook([&](HostVmmCall call, const HostRange&) {
    if (call != HostVmmCall::kCommit || ++host_commits != 2) return Status::Ok();
    return OutOfMemory("injected: host commit 2 refused");
  });
  Result<Offloader::Lease> refused = rig.offloader->acquire();
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory) << refused.status().to_string();
  EXPECT_EQ(host_commits, 2);
  EXPECT_EQ(rig.f.faulty_backend_->counters().commit_calls, 2u) << "both device ranges first";
  rig.f.host_.set_fault_hook(nullptr);
  expect_rolled_back_then_restored(rig, device_asleep, host_asleep);
}

// Guards: a partial commit (the backend rolled back its own range and said DeviceError) taken
// for out of memory. The memory cannot be mapped back safely: the session is lost, said once,
// and the ranges committed before it are given back all the same.
TEST(OffloaderRestoreRollbackTest, ASecondCommitThatFailsOtherwiseLosesTheSession) {
  MultiRangeRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_NO_FATAL_FAILURE(rig.sleep_after_a_command());
  const uint64_t device_asleep = rig.f.sim_->stats().committed_bytes;
  // Injected: the second device range's commit fails half way (the backend's own rollback).
  rig.f.faulty_backend_->set_plan({FaultKind::kPartialCommit, 2, false});
  Result<Offloader::Lease> refused = rig.offloader->acquire();
  EXPECT_EQ(refused.status().code(), StatusCode::kDeviceError);
  ASSERT_EQ(rig.fatal.size(), 1u);
  EXPECT_TRUE(rig.offloader->status().memory_lost);
  EXPECT_EQ(rig.f.sim_->stats().committed_bytes, device_asleep);
  EXPECT_EQ(rig.offloader->acquire().status().code(), StatusCode::kDeviceError);
  EXPECT_EQ(rig.fatal.size(), 1u);
}

}  // namespace
}  // namespace siesta
