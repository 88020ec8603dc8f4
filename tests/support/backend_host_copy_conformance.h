// The MemoryBackend conformance suite, direct copies to and from registered host memory
// (register_host, copy_to_host, copy_from_host): bytes of any size and offset land where they
// should both ways, a copy outside registered memory or from uncommitted device memory is
// refused before anything is enqueued, and registration refuses what it must. A backend
// without direct copies must say Unsupported. Instantiated beside BackendConformance, with
// the same Traits:
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyHostCopies, BackendHostCopyConformance, MyTypes);
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/memory/host_address_space.h"
#include "core/memory/memory_backend.h"
#include "tests/support/backend_conformance_fixture.h"
#include "tests/support/backend_test_util.h"

namespace siesta::conformance {

// Page-aligned host memory for a test: mapped on construction, unmapped at the end.
class MappedHostPages {
 public:
  explicit MappedHostPages(size_t pages)
      : bytes_(pages * host_address_space::page_size()),
        data_(static_cast<std::byte*>(
            ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {
    if (data_ == MAP_FAILED) data_ = nullptr;
  }
  MappedHostPages(const MappedHostPages&) = delete;
  MappedHostPages& operator=(const MappedHostPages&) = delete;
  ~MappedHostPages() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  std::span<std::byte> bytes() const { return {data_, data_ == nullptr ? 0 : bytes_}; }

 private:
  size_t bytes_;
  std::byte* data_;
};

template <class Traits>
class BackendHostCopyConformance : public ConformanceFixture<Traits> {};

TYPED_TEST_SUITE_P(BackendHostCopyConformance);

TYPED_TEST_P(BackendHostCopyConformance, BytesOfAnySizeAndOffsetGoBothWays) {
  MemoryBackend& b = this->backend();
  MappedHostPages host(64);
  ASSERT_FALSE(host.bytes().empty());
  if (!b.copies_to_host()) {
    SIESTA_EXPECT_CODE(b.register_host(host.bytes()), StatusCode::kUnsupported);
    SIESTA_EXPECT_CODE(b.copy_to_host(0, 1, host.bytes().data()), StatusCode::kUnsupported);
    return;
  }
  SIESTA_ASSERT_OK(b.register_host(host.bytes()));
  const size_t device_bytes = host.bytes().size();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, device_bytes));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  uint64_t seed = 700;
  for (size_t size : {size_t{1}, size_t{4095}, size_t{65537}, device_bytes / 2}) {
    for (size_t offset : {size_t{0}, size_t{13}}) {
      SCOPED_TRACE("size " + std::to_string(size) + " at offset " + std::to_string(offset));
      // Device -> host.
      const std::vector<std::byte> pattern = test_util::make_pattern(size, ++seed);
      SIESTA_ASSERT_OK(test_util::write_device(b, r.range().base + offset, pattern));
      std::byte* into = host.bytes().data() + offset;
      SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket down,
                                  b.copy_to_host(r.range().base + offset, size, into));
      SIESTA_ASSERT_OK(b.wait(down));
      ASSERT_EQ(test_util::first_difference({into, size}, pattern), -1);
      // Host -> device, other bytes.
      const std::vector<std::byte> other = test_util::make_pattern(size, ++seed);
      std::memcpy(into, other.data(), size);
      SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket up,
                                  b.copy_from_host(into, size, r.range().base + offset));
      SIESTA_ASSERT_OK(b.wait(up));
      SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                  test_util::read_device(b, r.range().base + offset, size));
      ASSERT_EQ(test_util::first_difference(got, other), -1);
    }
  }
  SIESTA_EXPECT_OK(b.decommit(r.range()));
  b.unregister_host(host.bytes().data());
}

TYPED_TEST_P(BackendHostCopyConformance, CopiesOutsideRegisteredOrCommittedMemoryAreRefused) {
  MemoryBackend& b = this->backend();
  if (!b.copies_to_host()) return;  // the first test checks that such a backend refuses
  MappedHostPages host(4);
  MappedHostPages unregistered(1);
  const size_t page = host_address_space::page_size();
  SIESTA_ASSERT_OK(b.register_host(host.bytes().subspan(0, 2 * page)));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 2 * page));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  const DeviceAddress device = r.range().base;
  std::byte* registered = host.bytes().data();
  SIESTA_EXPECT_CODE(b.copy_to_host(device, 16, unregistered.bytes().data()),
                     StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.copy_from_host(unregistered.bytes().data(), 16, device),
                     StatusCode::kInvalidArgument);
  // Past the registration's end (the host pages after it are mapped, not registered).
  SIESTA_EXPECT_CODE(b.copy_to_host(device, 2, registered + 2 * page - 1),
                     StatusCode::kInvalidArgument);
  // Device memory reserved but not committed.
  SIESTA_ASSERT_OK(b.decommit(r.range()));
  SIESTA_EXPECT_CODE(b.copy_to_host(device, 16, registered), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.copy_from_host(registered, 16, device), StatusCode::kFailedPrecondition);
  // Unregistered again: refused.
  SIESTA_ASSERT_OK(b.commit(r.range()));
  b.unregister_host(registered);
  SIESTA_EXPECT_CODE(b.copy_to_host(device, 16, registered), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

TYPED_TEST_P(BackendHostCopyConformance, RegistrationRefusesPartialPagesAndOverlaps) {
  MemoryBackend& b = this->backend();
  if (!b.copies_to_host()) return;  // the first test checks that such a backend refuses
  MappedHostPages host(4);
  const size_t page = host_address_space::page_size();
  std::span<std::byte> all = host.bytes();
  SIESTA_EXPECT_CODE(b.register_host(all.subspan(1, page)), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.register_host(all.subspan(0, page + 1)), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.register_host(all.subspan(0, 0)), StatusCode::kInvalidArgument);
  SIESTA_ASSERT_OK(b.register_host(all.subspan(page, 2 * page)));
  SIESTA_EXPECT_CODE(b.register_host(all.subspan(0, 2 * page)), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.register_host(all.subspan(2 * page, 2 * page)),
                     StatusCode::kInvalidArgument);
  // Beside it, on either side: fine.
  SIESTA_EXPECT_OK(b.register_host(all.subspan(0, page)));
  SIESTA_EXPECT_OK(b.register_host(all.subspan(3 * page, page)));
  for (size_t p : {size_t{0}, size_t{1}, size_t{3}}) b.unregister_host(all.data() + p * page);
}

REGISTER_TYPED_TEST_SUITE_P(BackendHostCopyConformance, BytesOfAnySizeAndOffsetGoBothWays,
                            CopiesOutsideRegisteredOrCommittedMemoryAreRefused,
                            RegistrationRefusesPartialPagesAndOverlaps);

}  // namespace siesta::conformance
