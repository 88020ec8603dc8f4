// RamTier: blocks within one budget, given back when destroyed; RamSnapshot: a session's
// regions copied into a block and back, on the simulator's device and in host memory.
#include "core/offload/ram_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/offload/ram_snapshot.h"
#include "tests/support/small_sim_options.h"

namespace siesta {
namespace {

constexpr uint64_t kPage = 4096;

TEST(RamTierTest, BlocksAreChargedInWholePagesAndGivenBackWhenDestroyed) {
  RamTier tier(4 * kPage);
  Result<RamBlock> a = tier.allocate(100);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->size(), 100u);
  EXPECT_EQ(a->charged_bytes(), kPage);
  std::memset(a->data(), 0x5a, a->size());  // writable
  Result<RamBlock> b = tier.allocate(2 * kPage + 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(tier.stats().used_bytes, 4 * kPage);
  EXPECT_EQ(tier.stats().blocks, 2u);
  EXPECT_FALSE(tier.fits(1));
  a->reset();
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(tier.stats().used_bytes, 3 * kPage);
  EXPECT_TRUE(tier.fits(kPage));
  *b = RamBlock();  // moved over: the old block goes back
  EXPECT_EQ(tier.stats().used_bytes, 0u);
  EXPECT_EQ(tier.stats().blocks, 0u);
}

TEST(RamTierTest, WhatDoesNotFitIsRefusedAndChargesNothing) {
  RamTier tier(2 * kPage);
  Result<RamBlock> held = tier.allocate(kPage);
  ASSERT_TRUE(held.ok());
  Result<RamBlock> refused = tier.allocate(kPage + 1);
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(tier.stats().used_bytes, kPage);
  EXPECT_EQ(tier.stats().refused_full, 1u);
  EXPECT_EQ(tier.allocate(0).status().code(), StatusCode::kInvalidArgument);
  RamTier none(0);
  EXPECT_EQ(none.allocate(1).status().code(), StatusCode::kOutOfMemory);
}

class RefusingPages final : public RamPages {
 public:
  Result<std::byte*> map(size_t bytes) override {
    (void)bytes;
    return OutOfMemory("injected: mmap refused");
  }
  void unmap(std::byte*, size_t) override { ADD_FAILURE() << "nothing was mapped"; }
};

TEST(RamTierTest, PagesTheSystemRefusesChargeNothingAndAreCounted) {
  std::printf("fault: RamPages::map answers OutOfMemory\n");
  RamTier tier(16 * kPage, std::make_unique<RefusingPages>());
  Result<RamBlock> refused = tier.allocate(kPage);
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(tier.stats().used_bytes, 0u);
  EXPECT_EQ(tier.stats().blocks, 0u);
  EXPECT_EQ(tier.stats().allocation_failures, 1u);
}

// Threads allocate and give back at once: the budget is never passed, and every byte comes
// back (run under TSan with the concurrency label).
TEST(RamTierTest, ThreadsNeverPassTheBudgetTogether) {
  constexpr uint64_t kBudget = 8 * kPage;
  RamTier tier(kBudget);
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, &over, t] {
      for (int i = 0; i < 500; ++i) {
        Result<RamBlock> block = tier.allocate(kPage * (1 + (t + i) % 3));
        if (tier.stats().used_bytes > kBudget) over = true;
        if (block.ok()) std::memset(block->data(), t, block->size());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(tier.stats().used_bytes, 0u);
  EXPECT_EQ(tier.stats().blocks, 0u);
}

// A device region and a host region, some of each saved, copied out and back.
class RamSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim_ = SimBackend::create(test_util::small_sim_options()).value();
    range_ = sim_->reserve(4 * sim_->granularity()).value();
    ASSERT_TRUE(sim_->commit(range_).ok());
    host_.assign(3 * kPage, std::byte{0});
    // Bytes that say where they are, so a piece put back at the wrong place shows.
    device_bytes_ = reinterpret_cast<std::byte*>(range_.base);
    for (size_t i = 0; i < range_.size; ++i) device_bytes_[i] = std::byte(i * 7 + 1);
    for (size_t i = 0; i < host_.size(); ++i) host_[i] = std::byte(i * 13 + 5);
  }
  void TearDown() override { sim_->unreserve(range_); }

  std::vector<SnapshotRegion> regions(std::vector<snapshot::Extent> device_extents,
                                      std::vector<snapshot::Extent> host_extents) {
    SnapshotRegion device;
    device.layout = {"device", snapshot::PersistKind::kContents, range_.size,
                     std::move(device_extents)};
    device.place = SnapshotRegion::Place::kDevice;
    device.device = range_.base;
    SnapshotRegion host;
    host.layout = {"host", snapshot::PersistKind::kContents, host_.size(), std::move(host_extents)};
    host.place = SnapshotRegion::Place::kHost;
    host.host = host_.data();
    return {device, host};
  }

  std::unique_ptr<SimBackend> sim_;
  DeviceRange range_;
  std::byte* device_bytes_ = nullptr;
  std::vector<std::byte> host_;
};

TEST_F(RamSnapshotTest, EverySavedByteComesBackToItsPlaceAndNothingElseIsTouched) {
  RamTier tier(uint64_t{64} << 20);
  // A device extent longer than one staging buffer, so it is copied in several pieces.
  const uint64_t long_extent = sim_->staging_buffer_bytes() * 2 + 123;
  ASSERT_LE(long_extent + 5000, range_.size);
  const auto saved = regions({{0, 100}, {5000, long_extent}}, {{10, 20}, {kPage, kPage}});
  std::vector<std::byte> device_before(device_bytes_, device_bytes_ + range_.size);
  const std::vector<std::byte> host_before = host_;
  bool read_reported = false;
  Result<RamSnapshot> ram = copy_to_ram(tier, *sim_, saved, nullptr, [&] { read_reported = true; });
  ASSERT_TRUE(ram.ok()) << ram.status().to_string();
  EXPECT_TRUE(read_reported);
  EXPECT_EQ(ram->payload_bytes, 100 + long_extent + 20 + kPage);
  EXPECT_EQ(saved_payload_bytes(saved), ram->payload_bytes);

  // Everything is overwritten, then the snapshot is copied back: the saved bytes are as
  // before, the others as overwritten.
  std::memset(device_bytes_, 0xee, range_.size);
  std::memset(host_.data(), 0xdd, host_.size());
  ASSERT_TRUE(copy_from_ram(*ram, *sim_, saved).ok());
  for (size_t i = 0; i < range_.size; ++i) {
    const bool in_saved = i < 100 || (i >= 5000 && i < 5000 + long_extent);
    ASSERT_EQ(device_bytes_[i], in_saved ? device_before[i] : std::byte{0xee}) << "device " << i;
  }
  for (size_t i = 0; i < host_.size(); ++i) {
    const bool in_saved = (i >= 10 && i < 30) || (i >= kPage && i < 2 * kPage);
    ASSERT_EQ(host_[i], in_saved ? host_before[i] : std::byte{0xdd}) << "host " << i;
  }
}

TEST_F(RamSnapshotTest, ARaisedCancelStopsTheCopyAndKeepsNothing) {
  RamTier tier(uint64_t{64} << 20);
  std::atomic<bool> cancel{true};
  Result<RamSnapshot> ram = copy_to_ram(tier, *sim_, regions({{0, 100}}, {}), &cancel, nullptr);
  EXPECT_EQ(ram.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(tier.stats().used_bytes, 0u);
}

TEST_F(RamSnapshotTest, ACopyTheTierHasNoRoomForReadsNothing) {
  RamTier tier(kPage);
  bool read_reported = false;
  Result<RamSnapshot> ram = copy_to_ram(tier, *sim_, regions({{0, 2 * kPage}}, {}), nullptr,
                                        [&] { read_reported = true; });
  EXPECT_EQ(ram.status().code(), StatusCode::kOutOfMemory);
  EXPECT_FALSE(read_reported);
}

TEST_F(RamSnapshotTest, RegionsOfAnotherLayoutAreRefusedBeforeAnyCopy) {
  RamTier tier(uint64_t{64} << 20);
  Result<RamSnapshot> ram = copy_to_ram(tier, *sim_, regions({{0, 100}}, {{0, 10}}), nullptr, {});
  ASSERT_TRUE(ram.ok());
  std::memset(host_.data(), 0xdd, host_.size());
  auto other = regions({{0, 100}}, {{0, 10}});
  other[1].layout.size -= 1;
  EXPECT_EQ(copy_from_ram(*ram, *sim_, other).code(), StatusCode::kForeign);
  EXPECT_EQ(host_[0], std::byte{0xdd}) << "nothing copied";
  other.pop_back();
  EXPECT_EQ(copy_from_ram(*ram, *sim_, other).code(), StatusCode::kForeign);
}

}  // namespace
}  // namespace siesta
