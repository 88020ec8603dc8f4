// What is CUDA's own beyond the MemoryBackend contract: the primary context is retained and
// released across backends, and a whole GiB goes through the default staging ring. The
// contract itself -- addresses kept across decommit + commit and the driver agreeing, free
// memory following commits, out-of-memory and half-done commits rolled back, misuse refused,
// copies ordered, threads -- is checked by the conformance suites
// (cuda_backend_conformance_test.cc). Every test skips, printing why, where CUDA is
// unavailable.
#include "backends/cuda_vmm/cuda_vmm_backend.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory/device_copy.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

class CudaVmmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = CudaVmmBackend::unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }

  static std::unique_ptr<CudaVmmBackend> make(CudaVmmOptions options = {}) {
    auto backend = CudaVmmBackend::create(std::move(options));
    EXPECT_TRUE(backend.ok()) << backend.status().to_string();
    return backend.ok() ? std::move(backend).value() : nullptr;
  }
};

TEST_F(CudaVmmBackendTest, CreateAndDestroy) {
  for (int round = 0; round < 2; ++round) {  // the primary context is retained and released
    auto backend = make();
    ASSERT_NE(backend, nullptr);
    EXPECT_EQ(backend->name(), "cuda");
    EXPECT_GE(backend->granularity(), 2 * kMiB) << "the H200 reports 2 MiB";
    EXPECT_EQ(backend->staging_buffer_count(), CudaVmmOptions{}.staging_buffer_count);
    MemoryStats stats = backend->stats();
    EXPECT_EQ(stats.reserved_bytes, 0u);
    EXPECT_EQ(stats.committed_bytes, 0u);
    EXPECT_GT(stats.device_total_bytes, 0u);
    EXPECT_GT(stats.device_free_bytes, 0u);
    EXPECT_LE(stats.device_free_bytes, stats.device_total_bytes);
  }
}

// A whole GiB through the staging ring both ways, every byte compared. (How fast: see
// bench/staging_copy_bench.cc; tests assert behaviour, benchmarks measure speed.)
TEST_F(CudaVmmBackendTest, OneGiBRoundTripsThroughTheStagingRing) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  auto range = backend->reserve(kGiB);
  ASSERT_TRUE(range.ok());
  ASSERT_TRUE(backend->commit(*range).ok());
  const std::vector<std::byte> want = test_util::make_pattern(range->size, 2);
  ASSERT_TRUE(copy_host_to_device(*backend, want, range->base).ok());
  std::vector<std::byte> host(range->size);
  ASSERT_TRUE(copy_device_to_host(*backend, range->base, host).ok());
  EXPECT_EQ(test_util::first_difference(want, host), -1);
  ASSERT_TRUE(backend->decommit(*range).ok());
  backend->unreserve(*range);
}

}  // namespace
}  // namespace siesta
