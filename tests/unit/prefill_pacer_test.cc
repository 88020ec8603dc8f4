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
    auto sim = SimBackend::create(siesta::test_util::small_sim_options());
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

TEST_F(PrefillPacerTest, AFastDeviceMeasuresOneTokenThenTakesTheFullBlock) {
  kernels_->set_per_token(microseconds(10));  // an H200 reading synthetic:medium
  PrefillSpeed speed;
  PrefillPacer pacer(*kernels_, 128, /*history=*/0, clock_, speed);
  EXPECT_EQ(feed(pacer, 5), (std::vector<uint32_t>{1, 128, 128, 128, 128}));
  EXPECT_EQ(kernels_->waits(), 1) << "only the first block, of unknown length, is waited for";
  EXPECT_TRUE(speed.known());
}

TEST_F(PrefillPacerTest, ASlowDeviceKeepsEveryBlockWithinTheBlockTime) {
  kernels_->set_per_token(milliseconds(40));  // synthetic:large on two CPU cores
  PrefillSpeed speed;
  PrefillPacer pacer(*kernels_, 64, /*history=*/0, clock_, speed);
  const std::vector<uint32_t> lengths = feed(pacer, 12);
  // 0.25 s / 40 ms: six tokens a block once measured, never more (five where the history
  // grown since the middle of the last measured block is counted in).
  EXPECT_EQ(lengths[0], 1u);
  for (size_t i = 1; i < lengths.size(); ++i) {
    EXPECT_GE(lengths[i], 5u) << "block " << i;
    EXPECT_LE(milliseconds(40) * lengths[i], PrefillPacer::kBlockTime) << "block " << i;
  }
  EXPECT_EQ(kernels_->waits(), 12);  // each block is longer than kQueuedWork: waited for
}

TEST_F(PrefillPacerTest, BlocksShrinkWhenTheDeviceSlowsDown) {
  kernels_->set_per_token(microseconds(100));
  PrefillSpeed speed;
  PrefillPacer pacer(*kernels_, 64, /*history=*/0, clock_, speed);
  feed(pacer, 8);
  ASSERT_EQ(pacer.next_block(), 64u);
  // The history grew long: a token now costs 25 ms; the next measurement says so.
  kernels_->set_per_token(milliseconds(25));
  std::vector<uint32_t> lengths = feed(pacer, 40);
  EXPECT_LE(milliseconds(25) * lengths.back(), PrefillPacer::kBlockTime);
  EXPECT_GE(lengths.back(), 9u) << "0.25 s / 25 ms, less the history's growth";
}

TEST_F(PrefillPacerTest, AFastDeviceIsWaitedForAboutEveryQueuedWorkNotEveryBlock) {
  kernels_->set_per_token(microseconds(10));
  PrefillSpeed speed;
  PrefillPacer pacer(*kernels_, 128, /*history=*/0, clock_, speed);
  feed(pacer, 2);  // one token measured, then the full block
  const int before = kernels_->waits();
  feed(pacer, 400);
  // 128 tokens of 10 us: 1.28 ms a block, 39 blocks to 50 ms of queued work.
  const int waits = kernels_->waits() - before;
  EXPECT_GE(waits, 400 / 39 - 1);
  EXPECT_LE(waits, 400 / 39 + 2);
}

TEST_F(PrefillPacerTest, ABlockOfOneStaysOne) {
  kernels_->set_per_token(microseconds(10));
  PrefillSpeed speed;
  PrefillPacer pacer(*kernels_, 1, /*history=*/0, clock_, speed);
  EXPECT_EQ(feed(pacer, 4), (std::vector<uint32_t>{1, 1, 1, 1}));
}

// The speed is the device's: a later prompt on a device measured before starts with the block
// that speed allows and waits only once kQueuedWork is queued, so a short turn costs one block
// and no wait (the first token's download is the only one).
TEST_F(PrefillPacerTest, ALaterPromptOnAMeasuredDeviceStartsWithItsBlockAndDoesNotWait) {
  kernels_->set_per_token(microseconds(10));
  PrefillSpeed speed;
  {
    PrefillPacer first(*kernels_, 128, /*history=*/0, clock_, speed);
    feed(first, 3);
  }
  const int before = kernels_->waits();
  PrefillPacer second(*kernels_, 128, /*history=*/0, clock_, speed);
  EXPECT_EQ(second.next_block(), 128u) << "no ramp from one token";
  kernels_->queue(2);  // a two-token turn: one block
  ASSERT_TRUE(second.after_feed(2).ok());
  EXPECT_EQ(kernels_->waits(), before) << "two tokens are far below kQueuedWork";
}

// On a slow device the promise holds from a later prompt's first block on: it is sized from the
// measured speed, not from the session's block.
TEST_F(PrefillPacerTest, ALaterPromptOnASlowDeviceStartsWithinTheBlockTime) {
  kernels_->set_per_token(milliseconds(40));
  PrefillSpeed speed;
  {
    PrefillPacer first(*kernels_, 64, /*history=*/0, clock_, speed);
    feed(first, 2);
  }
  PrefillPacer second(*kernels_, 64, /*history=*/0, clock_, speed);
  EXPECT_EQ(second.next_block(), 6u);
  for (uint32_t length : feed(second, 3)) {
    EXPECT_LE(milliseconds(40) * length, PrefillPacer::kBlockTime) << length << " tokens";
  }
  EXPECT_EQ(kernels_->waits(), 2 + 3) << "every slow block is waited for";
}

// A measurement over a slower stretch (a long history) carries over: the next prompt's blocks
// are as short as the last measurement says, then grow back once it measures faster.
TEST_F(PrefillPacerTest, TheLastMeasurementSizesTheNextPromptsBlocks) {
  kernels_->set_per_token(microseconds(10));
  PrefillSpeed speed;
  {
    PrefillPacer fast(*kernels_, 128, /*history=*/0, clock_, speed);
    feed(fast, 2);
  }
  kernels_->set_per_token(milliseconds(5));  // the device slows: 50 tokens fit the block time
  {
    PrefillPacer slow(*kernels_, 128, /*history=*/0, clock_, speed);
    feed(slow, 60);  // waits once kQueuedWork at the old speed is queued, then measures
    EXPECT_LE(milliseconds(5) * slow.next_block(), PrefillPacer::kBlockTime);
  }
  // A prompt on a short history: the measurement as it is (never scaled down).
  PrefillPacer next(*kernels_, 128, /*history=*/0, clock_, speed);
  EXPECT_EQ(next.next_block(), 50u);
  kernels_->set_per_token(microseconds(10));
  feed(next, 2);
  EXPECT_EQ(next.next_block(), 128u) << "measured fast again";
}

// A token costs more the longer its history: a measurement taken on a short history is scaled
// up for a prompt that starts on a long one, (history + block) / (measured + block).
TEST_F(PrefillPacerTest, AMeasurementOnAShortHistoryIsScaledUpForALongOne) {
  kernels_->set_per_token(milliseconds(1));
  PrefillSpeed speed;
  {
    PrefillPacer first(*kernels_, 64, /*history=*/0, clock_, speed);
    feed(first, 1);  // one token measured at history 1: 1 ms, so 64-token blocks (250 fit)
  }
  ASSERT_EQ(speed.history_tokens, 1u);
  PrefillPacer short_history(*kernels_, 64, /*history=*/0, clock_, speed);
  EXPECT_EQ(short_history.next_block(), 64u);
  // At 6,435 tokens of history: 1 ms x (6435 + 64) / (1 + 64) = 100 ms a token, 2 a block.
  PrefillPacer long_history(*kernels_, 64, /*history=*/6435, clock_, speed);
  EXPECT_EQ(long_history.next_block(), 2u);
}

}  // namespace
}  // namespace siesta::engine
