// MemoryBackendWrapper overrides nothing: every call reaches the wrapped backend, borrowed or
// owned, so a fault-injecting wrapper that changes one call leaves the others exactly as the
// backend's own. Staging buffers are the wrapped backend's and go back to it.
#include "core/memory/memory_backend_wrapper.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

SimBackendOptions small() {
  SimBackendOptions options;
  options.capacity_bytes = 16u << 20;
  options.granularity = 64u << 10;
  options.staging_buffer_bytes = 4096;
  options.staging_buffer_count = 2;
  return options;
}

void exercise(MemoryBackend& b, MemoryBackend& inner) {
  EXPECT_EQ(b.name(), inner.name());
  EXPECT_EQ(b.granularity(), inner.granularity());
  EXPECT_EQ(b.staging_buffer_bytes(), inner.staging_buffer_bytes());
  EXPECT_EQ(b.staging_buffer_count(), inner.staging_buffer_count());
  Result<DeviceRange> range = b.reserve(64u << 10);
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  ASSERT_TRUE(b.commit(*range).ok());
  EXPECT_EQ(inner.stats().committed_bytes, 64u << 10);
  EXPECT_EQ(b.stats().committed_bytes, 64u << 10);
  ASSERT_TRUE(b.zero(*range).ok());
  const std::vector<std::byte> pattern = test_util::make_pattern(5000, 3);
  ASSERT_TRUE(test_util::write_device(b, range->base, pattern).ok());
  Result<std::vector<std::byte>> back = test_util::read_device(b, range->base, pattern.size());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, pattern);
  ASSERT_TRUE(b.synchronize().ok());
  {
    Result<StagingBuffer> buffer = b.acquire_staging();
    ASSERT_TRUE(buffer.ok());
    Result<CopyTicket> ticket = b.copy_to_staging(range->base, 16, *buffer);
    ASSERT_TRUE(ticket.ok());
    EXPECT_TRUE(b.wait(*ticket).ok());
  }  // the buffer goes back to the inner backend's ring
  EXPECT_TRUE(inner.acquire_staging().ok());
  ASSERT_TRUE(b.decommit(*range).ok());
  EXPECT_EQ(inner.stats().committed_bytes, 0u);
  b.unreserve(*range);
  EXPECT_EQ(inner.stats().reserved_bytes, 0u);
  EXPECT_EQ(b.commit(*range).code(), inner.commit(*range).code()) << "errors unchanged";
}

TEST(MemoryBackendWrapperTest, EveryCallReachesTheBorrowedBackend) {
  std::unique_ptr<SimBackend> sim = SimBackend::create(small()).value();
  MemoryBackendWrapper wrapper(*sim);
  EXPECT_EQ(&wrapper.target(), sim.get());
  exercise(wrapper, *sim);
}

TEST(MemoryBackendWrapperTest, AnOwnedBackendLivesAsLongAsTheWrapper) {
  std::unique_ptr<SimBackend> sim = SimBackend::create(small()).value();
  SimBackend* inner = sim.get();
  MemoryBackendWrapper wrapper(std::move(sim));
  EXPECT_EQ(&wrapper.target(), inner);
  exercise(wrapper, *inner);
}

}  // namespace
}  // namespace siesta
