// What the simulator promises beyond the MemoryBackend contract (which the conformance suite
// checks): pages really leave the process, memfds are closed, capacity is checked chunk by
// chunk, another process's usage is modelled, and its stream runs work in order and is
// drained before memory goes away. No test sleeps: threads meet at latches.
#include "backends/sim/sim_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/memory/host_address_space.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

SimBackendOptions small_options() {
  SimBackendOptions options;
  options.capacity_bytes = 64 * kMiB;
  options.granularity = 64 * kKiB;
  options.max_chunk_bytes = 256 * kKiB;
  options.staging_buffer_bytes = 64 * kKiB;
  options.staging_buffer_count = 2;
  return options;
}

std::unique_ptr<SimBackend> make_sim(SimBackendOptions options = small_options()) {
  Result<std::unique_ptr<SimBackend>> sim = SimBackend::create(std::move(options));
  if (!sim.ok()) ADD_FAILURE() << sim.status().to_string();
  return sim.ok() ? std::move(sim).value() : nullptr;
}

size_t rss() { return host_address_space::resident_bytes().value(); }

// The simulator's device addresses are host pointers.
template <class T>
T* host(DeviceAddress address) {
  return reinterpret_cast<T*>(address);  // NOLINT(performance-no-int-to-ptr)
}

size_t open_fd_count() {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

// The permissions /proc/self/maps shows for the mapping holding `address` ("rw-s" for a
// committed memfd chunk, "---p" for a reservation with nothing behind it), or "" if unmapped.
std::string protection_at(DeviceAddress address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0;
    unsigned long long end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s", &start, &end, perms) == 3 && address >= start &&
        address < end) {
      return perms;
    }
  }
  return "";
}

// Every granule of `range` shows `perms`.
void expect_protection(DeviceRange range, size_t step, const std::string& perms) {
  for (DeviceAddress a = range.base; a < range.end(); a += step) {
    EXPECT_EQ(protection_at(a), perms) << "at offset " << (a - range.base);
  }
}

void touch(DeviceRange range) { std::memset(host<void>(range.base), 0x5a, range.size); }

TEST(SimBackendTest, NameIsSim) { EXPECT_EQ(make_sim()->name(), "sim"); }

TEST(SimBackendTest, CreateRejectsBadOptions) {
  const size_t page = host_address_space::page_size();
  SimBackendOptions options = small_options();
  options.granularity = page + page / 2;  // not a multiple of the page
  SIESTA_EXPECT_CODE(SimBackend::create(options), StatusCode::kInvalidArgument);
  options = small_options();
  options.granularity = 3 * page;  // a multiple, but not a power of two
  SIESTA_EXPECT_CODE(SimBackend::create(options), StatusCode::kInvalidArgument);
  options = small_options();
  options.max_chunk_bytes = 0;
  SIESTA_EXPECT_CODE(SimBackend::create(options), StatusCode::kInvalidArgument);
  options = small_options();
  options.max_chunk_bytes = options.granularity + page;  // chunks must be whole granules
  SIESTA_EXPECT_CODE(SimBackend::create(options), StatusCode::kInvalidArgument);
  options = small_options();
  options.staging_buffer_count = 0;
  SIESTA_EXPECT_CODE(SimBackend::create(options), StatusCode::kInvalidArgument);
  options = small_options();
  options.staging_buffer_bytes = 0;
  SIESTA_EXPECT_CODE(SimBackend::create(options), StatusCode::kInvalidArgument);
}

// Memory that was "released" but never left the process (other systems kept it).
TEST(SimBackendTest, ResidentSetFallsAfterDecommit) {
  auto sim = make_sim();
  const size_t bytes = 16 * kMiB;
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, bytes));
  const size_t untouched = rss();
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  touch(r.range());
  const size_t touched = rss();
  EXPECT_GE(touched, untouched + bytes - sim->granularity()) << "touching should fault pages in";
  SIESTA_ASSERT_OK(sim->decommit(r.range()));
  const size_t released = rss();
  EXPECT_GE(touched, released + bytes - sim->granularity())
      << "RSS went from " << touched << " to " << released << " after decommitting " << bytes;
  // Committed again, the pages are fresh ones, poisoned (so resident) but holding nothing of
  // the old contents: nothing was kept aside, so RSS comes back to what the first commit and
  // touch made it, not more. (Compared with `touched`, not `released + bytes`: under TSan
  // writing the poison also maps the range's shadow memory again, as the first touch did.)
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  EXPECT_LT(rss(), touched + 1 * kMiB);
  const auto* fresh = host<const std::byte>(r.range().base);
  for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(fresh[i], kSimPoisonByte) << i;
}

TEST(SimBackendTest, DecommitAndUnreserveCloseEveryMemfd) {
  auto sim = make_sim();
  const size_t fds_before = open_fd_count();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 1 * kMiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));  // 4 chunks of 256 KiB
  EXPECT_EQ(open_fd_count(), fds_before + 4);
  SIESTA_ASSERT_OK(sim->decommit(r.range()));
  EXPECT_EQ(open_fd_count(), fds_before);
  SIESTA_ASSERT_OK(sim->commit(r.range().subrange(0, 512 * kKiB)));
  EXPECT_EQ(open_fd_count(), fds_before + 2);
  r.reset();
  EXPECT_EQ(open_fd_count(), fds_before);
}

TEST(SimBackendTest, CommitRunsCreateMapSetAccessPerChunk) {
  std::vector<std::pair<CommitStep, size_t>> steps;  // only touched under commit's lock
  SimBackendOptions options = small_options();
  options.commit_fault_hook = [&steps](CommitStep step, size_t chunk) {
    steps.emplace_back(step, chunk);
    return Status::Ok();
  };
  auto sim = make_sim(std::move(options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 640 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));  // 256 + 256 + 128 KiB
  std::vector<std::pair<CommitStep, size_t>> want;
  for (size_t chunk = 0; chunk < 3; ++chunk) {
    for (CommitStep step : {CommitStep::kCreate, CommitStep::kMap, CommitStep::kSetAccess}) {
      want.emplace_back(step, chunk);
    }
  }
  EXPECT_EQ(steps, want);
}

// A failure at any step of any chunk leaves the range decommitted, PROT_NONE, with no memfd
// left open and the accounting unchanged.
TEST(SimBackendTest, FailureAtAnyStepOfAnyChunkRollsBack) {
  std::atomic<int> armed_step{-1};
  std::atomic<long long> armed_chunk{-1};
  SimBackendOptions options = small_options();
  options.commit_fault_hook = [&](CommitStep step, size_t chunk) -> Status {
    if (static_cast<int>(step) == armed_step.load() &&
        static_cast<long long>(chunk) == armed_chunk.load()) {
      return DeviceError("injected failure at step " + std::to_string(int(step)) + " of chunk " +
                         std::to_string(chunk));
    }
    return Status::Ok();
  };
  auto sim = make_sim(std::move(options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 768 * kKiB));
  const MemoryStats before = sim->stats();
  const size_t fds_before = open_fd_count();
  for (CommitStep step : {CommitStep::kCreate, CommitStep::kMap, CommitStep::kSetAccess}) {
    for (size_t chunk : {0, 1, 2}) {
      SCOPED_TRACE("step " + std::to_string(int(step)) + " chunk " + std::to_string(chunk));
      std::cout << "injecting: failure at step " << int(step) << " of chunk " << chunk << "\n";
      armed_step = static_cast<int>(step);
      armed_chunk = static_cast<long long>(chunk);
      SIESTA_EXPECT_CODE(sim->commit(r.range()), StatusCode::kDeviceError);
      expect_protection(r.range(), 64 * kKiB, "---p");  // chunks mapped before are gone
      EXPECT_EQ(sim->stats().committed_bytes, before.committed_bytes);
      EXPECT_EQ(sim->stats().device_free_bytes, before.device_free_bytes);
      EXPECT_EQ(open_fd_count(), fds_before);
      armed_step = -1;
      SIESTA_ASSERT_OK(sim->commit(r.range()));
      expect_protection(r.range(), 64 * kKiB, "rw-s");
      touch(r.range());
      SIESTA_ASSERT_OK(sim->decommit(r.range()));
      expect_protection(r.range(), 64 * kKiB, "---p");
    }
  }
}

TEST(SimBackendTest, ExternalUsageMakesCommitFailUntilItIsLowered) {
  auto sim = make_sim();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 8 * kMiB));
  sim->set_external_usage(60 * kMiB);  // another process took most of the device
  EXPECT_EQ(sim->stats().device_free_bytes, 4 * kMiB);
  EXPECT_EQ(sim->stats().device_total_bytes, 64 * kMiB);
  const Status refused = sim->commit(r.range());
  SIESTA_EXPECT_CODE(refused, StatusCode::kOutOfMemory);
  // The message names what was asked for and what was free when it ran out.
  EXPECT_NE(refused.message().find(std::to_string(8 * kMiB) + " bytes"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find(std::to_string(4 * kMiB) + " bytes free"), std::string::npos)
      << refused.message();
  EXPECT_EQ(sim->stats().committed_bytes, 0u);
  EXPECT_EQ(sim->stats().device_free_bytes, 4 * kMiB);
  sim->set_external_usage(16 * kMiB);  // it went away again
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  EXPECT_EQ(sim->stats().device_free_bytes, 40 * kMiB);
}

TEST(SimBackendTest, CapacityIsCheckedChunkByChunk) {
  std::atomic<size_t> creates{0};
  SimBackendOptions options = small_options();
  options.capacity_bytes = 1 * kMiB;  // four chunks of 256 KiB
  options.commit_fault_hook = [&creates](CommitStep step, size_t) {
    if (step == CommitStep::kCreate) ++creates;
    return Status::Ok();
  };
  auto sim = make_sim(std::move(options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 2 * kMiB));
  SIESTA_ASSERT_OK(sim->commit(r.range().subrange(0, 768 * kKiB)));
  creates = 0;
  // Two chunks: the first fits in the 256 KiB left, the second does not.
  const Status refused = sim->commit(r.range().subrange(768 * kKiB, 512 * kKiB));
  SIESTA_EXPECT_CODE(refused, StatusCode::kOutOfMemory);
  EXPECT_NE(refused.message().find("chunk 1 needs " + std::to_string(256 * kKiB)),
            std::string::npos)
      << refused.message();
  EXPECT_EQ(creates.load(), 1u) << "chunk 0 is created before chunk 1 finds the device full";
  EXPECT_EQ(sim->stats().committed_bytes, 768 * kKiB);
  EXPECT_EQ(sim->stats().device_free_bytes, 256 * kKiB);
  // What is left is exactly one chunk, and it can be had.
  SIESTA_ASSERT_OK(sim->commit(r.range().subrange(768 * kKiB, 256 * kKiB)));
  EXPECT_EQ(sim->stats().device_free_bytes, 0u);
}

TEST(SimBackendTest, EnqueuedWorkRunsInOrderAndReportsItsStatus) {
  auto sim = make_sim();
  std::vector<int> order;  // written only by the stream; read after synchronize()
  std::vector<CopyTicket> tickets;
  for (int i = 0; i < 100; ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket ticket, sim->enqueue_work([&order, i] {
      order.push_back(i);
      return i == 40 ? DeviceError("job 40 failed") : Status::Ok();
    }));
    if (!tickets.empty()) {
      EXPECT_EQ(ticket.sequence, tickets.back().sequence + 1);
    }
    tickets.push_back(ticket);
  }
  const Status first_error = sim->synchronize();
  SIESTA_EXPECT_CODE(first_error, StatusCode::kDeviceError);
  std::vector<int> want(100);
  for (int i = 0; i < 100; ++i) want[i] = i;
  EXPECT_EQ(order, want);
  SIESTA_EXPECT_CODE(sim->wait_work(tickets[40]), StatusCode::kDeviceError);
  SIESTA_EXPECT_OK(sim->wait_work(tickets[41]));
  SIESTA_EXPECT_OK(sim->synchronize());  // an error is reported once
  SIESTA_EXPECT_CODE(sim->wait_work(CopyTicket{tickets.back().sequence + 1}),
                     StatusCode::kInvalidArgument);
  SIESTA_EXPECT_OK(sim->wait_work(CopyTicket{}));
  SIESTA_EXPECT_CODE(sim->enqueue_work(nullptr), StatusCode::kInvalidArgument);
}

// Unmapping while device work still runs (illegal-address errors in other systems). The job uses
// the range after the test lets it go; decommit, started before that, must not return until the job
// is done.
TEST(SimBackendTest, DecommitWaitsForPendingWork) {
  auto sim = make_sim();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 256 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  std::latch job_may_run(1);
  std::atomic<bool> job_done{false};
  auto* first_byte = host<volatile unsigned char>(r.range().base);
  SIESTA_ASSERT_OK(sim->enqueue_work([&] {
    job_may_run.wait();
    *first_byte = 42;  // faults if the range was already decommitted
    job_done = true;
    return Status::Ok();
  }));
  std::latch decommit_called(1);
  bool done_when_decommit_returned = false;
  Status decommitted;
  std::thread decommitter([&] {
    decommit_called.count_down();
    decommitted = sim->decommit(r.range());
    done_when_decommit_returned = job_done.load();
  });
  decommit_called.wait();
  job_may_run.count_down();
  decommitter.join();
  SIESTA_EXPECT_OK(decommitted);
  EXPECT_TRUE(done_when_decommit_returned);
}

// ...but it waits without the backend's lock: while a decommit waits for the device, another
// range's commit goes on (it used to stall behind the drain, as every other session's commit
// did), and the range being decommitted is already out of use (a copy or zero() of it is
// refused, so none can slip in between the drain and the unmap). Every wait is bounded, so a
// regression fails here rather than hanging.
TEST(SimBackendTest, ADecommitWaitingForTheDeviceStallsNoOtherRange) {
  constexpr auto kBound = std::chrono::seconds(30);
  auto sim = make_sim();
  ASSERT_TRUE(small_options().hazards.run_work_when_waited)
      << "the test knows the decommit is draining when the job starts: nothing else waits";
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange draining, ReservedRange::reserve(*sim, 256 * kKiB));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange other, ReservedRange::reserve(*sim, 256 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(draining.range()));
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, sim->acquire_staging());

  // Device work that holds the decommit's drain until the test lets it finish. Queued work
  // runs only once something waits for it, and only the decommit does: so once the job has
  // started, the decommit is waiting for the device.
  std::promise<void> started;
  std::future<void> job_started = started.get_future();
  std::latch job_may_finish(1);
  std::atomic<bool> job_done{false};
  auto* first_byte = host<volatile unsigned char>(draining.range().base);
  SIESTA_ASSERT_OK(sim->enqueue_work([&] {
    started.set_value();
    job_may_finish.wait();
    *first_byte = 42;  // faults if the range was unmapped under the job
    job_done = true;
    return Status::Ok();
  }));
  bool released = false;
  auto release_job = [&] {
    if (!std::exchange(released, true)) job_may_finish.count_down();
  };
  Status decommitted = Internal("decommit did not return");
  bool job_done_when_decommit_returned = false;
  std::thread decommitter([&] {
    decommitted = sim->decommit(draining.range());
    job_done_when_decommit_returned = job_done.load();
  });

  // Each call runs on a thread of its own, so that one that blocks on the drain is reported
  // (and let go by release_job()) instead of hanging the test.
  auto on_time = [&](auto& call, const char* what) {
    if (call.wait_for(kBound) == std::future_status::ready) return true;
    ADD_FAILURE() << what << " waited for the decommit's drain (still blocked after "
                  << kBound.count() << " s)";
    return false;
  };
  if (job_started.wait_for(kBound) != std::future_status::ready) {
    ADD_FAILURE() << "the decommit never began waiting for the device's work";
  } else {
    auto other_commit = std::async(std::launch::async, [&] { return sim->commit(other.range()); });
    if (on_time(other_commit, "commit of another range")) {
      SIESTA_EXPECT_OK(other_commit.get());
      EXPECT_EQ(sim->stats().committed_bytes, 2 * 256 * kKiB)
          << "the range being decommitted counts until its memory is released";
      // The range being decommitted is out of use from the start of the call.
      auto copy = std::async(std::launch::async, [&] {
        return sim->copy_to_staging(draining.range().base, 4 * kKiB, buffer).status();
      });
      auto zeroed = std::async(std::launch::async, [&] { return sim->zero(draining.range()); });
      auto again = std::async(std::launch::async, [&] { return sim->decommit(draining.range()); });
      const bool all_on_time = on_time(copy, "a copy of the range being decommitted") &&
                               on_time(zeroed, "zero() of the range being decommitted") &&
                               on_time(again, "a second decommit of the range");
      EXPECT_FALSE(job_done.load()) << "the device's work finished before it was let go";
      release_job();
      if (all_on_time) {
        for (auto* call : {&copy, &zeroed, &again}) {
          Status refused = call->get();
          EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.to_string();
          EXPECT_NE(refused.message().find("is being decommitted"), std::string::npos)
              << refused.to_string();
        }
      }
    } else {
      release_job();  // before other_commit's destructor waits for the blocked commit
    }
  }
  release_job();
  decommitter.join();
  SIESTA_EXPECT_OK(decommitted);
  EXPECT_TRUE(job_done_when_decommit_returned) << "decommit returned before the device's work";
  EXPECT_EQ(sim->stats().committed_bytes, 256 * kKiB) << "only the other range stays committed";
  expect_protection(draining.range(), 64 * kKiB, "---p");
}

TEST(SimBackendTest, GivingBackAStagingBufferWaitsForItsCopy) {
  // The copy runs only once something waits for it (SimHazards); giving the buffer back is
  // such a wait, so the bytes are in the buffer when reset() returns.
  auto sim = make_sim();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 64 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  std::memset(host<void>(r.range().base), 0x5a, 1024);
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, sim->acquire_staging());
  const std::span<std::byte> staging = buffer.bytes();
  std::fill(staging.begin(), staging.begin() + 1024, std::byte{0});
  SIESTA_ASSERT_OK(sim->copy_to_staging(r.range().base, 1024, buffer));
  EXPECT_EQ(staging[0], std::byte{0}) << "the copy ran before anything waited for it";
  buffer.reset();
  for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(staging[i], std::byte{0x5a}) << i;
}

// The two streams: a copy does not wait for work enqueued before it, synchronize() orders
// both, and fresh memory is poisoned.
TEST(SimBackendTest, CopiesAreNotOrderedAfterEnqueuedWork) {
  auto sim = make_sim();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 64 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  auto* first = host<std::byte>(r.range().base);
  EXPECT_EQ(*first, kSimPoisonByte);
  SIESTA_ASSERT_OK(sim->enqueue_work([first] {
    *first = std::byte{1};
    return Status::Ok();
  }));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto unordered, test_util::read_device(*sim, r.range().base, 1));
  EXPECT_EQ(unordered[0], kSimPoisonByte) << "the copy waited for work it was not ordered after";
  SIESTA_ASSERT_OK(sim->synchronize());
  SIESTA_ASSERT_OK_AND_ASSIGN(auto ordered, test_util::read_device(*sim, r.range().base, 1));
  EXPECT_EQ(ordered[0], std::byte{1});
}

TEST(SimBackendTest, WithoutHazardsWorkRunsEagerlyAndFreshMemoryIsZero) {
  SimBackendOptions options = small_options();
  options.hazards = SimHazards::none();
  auto sim = make_sim(options);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 64 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  EXPECT_EQ(*host<const std::byte>(r.range().base), std::byte{0});
  std::latch ran(1);
  SIESTA_ASSERT_OK(sim->enqueue_work([&ran] {
    ran.count_down();
    return Status::Ok();
  }));
  ran.wait();  // runs without anything waiting for its ticket
}

TEST(SimBackendTest, CopiesRejectAnotherBackendsBuffer) {
  auto sim = make_sim();
  auto other = make_sim();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 64 * kKiB));
  SIESTA_ASSERT_OK(sim->commit(r.range()));
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer foreign, other->acquire_staging());
  SIESTA_EXPECT_CODE(sim->copy_to_staging(r.range().base, 16, foreign),
                     StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(sim->copy_from_staging(foreign, 16, r.range().base),
                     StatusCode::kInvalidArgument);
  StagingBuffer empty;
  SIESTA_EXPECT_CODE(sim->copy_to_staging(r.range().base, 16, empty), StatusCode::kInvalidArgument);
}

TEST(SimBackendTest, DestructionRunsQueuedWorkAndReleasesEverything) {
  const size_t rss_before = rss();
  std::atomic<bool> job_done{false};
  {
    auto sim = make_sim();
    SIESTA_ASSERT_OK_AND_ASSIGN(DeviceRange range, sim->reserve(16 * kMiB));  // never unreserved
    SIESTA_ASSERT_OK(sim->commit(range));
    touch(range);
    SIESTA_ASSERT_OK(sim->enqueue_work([&job_done, range] {
      host<volatile unsigned char>(range.base)[0] = 1;  // still mapped
      job_done = true;
      return Status::Ok();
    }));
  }
  EXPECT_TRUE(job_done.load());
  EXPECT_LT(rss(), rss_before + 4 * kMiB) << "the destroyed backend kept its memory";
}

// Many threads on one backend, each cycling its own range: commit, write, read back,
// decommit. Run under ThreadSanitizer (label `concurrency`).
TEST(SimBackendTest, ConcurrentCyclesOnSeparateRanges) {
  SimBackendOptions options = small_options();
  options.staging_buffer_count = 8;  // two per thread, so no thread waits on the ring
  auto sim = make_sim(std::move(options));
  constexpr int kThreads = 4;
  constexpr int kCycles = 10;
  std::vector<ReservedRange> ranges;
  for (int t = 0; t < kThreads; ++t) {
    SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(*sim, 256 * kKiB));
    ranges.push_back(std::move(r));
  }
  std::latch start(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      const DeviceRange range = ranges[t].range();
      auto fail = [&](const std::string& what) { failures[t] += what + "; "; };
      for (int cycle = 0; cycle < kCycles; ++cycle) {
        if (Status s = sim->commit(range); !s.ok()) return fail("commit " + s.to_string());
        const auto pattern = test_util::make_pattern(range.size, t * 1000 + cycle);
        // device_copy holds up to staging_buffer_count() buffers; with several threads the
        // ring may be empty for a moment, so a refused acquire is retried.
        Status wrote;
        do {
          wrote = test_util::write_device(*sim, range.base, pattern);
        } while (wrote.code() == StatusCode::kFailedPrecondition &&
                 wrote.message().find("staging") != std::string::npos);
        if (!wrote.ok()) return fail("write " + wrote.to_string());
        Result<std::vector<std::byte>> got = test_util::read_device(*sim, range.base, range.size);
        while (!got.ok() && got.status().message().find("staging") != std::string::npos) {
          got = test_util::read_device(*sim, range.base, range.size);
        }
        if (!got.ok()) return fail("read " + got.status().to_string());
        if (*got != pattern) return fail("cycle " + std::to_string(cycle) + " read back wrong");
        if (Status s = sim->decommit(range); !s.ok()) return fail("decommit " + s.to_string());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  EXPECT_EQ(sim->stats().committed_bytes, 0u);
}

}  // namespace
}  // namespace siesta
