// The fixture of the MemoryBackend conformance suites (backend_conformance.h: address space,
// commits and misuse; backend_copy_conformance.h: the staging ring, copies and their order
// with device work), and BackendUnderTest: how a backend is presented to them, with the
// outside views (measured memory, the driver's or OS's view of an address) that let the suites
// check what the device really did rather than what the backend says.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/commit_fault_hook.h"
#include "core/memory/memory_backend.h"
#include "tests/support/backend_test_util.h"

namespace siesta::conformance {

struct BackendUnderTest {
  std::unique_ptr<MemoryBackend> owner;  // keeps everything alive (may own an inner backend)
  MemoryBackend* backend = nullptr;      // what the suite tests; null => GTEST_SKIP()
  std::string skip_reason;
  // Memory the backend really holds, measured from outside it: process RSS for the
  // simulator, device total - free (cuMemGetInfo) for CUDA.
  std::function<uint64_t()> measured_used_bytes;
  // How far that measurement may move for reasons other than the backend, beyond one
  // granule: process RSS also counts pages other threads touch meanwhile (the allocator,
  // and AddressSanitizer's shadow), so the simulator allows a few; cuMemGetInfo is exact.
  uint64_t measurement_slack_bytes = 0;
  // Arms the backend's CommitFaultHook so that the next commit fails before `step` of chunk
  // `chunk_index` (empty if not supported); commit_hook_calls() lists the (step, chunk) pairs
  // the hook was asked about since it was last armed.
  std::function<void(CommitStep step, size_t chunk_index)> fail_next_commit_at;
  std::function<std::vector<std::pair<CommitStep, size_t>>()> commit_hook_calls;
  bool stray_access_faults_in_process = false;  // sim: a death test proves it
  size_t max_chunk_bytes = 0;                   // so the suite can make multi-chunk commits

  // The driver's (CUDA: cuPointerGetAttribute) or the OS's (sim: /proc/self/maps) own view of
  // an address, asked without the backend: whether physical memory backs it, and (CUDA) where
  // the reservation holding a backed address starts. Empty where it cannot be asked.
  std::function<bool(DeviceAddress)> backed_by_memory;
  std::function<DeviceAddress(DeviceAddress)> reservation_start;
  // The OS's count of the bytes of `range` resident in memory (sim: mincore), asked without
  // the backend: unlike the process's RSS, no other allocation moves it. Empty where it
  // cannot be asked.
  std::function<uint64_t(DeviceRange range)> resident_bytes_in;

  // Device work on a stream that is not the backend's copy stream -- as a kernel is -- that
  // fills `range` with `value` (sim: enqueue_work; CUDA: cuMemsetD8Async on a stream of the
  // test's own). The contract: a staging copy sees it only once it is ordered after it
  // (synchronize()).
  std::function<Status(DeviceRange range, std::byte value)> fill_on_another_stream;
  // The backend runs such work as late as it may (the simulator's hazards): a copy not
  // ordered after it reads the bytes from before it, every time. On a GPU it may or may not.
  bool unordered_work_runs_late = false;
  // What every byte of freshly committed memory holds (the simulator's poison); nullopt: the
  // contract's "unspecified" (a GPU leaves whatever was there).
  std::optional<std::byte> fresh_memory_byte;
};

// The fixture both suites share: a fresh backend per test (Traits::make()), skipped with the
// reason where the backend cannot run here.
template <class Traits>
class ConformanceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    under_test_ = Traits::make();
    if (under_test_.backend == nullptr) GTEST_SKIP() << under_test_.skip_reason;
  }

  MemoryBackend& backend() { return *under_test_.backend; }
  size_t g() { return backend().granularity(); }
  // What a measured release may fall short by: one granule plus the rig's noise.
  uint64_t slack() { return g() + under_test().measurement_slack_bytes; }
  const BackendUnderTest& under_test() const { return under_test_; }

  // A commit of several chunks when the backend says how large a chunk is, capped so that
  // copying it many times stays quick; else `fallback` bytes.
  size_t multi_chunk_bytes(size_t fallback) {
    const size_t chunk = under_test_.max_chunk_bytes;
    if (chunk != 0 && 2 * chunk + g() <= (64u << 20)) return 2 * chunk + g();
    return test_util::round_up(fallback, g());
  }

  // Checks the figures that a refused call must leave alone.
  void expect_same_accounting(const MemoryStats& before) {
    const MemoryStats now = backend().stats();
    EXPECT_EQ(now.reserved_bytes, before.reserved_bytes);
    EXPECT_EQ(now.committed_bytes, before.committed_bytes);
  }

  // Writes pattern `seed` over `range` and checks it reads back.
  void write_and_verify(DeviceRange range, uint64_t seed) {
    const std::vector<std::byte> pattern = test_util::make_pattern(range.size, seed);
    SIESTA_ASSERT_OK(test_util::write_device(backend(), range.base, pattern));
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                test_util::read_device(backend(), range.base, range.size));
    ASSERT_EQ(test_util::first_difference(got, pattern), -1) << "seed " << seed;
  }

  void expect_contents(DeviceRange range, uint64_t seed) {
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                test_util::read_device(backend(), range.base, range.size));
    EXPECT_EQ(test_util::first_difference(got, test_util::make_pattern(range.size, seed)), -1)
        << "seed " << seed;
  }

  BackendUnderTest under_test_;
};

}  // namespace siesta::conformance
