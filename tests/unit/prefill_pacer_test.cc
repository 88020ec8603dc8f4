// PrefillPacer on a device whose speed the test sets: the ManualClock advances by the queued
// tokens' time whenever the pacer waits for the device, so every figure below is exact.
#include "engine/prefill_pacer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "compute/kernels_wrapper.h"
#include "core/base/clock.h"
#include "tests/support/small_sim_options.h"

namespace siesta::engine {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// synchronize() runs the queued tokens: the clock moves by their time, and the wait is
// counted.
class TimedKernels final : public KernelsWrapper {
 public:
  TimedKernels(Kernels& target, ManualClock& clock) : KernelsWrapper(target), clock_(clock) {}
  void queue(uint32_t tokens) { queued_ += tokens; }
  void set_per_token(nanoseconds per_token) { per_token_ = per_token; }
  Status synchronize() override {
    clock_.advance(per_token_ * queued_);
    queued_ = 0;
    ++waits_;
    return Status::Ok();
  }
  int waits() const { return waits_; }

 private:
  ManualClock& clock_;
  nanoseconds per_token_{0};
  uint64_t queued_ = 0;
  int waits_ = 0;
};

class PrefillPacerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sim = SimBackend::create(test_util::small_sim_options());
    ASSERT_TRUE(sim.ok()) << sim.status().to_string();
    sim_ = std::move(sim).value();
    auto host = HostKernels::create(*sim_);
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    host_ = std::move(host).value();
    kernels_ = std::make_unique<TimedKernels>(*host_, clock_);
  }

  // Feeds `blocks` blocks of what the pacer asks for; returns their lengths.
  std::vector<uint32_t> feed(PrefillPacer& pacer, int blocks) {
    std::vector<uint32_t> lengths;
    for (int i = 0; i < blocks; ++i) {
      const uint32_t block = pacer.next_block();
      lengths.push_back(block);
      kernels_->queue(block);
      EXPECT_TRUE(pacer.after_feed(block).ok());
    }
    return lengths;
  }

  ManualClock clock_;
  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<HostKernels> host_;
  std::unique_ptr<TimedKernels> kernels_;
};

TEST_F(PrefillPacerTest, AFastDeviceReachesTheFullBlockDoublingFromOneToken) {
  kernels_->set_per_token(microseconds(10));  // an H200 reading synthetic:medium
  PrefillPacer pacer(*kernels_, 128, clock_);
  EXPECT_EQ(feed(pacer, 10), (std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128, 128, 128}));
}

TEST_F(PrefillPacerTest, ASlowDeviceKeepsEveryBlockWithinTheBlockTime) {
  kernels_->set_per_token(milliseconds(40));  // synthetic:large on two CPU cores
  PrefillPacer pacer(*kernels_, 64, clock_);
  const std::vector<uint32_t> lengths = feed(pacer, 12);
  // 0.25 s / 40 ms: six tokens a block once measured, never more.
  EXPECT_EQ(lengths, (std::vector<uint32_t>{1, 2, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6}));
  for (uint32_t length : lengths) {
    EXPECT_LE(milliseconds(40) * length, PrefillPacer::kBlockTime) << length << " tokens";
  }
  EXPECT_EQ(kernels_->waits(), 12);  // each block is longer than kQueuedWork: waited for
}

TEST_F(PrefillPacerTest, BlocksShrinkWhenTheDeviceSlowsDown) {
  kernels_->set_per_token(microseconds(100));
  PrefillPacer pacer(*kernels_, 64, clock_);
  feed(pacer, 8);
  ASSERT_EQ(pacer.next_block(), 64u);
  // The history grew long: a token now costs 25 ms; the next measurement says so.
  kernels_->set_per_token(milliseconds(25));
  std::vector<uint32_t> lengths = feed(pacer, 40);
  EXPECT_EQ(lengths.back(), 10u) << "0.25 s / 25 ms";
}

TEST_F(PrefillPacerTest, AFastDeviceIsWaitedForAboutEveryQueuedWorkNotEveryBlock) {
  kernels_->set_per_token(microseconds(10));
  PrefillPacer pacer(*kernels_, 128, clock_);
  feed(pacer, 8);  // the ramp to 128, each block measured
  const int before = kernels_->waits();
  feed(pacer, 400);
  // 128 tokens of 10 us: 1.28 ms a block, 39 blocks to 50 ms of queued work.
  const int waits = kernels_->waits() - before;
  EXPECT_GE(waits, 400 / 39 - 1);
  EXPECT_LE(waits, 400 / 39 + 2);
}

TEST_F(PrefillPacerTest, ABlockOfOneStaysOne) {
  kernels_->set_per_token(microseconds(10));
  PrefillPacer pacer(*kernels_, 1, clock_);
  EXPECT_EQ(feed(pacer, 4), (std::vector<uint32_t>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace siesta::engine
