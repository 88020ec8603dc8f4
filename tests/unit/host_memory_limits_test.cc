// Host address space at its limits: reservations no address space can hold (past SIZE_MAX
// once aligned, or larger than the machine's address space) are OutOfMemory, a drop the kernel
// refuses is its error, and an unreserve of something never reserved says so on stderr
// instead of aborting. HostVmm and ReservedRange pass those failures on unchanged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_address_space.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"

namespace siesta {
namespace {

using ::testing::HasSubstr;

constexpr size_t kHuge = size_t{1} << 62;  // more than any machine's user address space

TEST(HostMemoryLimitTest, AReservationNoAddressSpaceCanHoldIsOutOfMemory) {
  const size_t page = host_address_space::page_size();
  // Aligned, it would wrap around SIZE_MAX.
  const size_t almost_all = SIZE_MAX - page + 1;
  EXPECT_EQ(host_address_space::reserve(almost_all, 2 * page).status().code(),
            StatusCode::kOutOfMemory);
  const Result<std::byte*> huge = host_address_space::reserve(kHuge, page);
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(huge.status().message(), HasSubstr("address space"));

  HostVmm host;
  EXPECT_EQ(host.reserve(SIZE_MAX).status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(host.reserve(kHuge).status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(host.stats().reserved_bytes, 0u) << "nothing is counted for a failed reservation";
}

TEST(HostMemoryLimitTest, ADropTheKernelRefusesIsItsError) {
  // Page-aligned, but in the kernel's half of the address space: no mapping can go there.
  auto* kernel_half = reinterpret_cast<std::byte*>(uintptr_t{0xffff800000000000});
  const Status dropped = host_address_space::drop(kernel_half, host_address_space::page_size());
  EXPECT_FALSE(dropped.ok());
  EXPECT_THAT(dropped.message(), HasSubstr("mmap PROT_NONE MAP_FIXED"));
  EXPECT_TRUE(host_address_space::drop(kernel_half, 0).ok()) << "nothing to drop";
}

TEST(HostMemoryLimitTest, UnreservingWhatWasNeverReservedIsReportedNotFatal) {
  ::testing::internal::CaptureStderr();
  host_address_space::unreserve(reinterpret_cast<std::byte*>(uintptr_t{1}),
                                host_address_space::page_size());
  host_address_space::unreserve(nullptr, host_address_space::page_size());  // nothing at all
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("munmap of"));
}

TEST(HostMemoryLimitTest, AReservedRangeThatCannotBeReservedIsTheBackendsError) {
  std::unique_ptr<SimBackend> sim = SimBackend::create().value();
  EXPECT_EQ(ReservedRange::reserve(*sim, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReservedRange::reserve(*sim, kHuge).status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(sim->stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace siesta
