// FaultyBackend over the simulator: each fault fires exactly on its Nth call, says
// "injected", and leaves the state the MemoryBackend contract promises for that failure.
// A seeded sweep then drives commit/copy/decommit cycles under one plan per seed and checks
// the backend against a simple model after every step. Each test prints what it injects;
// a failing seed is reproduced with --gtest_filter=*SeededSweep* (the seed is in the trace).
#include "testing/faulty_backend.h"

#include <gtest/gtest.h>

#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

constexpr size_t kKiB = 1024;

SimBackendOptions sim_options() {
  SimBackendOptions options;
  options.capacity_bytes = 64ull << 20;
  options.granularity = 64 * kKiB;
  options.max_chunk_bytes = 256 * kKiB;
  options.staging_buffer_bytes = 64 * kKiB;
  options.staging_buffer_count = 2;
  return options;
}

std::unique_ptr<SimBackend> make_sim() { return SimBackend::create(sim_options()).value(); }

// The message of every injected error names the fault and the plan.
void expect_injected(const Status& status, const FaultPlan& plan) {
  EXPECT_NE(status.message().find("injected"), std::string::npos) << status.to_string();
  EXPECT_NE(status.message().find(plan.describe()), std::string::npos) << status.to_string();
}

TEST(FaultPlanTest, DescribeNamesKindCallAndStickiness) {
  EXPECT_EQ(FaultPlan::none().describe(), "no fault");
  EXPECT_EQ((FaultPlan{FaultKind::kDecommitFails, 3, false}).describe(),
            "decommit_fails on decommit call 3");
  EXPECT_EQ((FaultPlan{FaultKind::kCopyFails, 1, true}).describe(),
            "copy_fails on copy call 1 and every later one");
  EXPECT_EQ((FaultPlan{FaultKind::kPartialCommit, 2, false}).describe(),
            "partial_commit on commit call 2");
}

TEST(FaultPlanTest, FromSeedIsDeterministicAndCoversEveryKind) {
  std::set<FaultKind> kinds;
  std::set<uint64_t> nths;
  bool saw_sticky = false;
  bool saw_once = false;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const FaultPlan plan = FaultPlan::from_seed(seed, 6);
    EXPECT_EQ(plan, FaultPlan::from_seed(seed, 6)) << "seed " << seed;
    EXPECT_GE(plan.when.nth_call, 1u);
    EXPECT_LE(plan.when.nth_call, 6u);
    kinds.insert(plan.kind);
    nths.insert(plan.when.nth_call);
    (plan.when.sticky ? saw_sticky : saw_once) = true;
  }
  EXPECT_EQ(kinds.size(), size_t{kFaultKindCount});
  EXPECT_EQ(nths.size(), 6u);
  EXPECT_TRUE(saw_sticky);
  EXPECT_TRUE(saw_once);
  // Pinned: the same seed must give the same plan on every machine and library.
  const FaultPlan pinned = FaultPlan::from_seed(1, 8);
  std::cout << "from_seed(1, 8): " << pinned.describe() << "\n";
  EXPECT_EQ(FaultPlan::from_seed(1, 8), pinned);
  EXPECT_EQ(FaultPlan::from_seed(0, 0).when.nth_call, 1u);  // max 0 is treated as 1
}

TEST(FaultyBackendTest, NameAndCountersWithAPlanThatNeverFires) {
  FaultyBackend faulty(make_sim(), FaultPlan::none());
  EXPECT_EQ(faulty.name(), "faulty(sim)");
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(faulty, 256 * kKiB));
  for (int i = 0; i < 3; ++i) {
    SIESTA_ASSERT_OK(faulty.commit(r.range()));
    SIESTA_ASSERT_OK(
        test_util::write_device(faulty, r.range().base, test_util::make_pattern(100 * kKiB, i)));
    SIESTA_ASSERT_OK(faulty.decommit(r.range()));
  }
  const FaultCounters counters = faulty.counters();
  EXPECT_EQ(counters.commit_calls, 3u);
  EXPECT_EQ(counters.decommit_calls, 3u);
  EXPECT_EQ(counters.copy_calls, 6u);  // 100 KiB through 64 KiB buffers: two copies each
  EXPECT_EQ(counters.faults_fired, 0u);
}

// ---- Commit faults: the range is left decommitted and a retry succeeds -------------------------

struct CommitFaultCase {
  FaultKind kind;
  StatusCode code;
};

class CommitFaultTest : public ::testing::TestWithParam<CommitFaultCase> {};

TEST_P(CommitFaultTest, FiresOnTheNthCallAndLeavesTheRangeDecommitted) {
  const FaultPlan plan{GetParam().kind, 3, false};
  std::cout << "injecting: " << plan.describe() << "\n";
  auto sim = make_sim();
  FaultyBackend faulty(*sim, plan);  // borrows: the sim is checked directly below
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(faulty, 3 * 512 * kKiB));
  const DeviceRange ranges[] = {r.range().subrange(0, 512 * kKiB),
                                r.range().subrange(512 * kKiB, 512 * kKiB),
                                r.range().subrange(1024 * kKiB, 512 * kKiB)};
  SIESTA_ASSERT_OK(faulty.commit(ranges[0]));
  SIESTA_ASSERT_OK(faulty.commit(ranges[1]));
  EXPECT_EQ(faulty.counters().faults_fired, 0u);
  const Status failed = faulty.commit(ranges[2]);  // call 3
  SIESTA_EXPECT_CODE(failed, GetParam().code);
  expect_injected(failed, plan);
  EXPECT_EQ(faulty.counters().faults_fired, 1u);
  // Nothing of the range is committed, as the inner backend itself reports.
  EXPECT_EQ(sim->stats().committed_bytes, 2 * 512 * kKiB);
  SIESTA_EXPECT_CODE(sim->decommit(ranges[2]), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(sim->zero(ranges[2]), StatusCode::kFailedPrecondition);
  // A retry (call 4) succeeds and the memory works.
  SIESTA_ASSERT_OK(faulty.commit(ranges[2]));
  const auto pattern = test_util::make_pattern(ranges[2].size, 9);
  SIESTA_ASSERT_OK(test_util::write_device(faulty, ranges[2].base, pattern));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto got,
                              test_util::read_device(faulty, ranges[2].base, ranges[2].size));
  EXPECT_EQ(got, pattern);
  EXPECT_EQ(faulty.counters().commit_calls, 4u);
  EXPECT_EQ(faulty.counters().faults_fired, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CommitFaultTest,
    ::testing::Values(CommitFaultCase{FaultKind::kCommitOutOfMemory, StatusCode::kOutOfMemory},
                      CommitFaultCase{FaultKind::kCommitDeviceError, StatusCode::kDeviceError},
                      CommitFaultCase{FaultKind::kPartialCommit, StatusCode::kDeviceError}),
    [](const auto& param_info) { return std::string(fault_kind_name(param_info.param.kind)); });

TEST(FaultyBackendTest, PartialCommitOfARangeTheInnerBackendRefusesIsNotAFault) {
  const FaultPlan plan{FaultKind::kPartialCommit, 1, false};
  std::cout << "injecting: " << plan.describe() << "\n";
  FaultyBackend faulty(make_sim(), plan);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(faulty, 64 * kKiB));
  const Status refused = faulty.commit({r.range().base, 2 * r.range().size});  // past its end
  SIESTA_EXPECT_CODE(refused, StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message().find("injected"), std::string::npos) << refused.to_string();
  EXPECT_EQ(faulty.counters().faults_fired, 0u);
}

// ---- Decommit fault: the memory stays committed, its bytes intact ------------------------------

TEST(FaultyBackendTest, DecommitFailureKeepsTheMemoryAndItsData) {
  const FaultPlan plan{FaultKind::kDecommitFails, 2, false};
  std::cout << "injecting: " << plan.describe() << "\n";
  auto sim = make_sim();
  FaultyBackend faulty(*sim, plan);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange a, ReservedRange::reserve(faulty, 256 * kKiB));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange b, ReservedRange::reserve(faulty, 256 * kKiB));
  SIESTA_ASSERT_OK(faulty.commit(a.range()));
  SIESTA_ASSERT_OK(faulty.commit(b.range()));
  const auto pattern = test_util::make_pattern(b.range().size, 77);
  SIESTA_ASSERT_OK(test_util::write_device(faulty, b.range().base, pattern));
  SIESTA_ASSERT_OK(faulty.decommit(a.range()));      // call 1
  const Status failed = faulty.decommit(b.range());  // call 2
  SIESTA_EXPECT_CODE(failed, StatusCode::kDeviceError);
  expect_injected(failed, plan);
  EXPECT_EQ(sim->stats().committed_bytes, b.range().size);
  SIESTA_ASSERT_OK_AND_ASSIGN(auto got,
                              test_util::read_device(*sim, b.range().base, b.range().size));
  EXPECT_EQ(got, pattern);
  SIESTA_ASSERT_OK(faulty.decommit(b.range()));  // call 3: the retry works
  EXPECT_EQ(sim->stats().committed_bytes, 0u);
  EXPECT_EQ(faulty.counters().faults_fired, 1u);
}

// ---- Copy fault: refused when enqueued, destination untouched ----------------------------------

TEST(FaultyBackendTest, CopyFailureEnqueuesNothingAndLeavesTheDestination) {
  const FaultPlan plan{FaultKind::kCopyFails, 3, false};
  std::cout << "injecting: " << plan.describe() << "\n";
  auto sim = make_sim();
  FaultyBackend faulty(*sim, plan);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(faulty, 64 * kKiB));
  SIESTA_ASSERT_OK(faulty.commit(r.range()));
  const auto before = test_util::make_pattern(1024, 1);
  const auto after = test_util::make_pattern(1024, 2);
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, faulty.acquire_staging());
  std::copy(before.begin(), before.end(), buffer.bytes().begin());
  SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket t1,
                              faulty.copy_from_staging(buffer, 1024, r.range().base));
  SIESTA_ASSERT_OK(faulty.wait(t1));
  SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket t2, faulty.copy_to_staging(r.range().base, 1024, buffer));
  SIESTA_ASSERT_OK(faulty.wait(t2));
  std::copy(after.begin(), after.end(), buffer.bytes().begin());
  const Result<CopyTicket> failed = faulty.copy_from_staging(buffer, 1024, r.range().base);  // 3
  SIESTA_EXPECT_CODE(failed, StatusCode::kDeviceError);
  expect_injected(failed.status(), plan);
  SIESTA_ASSERT_OK(faulty.synchronize());
  buffer.reset();
  SIESTA_ASSERT_OK_AND_ASSIGN(auto got, test_util::read_device(*sim, r.range().base, 1024));
  EXPECT_EQ(got, before) << "the refused copy must not have run";
  // Call 4 and later go through again.
  SIESTA_ASSERT_OK(test_util::write_device(faulty, r.range().base, after));
  SIESTA_ASSERT_OK_AND_ASSIGN(got, test_util::read_device(faulty, r.range().base, 1024));
  EXPECT_EQ(got, after);
  EXPECT_EQ(faulty.counters().faults_fired, 1u);
  EXPECT_EQ(faulty.counters().copy_calls, 5u);
}

TEST(FaultyBackendTest, StickyPlanFiresOnEveryLaterCall) {
  const FaultPlan plan{FaultKind::kDecommitFails, 2, true};
  std::cout << "injecting: " << plan.describe() << "\n";
  FaultyBackend faulty(make_sim(), plan);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(faulty, 64 * kKiB));
  SIESTA_ASSERT_OK(faulty.commit(r.range()));
  SIESTA_ASSERT_OK(faulty.decommit(r.range()));  // call 1
  SIESTA_ASSERT_OK(faulty.commit(r.range()));
  for (int call = 2; call <= 5; ++call) {
    const Status failed = faulty.decommit(r.range());
    SIESTA_EXPECT_CODE(failed, StatusCode::kDeviceError);
    expect_injected(failed, plan);
  }
  EXPECT_EQ(faulty.counters().faults_fired, 4u);
  EXPECT_EQ(faulty.stats().committed_bytes, 64 * kKiB);  // unreserve still releases it
}

TEST(FaultyBackendTest, OtherOperationsAreForwardedUntouched) {
  const FaultPlan plan{FaultKind::kCopyFails, 1, true};
  std::cout << "injecting: " << plan.describe() << "\n";
  FaultyBackend faulty(make_sim(), plan);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(faulty, 64 * kKiB));
  for (int i = 0; i < 3; ++i) {
    SIESTA_ASSERT_OK(faulty.commit(r.range()));
    SIESTA_ASSERT_OK(faulty.zero(r.range()));
    SIESTA_ASSERT_OK(faulty.synchronize());
    SIESTA_ASSERT_OK(faulty.decommit(r.range()));
  }
  // And the inner backend's own checks still answer when no fault fires.
  SIESTA_EXPECT_CODE(faulty.decommit(r.range()), StatusCode::kFailedPrecondition);
  EXPECT_EQ(faulty.counters().faults_fired, 0u);
}

// ---- The seeded sweep ---------------------------------------------------------------------------

// One region of the sweep, as the model sees it.
struct ModelRegion {
  DeviceRange range;
  bool committed = false;
  std::optional<std::vector<std::byte>> data;  // the bytes it holds, when known
};

// Small enough that 200 seeds run in about a second: 16 KiB granules, 32 KiB chunks, regions
// of 128 KiB (four chunks each; two staging copies each way, with a buffer count of two, so
// both buffers are in flight at once).
constexpr size_t kSweepRegionBytes = 128 * kKiB;
SimBackendOptions sweep_options() {
  SimBackendOptions options = sim_options();
  options.granularity = 16 * kKiB;
  options.max_chunk_bytes = 32 * kKiB;
  options.staging_buffer_bytes = 64 * kKiB;
  return options;
}

class SeededSweep {
 public:
  SeededSweep(uint64_t seed, FaultPlan plan)
      : seed_(seed),
        plan_(plan),
        sim_(SimBackend::create(sweep_options()).value()),
        faulty_(*sim_, plan) {}

  void run() {
    Result<ReservedRange> reserved = ReservedRange::reserve(faulty_, 3 * kSweepRegionBytes);
    SIESTA_ASSERT_OK(reserved);
    reservation_ = std::move(reserved).value();
    for (size_t i = 0; i < 3; ++i) {
      ModelRegion region;
      region.range = reservation_.range().subrange(i * kSweepRegionBytes, kSweepRegionBytes);
      regions_.push_back(std::move(region));
    }
    for (uint64_t cycle = 0; cycle < 6; ++cycle) {
      for (size_t i = 0; i < regions_.size(); ++i) {
        ASSERT_NO_FATAL_FAILURE(step(cycle, regions_[i], i));
        ASSERT_NO_FATAL_FAILURE(check_invariant());
      }
    }
    EXPECT_EQ(faulty_.counters().faults_fired, expected_fired());
  }

 private:
  void step(uint64_t cycle, ModelRegion& region, size_t index) {
    if (!region.committed) {
      const Status s = faulty_.commit(region.range);
      if (s.ok()) {
        region.committed = true;
        region.data.reset();  // fresh memory: contents unspecified
      } else {
        on_failure(s);
      }
    }
    if (region.committed) {
      std::vector<std::byte> pattern =
          test_util::make_pattern(region.range.size, seed_ * 1000 + cycle * 10 + index);
      const Status s = test_util::write_device(faulty_, region.range.base, pattern);
      if (s.ok()) {
        region.data = std::move(pattern);
      } else {
        on_failure(s);
        region.data.reset();  // copies before the failed one did land
      }
    }
    if (region.committed && region.data) {
      Result<std::vector<std::byte>> got =
          test_util::read_device(faulty_, region.range.base, region.range.size);
      if (got.ok()) {
        EXPECT_TRUE(test_util::same_bytes(*got, *region.data)) << "read back wrong";
      } else {
        on_failure(got.status());
      }
    }
    if (region.committed && (cycle + index) % 2 == 0) {
      const Status s = faulty_.decommit(region.range);
      if (s.ok()) {
        region.committed = false;
        region.data.reset();
      } else {
        on_failure(s);  // the memory stays committed with its bytes
      }
    }
  }

  // Every failure in this sequence is an injected one (it makes no invalid call).
  void on_failure(const Status& status) {
    ++failures_seen_;
    expect_injected(status, plan_);
  }

  // What the backend holds matches the model, checked through the inner backend so that no
  // fault gets in the way of looking.
  void check_invariant() {
    uint64_t committed = 0;
    for (const ModelRegion& region : regions_) {
      if (region.committed) committed += region.range.size;
    }
    EXPECT_EQ(sim_->stats().committed_bytes, committed);
    EXPECT_EQ(faulty_.stats().committed_bytes, committed);
    EXPECT_EQ(faulty_.counters().faults_fired, failures_seen_);
    for (const ModelRegion& region : regions_) {
      if (region.committed && region.data) {
        SIESTA_ASSERT_OK_AND_ASSIGN(
            auto got, test_util::read_device(*sim_, region.range.base, region.range.size));
        ASSERT_TRUE(test_util::same_bytes(got, *region.data)) << "committed data changed";
      } else if (!region.committed) {
        SIESTA_EXPECT_CODE(sim_->zero(region.range), StatusCode::kFailedPrecondition);
      }
    }
  }

  // How many times the plan should have fired, from the calls its operation received.
  uint64_t expected_fired() const {
    const FaultCounters c = faulty_.counters();
    uint64_t calls = c.copy_calls;
    if (plan_.kind == FaultKind::kDecommitFails) calls = c.decommit_calls;
    if (plan_.kind == FaultKind::kCommitOutOfMemory ||
        plan_.kind == FaultKind::kCommitDeviceError || plan_.kind == FaultKind::kPartialCommit) {
      calls = c.commit_calls;
    }
    if (calls < plan_.when.nth_call) return 0;
    return plan_.when.sticky ? calls - plan_.when.nth_call + 1 : 1;
  }

  uint64_t seed_;
  FaultPlan plan_;
  std::unique_ptr<SimBackend> sim_;
  FaultyBackend faulty_;
  ReservedRange reservation_;
  std::vector<ModelRegion> regions_;
  uint64_t failures_seen_ = 0;
};

TEST(FaultyBackendTest, SeededSweepKeepsStatsAndDataConsistent) {
  constexpr uint64_t kSeeds = 200;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const FaultPlan plan = FaultPlan::from_seed(seed, 12);
    std::cout << "seed=" << seed << " injecting: " << plan.describe() << "\n";
    SCOPED_TRACE("seed=" + std::to_string(seed) + " (" + plan.describe() + ")");
    SeededSweep sweep(seed, plan);
    sweep.run();
    if (HasFatalFailure() || HasNonfatalFailure()) {
      std::cout << "FAILED at seed=" << seed << "\n";
      return;
    }
  }
}

}  // namespace
}  // namespace siesta
