// Released bytes are each session's own: two sessions on one device, one restoring while the
// other releases. The released figures (released_vram_bytes, released_host_bytes) once were
// the device's committed totals before minus after the release, so another session's commit
// in between was subtracted from this one's (here: its figures read 0 instead of its ranges'
// sizes; with a larger session beside it they would wrap around). Now they are the sizes of the
// ranges whose decommit the backend reported done, which the device's own totals confirm
// whenever only one session moves.
#include <gtest/gtest.h>

#include <memory>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::FakeOffloadTarget;
using test_util::OffloaderFixture;

uint64_t device_bytes(const FakeOffloadTarget& target) {
  uint64_t bytes = 0;
  for (const DeviceRange& range : target.device_memory()) {
    bytes += range.size;
  }
  return bytes;
}

uint64_t host_bytes(FakeOffloadTarget& target) {
  uint64_t bytes = 0;
  for (HostRange* range : target.host_memory()) bytes += range->size();
  return bytes;
}

TEST(OffloaderReleaseCountTest, OneSessionsReleaseIsItsOwnWhileAnotherRestores) {
  OffloaderFixture f;
  test_util::NeighbourSession b(f, "1", /*seed=*/1);
  ASSERT_TRUE(f.command(40).ok());
  {
    Result<Offloader::Lease> lease = b.offloader->acquire();
    ASSERT_TRUE(lease.ok());
    b.target->advance(40);
  }
  // Session b goes to disk alone: its figures are what the device says it gave back.
  const MemoryStats before_b = f.sim_->stats();
  const HostVmmStats host_before_b = f.host_.stats();
  ASSERT_TRUE(b.offloader->evict().ok());
  const OffloadStatus b_saved = b.offloader->status();
  EXPECT_EQ(b_saved.released_vram_bytes, device_bytes(*b.target));
  EXPECT_EQ(b_saved.released_vram_bytes,
            before_b.committed_bytes - f.sim_->stats().committed_bytes);
  EXPECT_EQ(b_saved.released_host_bytes, host_bytes(*b.target));
  EXPECT_EQ(b_saved.released_host_bytes,
            host_before_b.committed_bytes - f.host_.stats().committed_bytes);

  // Injected: session b's command restores it (commits its device and host memory) in the
  // middle of session a's release, between a's first decommit and its host release.
  bool restored = false;
  f.hooked_backend_->set_decommit_hooks(
      [&](DeviceRange) {
        if (restored) return;
        restored = true;
        Result<Offloader::Lease> lease = b.offloader->acquire();
        ASSERT_TRUE(lease.ok()) << lease.status().to_string();
        EXPECT_TRUE(lease->admission().restored);
      },
      {});
  f.pass(OffloaderFixture::kIdle);
  ASSERT_TRUE(restored) << "session a's release never decommitted";
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  const OffloadStatus a = f.offloader_->status();
  EXPECT_EQ(a.released_vram_bytes, device_bytes(*f.target_))
      << "session b's restore counted against session a's release";
  EXPECT_EQ(a.released_host_bytes, host_bytes(*f.target_));
  EXPECT_EQ(b.target->verify(), "") << "session b restored every byte";
  // And session a comes back whole.
  Result<Offloader::Lease> back = f.offloader_->acquire();
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->admission().restored);
  EXPECT_EQ(f.target_->verify(), "");
}

}  // namespace
}  // namespace siesta
