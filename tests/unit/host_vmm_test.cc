// HostVmm: host checkpoint memory that really leaves the process while a session sleeps and
// comes back, zeroed, at the same address.
#include "core/memory/host_vmm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/memory/host_address_space.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

constexpr size_t kMebibyte = 1024 * 1024;

size_t resident() { return host_address_space::resident_bytes().value(); }

TEST(HostVmmTest, ReserveRoundsUpToPagesAndCommitsNothing) {
  HostVmm vmm;
  SIESTA_EXPECT_CODE(vmm.reserve(0), StatusCode::kInvalidArgument);
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(HostVmm::page_size() + 1));
  EXPECT_EQ(range.size(), 2 * HostVmm::page_size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(range.data()) % HostVmm::page_size(), 0u);
  EXPECT_FALSE(range.committed());
  EXPECT_EQ(vmm.stats().reserved_bytes, range.size());
  EXPECT_EQ(vmm.stats().committed_bytes, 0u);
}

TEST(HostVmmTest, CommitReleaseCommitKeepsTheAddressAndZeroesTheData) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(1 * kMebibyte));
  std::byte* const address = range.data();
  for (int cycle = 0; cycle < 5; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    SIESTA_ASSERT_OK(range.commit());
    EXPECT_EQ(range.data(), address);
    // Fresh pages: whatever the previous cycle wrote is gone.
    EXPECT_TRUE(std::all_of(range.bytes().begin(), range.bytes().end(),
                            [](std::byte b) { return b == std::byte{0}; }));
    const auto pattern = test_util::make_pattern(range.size(), cycle);
    std::memcpy(range.data(), pattern.data(), pattern.size());
    EXPECT_EQ(std::memcmp(range.data(), pattern.data(), pattern.size()), 0);
    SIESTA_ASSERT_OK(range.release());
    EXPECT_EQ(range.data(), address);
  }
}

TEST(HostVmmTest, StatsFollowCommitReleaseAndDestruction) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange a, vmm.reserve(1 * kMebibyte));
  {
    SIESTA_ASSERT_OK_AND_ASSIGN(HostRange b, vmm.reserve(2 * kMebibyte));
    EXPECT_EQ(vmm.stats().reserved_bytes, 3 * kMebibyte);
    SIESTA_ASSERT_OK(a.commit());
    SIESTA_ASSERT_OK(b.commit());
    EXPECT_EQ(vmm.stats().committed_bytes, 3 * kMebibyte);
    SIESTA_ASSERT_OK(a.release());
    EXPECT_EQ(vmm.stats().committed_bytes, 2 * kMebibyte);
    // Moving a range moves its accounting with it, once.
    HostRange moved = std::move(b);
    EXPECT_EQ(vmm.stats().committed_bytes, 2 * kMebibyte);
    EXPECT_TRUE(moved.committed());
  }  // destroyed while committed
  EXPECT_EQ(vmm.stats().reserved_bytes, 1 * kMebibyte);
  EXPECT_EQ(vmm.stats().committed_bytes, 0u);
}

TEST(HostVmmTest, MisuseIsAnErrorAndChangesNothing) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(1 * kMebibyte));
  SIESTA_EXPECT_CODE(range.release(), StatusCode::kFailedPrecondition);  // never committed
  EXPECT_EQ(vmm.stats().committed_bytes, 0u);
  SIESTA_ASSERT_OK(range.commit());
  range.data()[0] = std::byte{7};
  SIESTA_EXPECT_CODE(range.commit(), StatusCode::kFailedPrecondition);  // already committed
  EXPECT_EQ(range.data()[0], std::byte{7});  // the double commit did not replace the pages
  EXPECT_EQ(vmm.stats().committed_bytes, 1 * kMebibyte);
  HostRange moved = std::move(range);
  SIESTA_EXPECT_CODE(range.commit(),
                     StatusCode::kFailedPrecondition);  // NOLINT(bugprone-use-after-move)
  SIESTA_EXPECT_CODE(range.release(), StatusCode::kFailedPrecondition);  // NOLINT
  EXPECT_EQ(vmm.stats().committed_bytes, 1 * kMebibyte);
}

// Host memory never returned after a release (other systems kept it after a wake).
TEST(HostVmmTest, ResidentSetFallsAfterRelease) {
  HostVmm vmm;
  const size_t bytes = 32 * kMebibyte;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(bytes));
  SIESTA_ASSERT_OK(range.commit());
  std::memset(range.data(), 0x5a, bytes);
  const size_t touched = resident();
  SIESTA_ASSERT_OK(range.release());
  const size_t released = resident();
  EXPECT_GE(touched, released + bytes - 1 * kMebibyte)
      << "RSS went from " << touched << " to " << released << " after releasing " << bytes;
}

TEST(HostVmmTest, AccessAfterReleaseFaults) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(1 * kMebibyte));
  SIESTA_ASSERT_OK(range.commit());
  auto* bytes = reinterpret_cast<volatile unsigned char*>(range.data());
  bytes[0] = 1;
  SIESTA_ASSERT_OK(range.release());
  EXPECT_DEATH(bytes[0] = 1, "");
  EXPECT_DEATH(bytes[range.size() - 1] = 1, "");
  // Never committed at all faults the same way.
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange fresh, vmm.reserve(1 * kMebibyte));
  auto* never = reinterpret_cast<volatile unsigned char*>(fresh.data());
  EXPECT_DEATH(never[0] = 1, "");
}

TEST(HostAddressSpaceTest, ReserveHonoursLargeAlignmentAndRejectsBadArguments) {
  const size_t page = host_address_space::page_size();
  for (int i = 0; i < 4; ++i) {  // the kernel's placement varies; alignment must not
    SIESTA_ASSERT_OK_AND_ASSIGN(std::byte * base,
                                host_address_space::reserve(2 * kMebibyte, 2 * kMebibyte));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (2 * kMebibyte), 0u);
    SIESTA_EXPECT_CODE(host_address_space::drop(base + 1, page), StatusCode::kInvalidArgument);
    SIESTA_EXPECT_OK(host_address_space::drop(base, 2 * kMebibyte));
    host_address_space::unreserve(base, 2 * kMebibyte);
  }
  SIESTA_EXPECT_CODE(host_address_space::reserve(0, page), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(host_address_space::reserve(page, 3 * page), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(host_address_space::reserve(page + 1, page), StatusCode::kInvalidArgument);
  SIESTA_ASSERT_OK_AND_ASSIGN(size_t resident, host_address_space::resident_bytes());
  EXPECT_GT(resident, 0u);
}

}  // namespace
}  // namespace siesta
