// copy_device_to_host / copy_host_to_device when the backend fails them: no staging buffers
// at all (Internal, never an endless loop), and a copy whose wait fails, early in the pipeline
// and at its last drain, in both directions: the copy's error is returned, and every staging
// buffer is back in the ring afterwards.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/device_copy.h"
#include "tests/support/failing_waits_backend.h"

namespace siesta {
namespace {

using test_util::FailingWaitsBackend;

class DeviceCopyFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimBackendOptions options;
    options.granularity = 64u << 10;
    options.staging_buffer_bytes = 4096;
    options.staging_buffer_count = 2;
    sim_ = SimBackend::create(options).value();
    range_ = ReservedRange::reserve(*sim_, 64u << 10).value();
    ASSERT_TRUE(sim_->commit(range_.range()).ok());
  }
  void TearDown() override { range_.reset(); }

  // Every buffer of the ring can be taken again: none was kept by a failed copy.
  void expect_ring_whole() {
    std::vector<StagingBuffer> taken;
    for (size_t i = 0; i < sim_->staging_buffer_count(); ++i) {
      Result<StagingBuffer> buffer = sim_->acquire_staging();
      ASSERT_TRUE(buffer.ok()) << "buffer " << i << ": " << buffer.status().to_string();
      taken.push_back(std::move(buffer).value());
    }
  }

  std::unique_ptr<SimBackend> sim_;
  ReservedRange range_;
};

TEST_F(DeviceCopyFaultTest, ABackendWithoutStagingBuffersIsAnInternalError) {
  FailingWaitsBackend empty(*sim_, 0, /*no_staging=*/true);
  std::vector<std::byte> host(100);
  EXPECT_EQ(copy_device_to_host(empty, range_.range().base, host).code(), StatusCode::kInternal);
  EXPECT_EQ(copy_host_to_device(empty, host, range_.range().base).code(), StatusCode::kInternal);
}

// Guards: a failed wait ignored (the bytes then copied from a buffer that never filled), or a
// staging buffer kept when the copy stops early.
TEST_F(DeviceCopyFaultTest, AWaitThatFailsIsTheCopysErrorInBothDirections) {
  std::vector<std::byte> host(5 * 4096 + 100);  // six staging copies, two in flight
  // Injected: the first wait (when the pipeline is full) and the last one (the final drain).
  for (uint64_t nth : {uint64_t{1}, uint64_t{6}}) {
    SCOPED_TRACE(nth);
    FailingWaitsBackend to_host(*sim_, nth);
    EXPECT_EQ(copy_device_to_host(to_host, range_.range().base, host).code(),
              StatusCode::kDeviceError);
    EXPECT_EQ(to_host.waits(), nth) << "the copy stops at the failed wait";
    expect_ring_whole();
    FailingWaitsBackend to_device(*sim_, nth);
    EXPECT_EQ(copy_host_to_device(to_device, host, range_.range().base).code(),
              StatusCode::kDeviceError);
    EXPECT_EQ(to_device.waits(), nth);
    expect_ring_whole();
  }
}

}  // namespace
}  // namespace siesta
