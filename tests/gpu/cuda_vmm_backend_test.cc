// CudaVmmBackend on a real device: addresses survive decommit + commit, data survives the
// staging ring over many cycles, the device's own free-memory figure follows commits and
// decommits, out-of-memory and half-done commits roll back, and misuse is refused before
// it reaches the driver. Every test skips, printing why, where CUDA is unavailable.
#include "backends/cuda_vmm/cuda_vmm_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/memory/device_copy.h"
#include "tests/gpu/device_probe.h"

namespace siesta {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// |a - b| <= tolerance, printed when not.
::testing::AssertionResult Near(uint64_t a, uint64_t b, uint64_t tolerance) {
  const uint64_t diff = a > b ? a - b : b - a;
  if (diff <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << a << " and " << b << " differ by " << diff << " bytes (more than " << tolerance << ")";
}

// A per-cycle pattern: every byte depends on its offset and on the cycle.
std::vector<std::byte> pattern(size_t bytes, uint64_t cycle) {
  std::vector<std::byte> out(bytes);
  uint64_t state = 0x9e3779b97f4a7c15ull * (cycle + 1);
  for (size_t i = 0; i < bytes; i += sizeof(uint64_t)) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min(sizeof z, bytes - i));
  }
  return out;
}

// Compares every byte; names the first difference.
::testing::AssertionResult SameBytes(std::span<const std::byte> want,
                                     std::span<const std::byte> got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes " << want.size() << " vs " << got.size();
  }
  if (std::memcmp(want.data(), got.data(), want.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t i = 0;
  while (want[i] == got[i]) ++i;
  return ::testing::AssertionFailure()
         << "first difference at byte " << i << ": want " << static_cast<int>(want[i]) << ", got "
         << static_cast<int>(got[i]);
}

class CudaVmmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = CudaVmmBackend::unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    probe_ = std::make_unique<test_util::DeviceProbe>();
  }

  static std::unique_ptr<CudaVmmBackend> make(CudaVmmOptions options = {}) {
    auto backend = CudaVmmBackend::create(std::move(options));
    EXPECT_TRUE(backend.ok()) << backend.status().to_string();
    return backend.ok() ? std::move(backend).value() : nullptr;
  }

  static std::vector<std::byte> read(MemoryBackend& backend, DeviceAddress at, size_t bytes) {
    std::vector<std::byte> out(bytes);
    Status status = copy_device_to_host(backend, at, out);
    EXPECT_TRUE(status.ok()) << status.to_string();
    return out;
  }

  static void write(MemoryBackend& backend, DeviceAddress at, std::span<const std::byte> bytes) {
    Status status = copy_host_to_device(backend, bytes, at);
    EXPECT_TRUE(status.ok()) << status.to_string();
  }

  std::unique_ptr<test_util::DeviceProbe> probe_;
};

TEST_F(CudaVmmBackendTest, CreateAndDestroy) {
  for (int round = 0; round < 2; ++round) {  // the primary context is retained and released
    auto backend = make();
    ASSERT_NE(backend, nullptr);
    EXPECT_EQ(backend->name(), "cuda");
    EXPECT_GE(backend->granularity(), 2 * kMiB) << "ANCHORS.md: 2 MiB on the H200";
    EXPECT_EQ(backend->staging_buffer_count(), CudaVmmOptions{}.staging_buffer_count);
    MemoryStats stats = backend->stats();
    EXPECT_EQ(stats.reserved_bytes, 0u);
    EXPECT_EQ(stats.committed_bytes, 0u);
    EXPECT_GT(stats.device_total_bytes, 0u);
    EXPECT_GT(stats.device_free_bytes, 0u);
    EXPECT_LE(stats.device_free_bytes, stats.device_total_bytes);
  }
}

TEST_F(CudaVmmBackendTest, SameAddressAfterDecommitAndCommit) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  auto range = backend->reserve(64 * kMiB);
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  EXPECT_EQ(range->size, 64 * kMiB);
  EXPECT_EQ(range->base % backend->granularity(), 0u);
  EXPECT_FALSE(probe_->mapped(range->base)) << "reserved only";

  ASSERT_TRUE(backend->commit(*range).ok());
  EXPECT_TRUE(probe_->mapped(range->base));
  EXPECT_EQ(probe_->range_start(range->base + 5 * kMiB), range->base);
  EXPECT_EQ(probe_->mapped_range(range->base + kMiB), *range) << "one chunk under 1 GiB";

  ASSERT_TRUE(backend->decommit(*range).ok());
  EXPECT_FALSE(probe_->mapped(range->base)) << "physical memory gone";
  EXPECT_FALSE(probe_->mapped(range->end() - 1));
  EXPECT_EQ(backend->stats().reserved_bytes, range->size) << "address kept";

  ASSERT_TRUE(backend->commit(*range).ok());
  EXPECT_TRUE(probe_->mapped(range->base));
  EXPECT_EQ(probe_->range_start(range->base + 5 * kMiB), range->base);
  EXPECT_EQ(probe_->mapped_range(range->base + kMiB), *range);
  backend->unreserve(*range);
  EXPECT_EQ(backend->stats().reserved_bytes, 0u);
}

TEST_F(CudaVmmBackendTest, DataSurvivesTwentyCyclesThroughStaging) {
  CudaVmmOptions options;
  options.staging_buffer_bytes = 4 * kMiB;
  options.staging_buffer_count = 4;
  options.max_chunk_bytes = 16 * kMiB;  // several chunks per commit
  auto backend = make(options);
  ASSERT_NE(backend, nullptr);
  auto range = backend->reserve(40 * kMiB);
  ASSERT_TRUE(range.ok());
  const size_t bytes = range->size - 123;  // the last staging copy is a partial one
  ASSERT_TRUE(backend->commit(*range).ok());

  for (uint64_t cycle = 0; cycle < 20; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const std::vector<std::byte> want = pattern(bytes, cycle);
    write(*backend, range->base, want);
    const std::vector<std::byte> snapshot = read(*backend, range->base, bytes);
    ASSERT_TRUE(SameBytes(want, snapshot));

    ASSERT_TRUE(backend->decommit(*range).ok());
    EXPECT_EQ(backend->stats().committed_bytes, 0u);
    ASSERT_TRUE(backend->commit(*range).ok());
    EXPECT_EQ(probe_->range_start(range->base), range->base);
    write(*backend, range->base, snapshot);
    ASSERT_TRUE(SameBytes(want, read(*backend, range->base, bytes)));
  }
}

TEST_F(CudaVmmBackendTest, ZeroClearsEveryByte) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  auto range = backend->reserve(8 * kMiB);
  ASSERT_TRUE(range.ok());
  ASSERT_TRUE(backend->commit(*range).ok());
  write(*backend, range->base, pattern(range->size, 7));
  ASSERT_TRUE(backend->zero(range->subrange(kMiB, 6 * kMiB)).ok());
  ASSERT_TRUE(backend->synchronize().ok());
  std::vector<std::byte> got = read(*backend, range->base, range->size);
  std::vector<std::byte> want = pattern(range->size, 7);
  std::memset(want.data() + kMiB, 0, 6 * kMiB);
  EXPECT_TRUE(SameBytes(want, got));
}

TEST_F(CudaVmmBackendTest, WaitingForALaterTicketCoversEarlierCopies) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  const size_t n = backend->staging_buffer_count();
  const size_t each = 1 * kMiB;
  auto range = backend->reserve(n * each);
  ASSERT_TRUE(range.ok());
  ASSERT_TRUE(backend->commit(*range).ok());
  const std::vector<std::byte> want = pattern(range->size, 3);
  write(*backend, range->base, want);

  std::vector<StagingBuffer> buffers;
  CopyTicket last;
  for (size_t i = 0; i < n; ++i) {
    auto buffer = backend->acquire_staging();
    ASSERT_TRUE(buffer.ok());
    buffers.push_back(std::move(*buffer));
    auto ticket = backend->copy_to_staging(range->base + i * each, each, buffers.back());
    ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
    EXPECT_GT(ticket->sequence, last.sequence) << "tickets grow in submission order";
    last = *ticket;
  }
  EXPECT_EQ(backend->acquire_staging().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(backend->wait(last).ok());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(SameBytes(std::span(want).subspan(i * each, each), buffers[i].bytes().first(each)))
        << "buffer " << i;
  }
  buffers.clear();
  EXPECT_TRUE(backend->acquire_staging().ok()) << "given back";
}

// Prints, asserts nothing: how fast whole-region copies go through the default staging ring
// (ANCHORS.md: pinned copies reach ~55 GB/s on the H200; device_copy's host memcpy caps this).
// A whole GiB through the staging ring both ways, every byte compared. (How fast: see
// bench/staging_copy_bench.cc; tests assert behaviour, benchmarks measure speed.)
TEST_F(CudaVmmBackendTest, OneGiBRoundTripsThroughTheStagingRing) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  auto range = backend->reserve(kGiB);
  ASSERT_TRUE(range.ok());
  ASSERT_TRUE(backend->commit(*range).ok());
  std::vector<std::byte> host = pattern(range->size, 2);
  ASSERT_TRUE(copy_host_to_device(*backend, host, range->base).ok());
  std::fill(host.begin(), host.end(), std::byte{0});
  ASSERT_TRUE(copy_device_to_host(*backend, range->base, host).ok());
  EXPECT_TRUE(SameBytes(pattern(range->size, 2), host));
  ASSERT_TRUE(backend->decommit(*range).ok());
  backend->unreserve(*range);
}

TEST_F(CudaVmmBackendTest, DeviceFreeMemoryFollowsCommitAndDecommit) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  const uint64_t g = backend->granularity();
  const size_t size = 512 * kMiB;
  auto range = backend->reserve(size);
  ASSERT_TRUE(range.ok());

  const uint64_t before = probe_->free_bytes();
  ASSERT_TRUE(backend->commit(*range).ok());
  const uint64_t committed = probe_->free_bytes();
  EXPECT_TRUE(Near(before - committed, size, g)) << "commit takes the committed bytes";
  EXPECT_EQ(backend->stats().committed_bytes, size);

  ASSERT_TRUE(backend->decommit(*range).ok());
  const uint64_t released = probe_->free_bytes();
  EXPECT_TRUE(Near(released - committed, size, g)) << "decommit gives them back (bug 6)";
  EXPECT_TRUE(Near(released, before, g));
  EXPECT_TRUE(Near(backend->stats().device_free_bytes, released, g));
  EXPECT_EQ(backend->stats().committed_bytes, 0u);
  std::cout << "free before/committed/released: " << before << " / " << committed << " / "
            << released << "\n";
}

TEST_F(CudaVmmBackendTest, CommitBeyondFreeMemoryIsOutOfMemoryAndRollsBack) {
  CudaVmmOptions options;
  options.max_chunk_bytes = kGiB;
  auto backend = make(options);
  ASSERT_NE(backend, nullptr);
  const uint64_t before = probe_->free_bytes();
  auto range = backend->reserve(before + 2 * kGiB);
  ASSERT_TRUE(range.ok()) << range.status().to_string();

  Status status = backend->commit(*range);
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory) << status.to_string();
  std::cout << "commit beyond free memory: " << status.to_string() << "\n";
  EXPECT_EQ(backend->stats().committed_bytes, 0u);
  // Any chunk left behind would be 1 GiB; the slack is for the driver's own bookkeeping.
  const uint64_t after = probe_->free_bytes();
  EXPECT_TRUE(Near(after, before, 64 * kMiB)) << "rolled back";
  std::cout << "free before/after the failed commit: " << before << " / " << after << "\n";

  const DeviceRange small = range->subrange(0, 64 * kMiB);
  ASSERT_TRUE(backend->commit(small).ok()) << "a small commit works afterwards";
  write(*backend, small.base, pattern(small.size, 1));
  EXPECT_TRUE(SameBytes(pattern(small.size, 1), read(*backend, small.base, small.size)));
  ASSERT_TRUE(backend->decommit(small).ok());
}

// A commit of three chunks whose chunk 1 fails at `step`: everything the call made is rolled
// back, and the range can be committed again.
class CudaPartialCommitTest : public CudaVmmBackendTest,
                              public ::testing::WithParamInterface<CommitStep> {};

TEST_P(CudaPartialCommitTest, RollsBackAndCanCommitAgain) {
  const CommitStep failing_step = GetParam();
  size_t g = 0;
  {
    auto plain = make();
    ASSERT_NE(plain, nullptr);
    g = plain->granularity();
  }
  bool armed = true;
  std::vector<std::pair<CommitStep, size_t>> calls;
  CudaVmmOptions options;
  options.max_chunk_bytes = 2 * g;
  options.commit_fault_hook = [&](CommitStep step, size_t chunk) -> Status {
    calls.emplace_back(step, chunk);
    if (armed && step == failing_step && chunk == 1) {
      return DeviceError("injected failure before step " + std::to_string(static_cast<int>(step)) +
                         " of chunk 1");
    }
    return Status::Ok();
  };
  auto backend = make(options);
  ASSERT_NE(backend, nullptr);
  auto range = backend->reserve(6 * g);  // three chunks of 2 granules
  ASSERT_TRUE(range.ok());

  const uint64_t before = probe_->free_bytes();
  Status status = backend->commit(*range);
  EXPECT_EQ(status.code(), StatusCode::kDeviceError);
  EXPECT_THAT(status.message(), ::testing::HasSubstr("injected"));
  // The hook is asked before every step of every chunk, up to the failing one.
  std::vector<std::pair<CommitStep, size_t>> want_calls;
  for (size_t chunk = 0; chunk < 2; ++chunk) {
    for (CommitStep step : {CommitStep::kCreate, CommitStep::kMap, CommitStep::kSetAccess}) {
      want_calls.emplace_back(step, chunk);
      if (chunk == 1 && step == failing_step) break;
    }
  }
  EXPECT_EQ(calls, want_calls);

  EXPECT_EQ(backend->stats().committed_bytes, 0u);
  EXPECT_TRUE(Near(probe_->free_bytes(), before, g)) << "chunk 0 and any chunk 1 released";
  EXPECT_FALSE(probe_->mapped(range->base));
  auto buffer = backend->acquire_staging();
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(backend->copy_to_staging(range->base, 16, *buffer).status().code(),
            StatusCode::kFailedPrecondition)
      << "the range counts as decommitted";

  armed = false;
  ASSERT_TRUE(backend->commit(*range).ok());
  buffer->reset();
  write(*backend, range->base, pattern(range->size, 9));
  EXPECT_TRUE(SameBytes(pattern(range->size, 9), read(*backend, range->base, range->size)));
  EXPECT_EQ(probe_->range_start(range->base), range->base);
  ASSERT_TRUE(backend->decommit(*range).ok());
}

INSTANTIATE_TEST_SUITE_P(EachStep, CudaPartialCommitTest,
                         ::testing::Values(CommitStep::kCreate, CommitStep::kMap,
                                           CommitStep::kSetAccess),
                         [](const ::testing::TestParamInfo<CommitStep>& step) -> std::string {
                           switch (step.param) {
                             case CommitStep::kCreate: return "Create";
                             case CommitStep::kMap: return "Map";
                             case CommitStep::kSetAccess: return "SetAccess";
                           }
                           return "Unknown";
                         });

TEST_F(CudaVmmBackendTest, MisuseIsRefusedAndChangesNothing) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  const size_t g = backend->granularity();
  EXPECT_EQ(backend->reserve(0).status().code(), StatusCode::kInvalidArgument);
  auto range = backend->reserve(8 * g);
  ASSERT_TRUE(range.ok());
  const DeviceRange first4 = range->subrange(0, 4 * g);
  ASSERT_TRUE(backend->commit(first4).ok());
  const MemoryStats stats = backend->stats();

  // Commits.
  EXPECT_EQ(backend->commit(first4).code(), StatusCode::kFailedPrecondition) << "double";
  EXPECT_EQ(backend->commit(range->subrange(3 * g, 2 * g)).code(), StatusCode::kFailedPrecondition)
      << "overlapping";
  EXPECT_EQ(backend->commit({range->end(), g}).code(), StatusCode::kFailedPrecondition)
      << "outside the reservation";
  EXPECT_EQ(backend->commit({range->base + 7 * g, 2 * g}).code(), StatusCode::kFailedPrecondition)
      << "runs past the reservation";
  EXPECT_EQ(backend->commit({range->base + 4 * g + g / 2, g}).code(), StatusCode::kInvalidArgument)
      << "misaligned base";
  EXPECT_EQ(backend->commit({range->base + 4 * g, g + 4096}).code(), StatusCode::kInvalidArgument)
      << "misaligned size";
  EXPECT_EQ(backend->commit({range->base + 4 * g, 0}).code(), StatusCode::kInvalidArgument);

  // Decommits.
  EXPECT_EQ(backend->decommit(range->subrange(0, 2 * g)).code(), StatusCode::kFailedPrecondition)
      << "part of a commit";
  EXPECT_EQ(backend->decommit(range->subrange(4 * g, 2 * g)).code(),
            StatusCode::kFailedPrecondition)
      << "uncommitted";
  EXPECT_EQ(backend->decommit(range->subrange(0, 5 * g)).code(), StatusCode::kFailedPrecondition)
      << "committed and uncommitted";

  // Copies and zeroing over uncommitted bytes never reach the device.
  auto buffer = backend->acquire_staging();
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(backend->copy_to_staging(first4.end() - 16, 32, *buffer).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend->copy_from_staging(*buffer, 16, first4.end()).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend->copy_to_staging(range->end() + g, 16, *buffer).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend->zero(range->subrange(3 * g, 2 * g)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      backend->copy_to_staging(range->base, buffer->bytes().size() + 1, *buffer).status().code(),
      StatusCode::kInvalidArgument)
      << "larger than the buffer";
  EXPECT_EQ(backend->wait(CopyTicket{1u << 30}).code(), StatusCode::kInvalidArgument)
      << "never issued";
  buffer->reset();

  // Not a reservation: ignored.
  backend->unreserve(range->subrange(0, 4 * g));
  backend->unreserve({range->base + g, 7 * g});

  const MemoryStats after = backend->stats();
  EXPECT_EQ(after.reserved_bytes, stats.reserved_bytes);
  EXPECT_EQ(after.committed_bytes, stats.committed_bytes);
  EXPECT_TRUE(probe_->mapped(first4.base));

  // The context is not poisoned: work still runs and finishes cleanly.
  ASSERT_TRUE(backend->synchronize().ok());
  write(*backend, first4.base, pattern(first4.size, 5));
  EXPECT_TRUE(SameBytes(pattern(first4.size, 5), read(*backend, first4.base, first4.size)));
  ASSERT_TRUE(backend->decommit(first4).ok());
}

TEST_F(CudaVmmBackendTest, AdjacentCommitsCopyAcrossAndDecommitTogether) {
  auto backend = make();
  ASSERT_NE(backend, nullptr);
  const size_t g = backend->granularity();
  auto range = backend->reserve(4 * g);
  ASSERT_TRUE(range.ok());
  ASSERT_TRUE(backend->commit(range->subrange(0, 2 * g)).ok());
  ASSERT_TRUE(backend->commit(range->subrange(2 * g, 2 * g)).ok());
  const DeviceRange across = range->subrange(g, 2 * g);
  write(*backend, across.base, pattern(across.size, 11));
  EXPECT_TRUE(SameBytes(pattern(across.size, 11), read(*backend, across.base, across.size)));
  ASSERT_TRUE(backend->decommit(*range).ok()) << "two whole commits at once";
  EXPECT_EQ(backend->stats().committed_bytes, 0u);
}

TEST_F(CudaVmmBackendTest, DestroyingReleasesEverything) {
  const uint64_t before = probe_->free_bytes();
  {
    auto backend = make();
    ASSERT_NE(backend, nullptr);
    auto range = backend->reserve(256 * kMiB);
    ASSERT_TRUE(range.ok());
    ASSERT_TRUE(backend->commit(*range).ok());
    ASSERT_TRUE(backend->zero(*range).ok());  // pending work at destruction
    EXPECT_LT(probe_->free_bytes(), before);
  }
  EXPECT_TRUE(Near(probe_->free_bytes(), before, 8 * kMiB)) << "the stream may own a little";
}

TEST_F(CudaVmmBackendTest, ThreadsCycleTheirOwnRangesConcurrently) {
  CudaVmmOptions options;
  options.staging_buffer_bytes = 2 * kMiB;
  options.staging_buffer_count = 8;
  auto backend = make(options);
  ASSERT_NE(backend, nullptr);
  constexpr int kThreads = 4;
  std::vector<Status> results(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      results[t] = [&]() -> Status {
        SIESTA_ASSIGN_OR_RETURN(ReservedRange owned, ReservedRange::reserve(*backend, 6 * kMiB));
        const DeviceRange range = owned.range();
        for (uint64_t cycle = 0; cycle < 10; ++cycle) {
          SIESTA_RETURN_IF_ERROR(backend->commit(range));
          // One buffer per thread at a time, so four threads never run the ring of eight dry.
          const std::vector<std::byte> want = pattern(range.size, uint64_t{100} * t + cycle);
          for (size_t off = 0; off < range.size; off += 2 * kMiB) {
            SIESTA_ASSIGN_OR_RETURN(StagingBuffer buffer, backend->acquire_staging());
            std::memcpy(buffer.bytes().data(), want.data() + off, 2 * kMiB);
            SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket,
                                    backend->copy_from_staging(buffer, 2 * kMiB, range.base + off));
            SIESTA_RETURN_IF_ERROR(backend->wait(ticket));
          }
          std::vector<std::byte> got(range.size);
          for (size_t off = 0; off < range.size; off += 2 * kMiB) {
            SIESTA_ASSIGN_OR_RETURN(StagingBuffer buffer, backend->acquire_staging());
            SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket,
                                    backend->copy_to_staging(range.base + off, 2 * kMiB, buffer));
            SIESTA_RETURN_IF_ERROR(backend->wait(ticket));
            std::memcpy(got.data() + off, buffer.bytes().data(), 2 * kMiB);
          }
          if (std::memcmp(want.data(), got.data(), want.size()) != 0) {
            return Internal("thread " + std::to_string(t) + " cycle " + std::to_string(cycle) +
                            ": bytes differ");
          }
          SIESTA_RETURN_IF_ERROR(backend->decommit(range));
        }
        return Status::Ok();
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(results[t].ok()) << results[t].to_string();
  EXPECT_EQ(backend->stats().committed_bytes, 0u);
  EXPECT_EQ(backend->stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace siesta
