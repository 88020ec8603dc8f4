// RamTier: blocks within one budget, given back when destroyed; RamSnapshot: a session's
// regions copied into a block and back, on the simulator's device and in host memory.
#include "core/offload/ram_tier.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/memory_backend_wrapper.h"
#include "core/offload/ram_snapshot.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "testing/faulty_backend.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/small_sim_options.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

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
  threads.reserve(4);
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

// Counts the copies each path makes, so a test knows which one ran.
class CopyCountingBackend final : public MemoryBackendWrapper {
 public:
  explicit CopyCountingBackend(MemoryBackend& inner) : MemoryBackendWrapper(inner) {}
  Result<CopyTicket> copy_to_staging(DeviceAddress source, size_t bytes,
                                     StagingBuffer& buffer) override {
    ++staging_copies;
    return MemoryBackendWrapper::copy_to_staging(source, bytes, buffer);
  }
  Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                       DeviceAddress destination) override {
    ++staging_copies;
    return MemoryBackendWrapper::copy_from_staging(buffer, bytes, destination);
  }
  Result<CopyTicket> copy_to_host(DeviceAddress source, size_t bytes,
                                  std::byte* destination) override {
    ++direct_copies;
    return MemoryBackendWrapper::copy_to_host(source, bytes, destination);
  }
  Result<CopyTicket> copy_from_host(const std::byte* source, size_t bytes,
                                    DeviceAddress destination) override {
    ++direct_copies;
    return MemoryBackendWrapper::copy_from_host(source, bytes, destination);
  }
  int staging_copies = 0;
  int direct_copies = 0;
};

// A device region and a host region, some of each saved, copied out and back; through the
// staging ring (plain pages) and directly (pages registered with the backend).
class RamSnapshotTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    sim_ = SimBackend::create(test_util::small_sim_options()).value();
    counting_ = std::make_unique<CopyCountingBackend>(*sim_);
    range_ = sim_->reserve(4 * sim_->granularity()).value();
    ASSERT_TRUE(sim_->commit(range_).ok());
    host_.assign(3 * kPage, std::byte{0});
    // Bytes that say where they are, so a piece put back at the wrong place shows.
    device_bytes_ = reinterpret_cast<std::byte*>(range_.base);  // NOLINT(performance-no-int-to-ptr)
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

  bool direct() const { return GetParam(); }
  std::unique_ptr<RamTier> make_tier(uint64_t budget) {
    std::unique_ptr<RamPages> pages = std::make_unique<AnonymousRamPages>();
    if (direct()) pages = std::make_unique<RegisteredRamPages>(*sim_, std::move(pages));
    return std::make_unique<RamTier>(budget, std::move(pages));
  }

  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<CopyCountingBackend> counting_;
  DeviceRange range_;
  std::byte* device_bytes_ = nullptr;
  std::vector<std::byte> host_;
};

TEST_P(RamSnapshotTest, EverySavedByteComesBackToItsPlaceAndNothingElseIsTouched) {
  std::unique_ptr<RamTier> tier = make_tier(uint64_t{64} << 20);
  // A device extent longer than one staging buffer, so it is copied in several pieces.
  const uint64_t long_extent = sim_->staging_buffer_bytes() * 2 + 123;
  ASSERT_LE(long_extent + 5000, range_.size);
  const auto saved = regions({{0, 100}, {5000, long_extent}}, {{10, 20}, {kPage, kPage}});
  std::vector<std::byte> device_before(device_bytes_, device_bytes_ + range_.size);
  const std::vector<std::byte> host_before = host_;
  bool read_reported = false;
  Result<RamSnapshot> ram =
      copy_to_ram(*tier, *counting_, saved, nullptr, [&] { read_reported = true; });
  ASSERT_TRUE(ram.ok()) << ram.status().to_string();
  EXPECT_TRUE(read_reported);
  EXPECT_EQ(ram->payload_bytes, 100 + long_extent + 20 + kPage);
  EXPECT_EQ(saved_payload_bytes(saved), ram->payload_bytes);

  // Everything is overwritten, then the snapshot is copied back: the saved bytes are as
  // before, the others as overwritten.
  std::memset(device_bytes_, 0xee, range_.size);
  std::memset(host_.data(), 0xdd, host_.size());
  ASSERT_TRUE(copy_from_ram(*ram, *counting_, saved).ok());
  // Directly: one copy per device extent each way (each is under a piece); else staging
  // buffers, the long extent in several pieces.
  EXPECT_EQ(counting_->direct_copies, direct() ? 4 : 0);
  EXPECT_EQ(counting_->staging_copies, direct() ? 0 : 2 * (1 + 3));
  for (size_t i = 0; i < range_.size; ++i) {
    const bool in_saved = i < 100 || (i >= 5000 && i < 5000 + long_extent);
    ASSERT_EQ(device_bytes_[i], in_saved ? device_before[i] : std::byte{0xee}) << "device " << i;
  }
  for (size_t i = 0; i < host_.size(); ++i) {
    const bool in_saved = (i >= 10 && i < 30) || (i >= kPage && i < 2 * kPage);
    ASSERT_EQ(host_[i], in_saved ? host_before[i] : std::byte{0xdd}) << "host " << i;
  }
}

// What a spill to disk hands the snapshot writer: the block seen as host regions of the
// session's layout, each saved byte where host + offset says. Each region's span keeps its
// gaps (none for a session's one extent per region), so the block holds the spans' bytes.
TEST_P(RamSnapshotTest, TheBlockSeenAsHostRegionsHoldsEverySavedByteAtItsOffset) {
  std::unique_ptr<RamTier> tier = make_tier(uint64_t{64} << 20);
  const auto saved = regions({{100, 50}, {1000, 3000}, {9000, 1}}, {{kPage + 7, 9}});
  const std::vector<std::byte> device_before(device_bytes_, device_bytes_ + range_.size);
  const std::vector<std::byte> host_before = host_;
  SIESTA_ASSERT_OK_AND_ASSIGN(RamSnapshot ram, copy_to_ram(*tier, *counting_, saved, nullptr, {}));
  EXPECT_EQ(ram.payload_bytes, 50u + 3000 + 1 + 9);
  EXPECT_GE(ram.block.size(), (9001u - 100) + 9) << "each region's span, gaps included";
  const std::vector<SnapshotRegion> view = ram_regions(ram);
  ASSERT_EQ(view.size(), saved.size());
  for (size_t r = 0; r < view.size(); ++r) {
    EXPECT_EQ(view[r].place, SnapshotRegion::Place::kHost);
    EXPECT_EQ(view[r].layout.name, saved[r].layout.name);
    EXPECT_EQ(view[r].layout.size, saved[r].layout.size);
    ASSERT_EQ(view[r].layout.extents.size(), saved[r].layout.extents.size());
    const std::vector<std::byte>& before = r == 0 ? device_before : host_before;
    for (const snapshot::Extent& extent : view[r].layout.extents) {
      SCOPED_TRACE("region " + std::to_string(r) + " extent at " + std::to_string(extent.offset));
      const std::byte* held = view[r].host + extent.offset;
      ASSERT_GE(held, ram.block.data());
      ASSERT_LE(held + extent.length, ram.block.data() + ram.block.size());
      EXPECT_EQ(std::memcmp(held, before.data() + extent.offset, extent.length), 0);
    }
  }
}

// The spill to disk end to end, without the Offloader: the block, seen as host regions, is
// written by the snapshot writer and read back by the reader straight into the session's
// device and host regions, every saved byte where it was and nothing else touched.
TEST_P(RamSnapshotTest, AFileWrittenFromTheBlockRestoresTheSessionsBytes) {
  std::unique_ptr<RamTier> tier = make_tier(uint64_t{64} << 20);
  const auto saved = regions({{0, 100}, {5000, 70000}}, {{10, 20}, {kPage, kPage}});
  const std::vector<std::byte> device_before(device_bytes_, device_bytes_ + range_.size);
  const std::vector<std::byte> host_before = host_;
  SIESTA_ASSERT_OK_AND_ASSIGN(RamSnapshot ram, copy_to_ram(*tier, *counting_, saved, nullptr, {}));

  testing::TempDir dir;
  PosixFileSystem fs;
  ManualClock clock;
  const ProcessKey key = snapshot_test::fixed_key(3);
  SnapshotWriteOptions write;
  write.path = dir.file("spilled.snap");
  write.mode = snapshot::SnapshotMode::kSessionEncrypted;
  write.fingerprint = snapshot_test::fingerprint(4);
  write.expiry_unix = clock.unix_seconds() + 100;
  write.chunk_bytes = 4096;  // many chunks, some across the regions' extents
  write.generation = 7;
  write.owner = "0";
  SnapshotWriter writer(fs, clock, key, sim_.get());
  SIESTA_ASSERT_OK(writer.write(write, ram_regions(ram)).status());
  ram.block.reset();  // the RAM copy goes once the file is durable

  std::memset(device_bytes_, 0xee, range_.size);
  std::memset(host_.data(), 0xdd, host_.size());
  SnapshotReadOptions read;
  read.path = write.path;
  read.mode = write.mode;
  read.fingerprint = write.fingerprint;
  read.generation = write.generation;
  read.owner = write.owner;
  SnapshotReader reader(fs, clock, key, sim_.get());
  SIESTA_ASSERT_OK(reader.read(read, saved).status());
  for (size_t i = 0; i < range_.size; ++i) {
    const bool in_saved = i < 100 || (i >= 5000 && i < 75000);
    ASSERT_EQ(device_bytes_[i], in_saved ? device_before[i] : std::byte{0xee}) << "device " << i;
  }
  for (size_t i = 0; i < host_.size(); ++i) {
    const bool in_saved = (i >= 10 && i < 30) || (i >= kPage && i < 2 * kPage);
    ASSERT_EQ(host_[i], in_saved ? host_before[i] : std::byte{0xdd}) << "host " << i;
  }
}

TEST_P(RamSnapshotTest, ARaisedCancelStopsTheCopyAndKeepsNothing) {
  std::unique_ptr<RamTier> tier = make_tier(uint64_t{64} << 20);
  std::atomic<bool> cancel{true};
  Result<RamSnapshot> ram =
      copy_to_ram(*tier, *counting_, regions({{0, 100}}, {}), &cancel, nullptr);
  EXPECT_EQ(ram.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(tier->stats().used_bytes, 0u);
}

TEST_P(RamSnapshotTest, ACopyTheTierHasNoRoomForReadsNothing) {
  std::unique_ptr<RamTier> tier = make_tier(kPage);
  bool read_reported = false;
  Result<RamSnapshot> ram = copy_to_ram(*tier, *counting_, regions({{0, 2 * kPage}}, {}), nullptr,
                                        [&] { read_reported = true; });
  EXPECT_EQ(ram.status().code(), StatusCode::kOutOfMemory);
  EXPECT_FALSE(read_reported);
}

TEST_P(RamSnapshotTest, RegionsOfAnotherLayoutAreRefusedBeforeAnyCopy) {
  std::unique_ptr<RamTier> tier = make_tier(uint64_t{64} << 20);
  Result<RamSnapshot> ram =
      copy_to_ram(*tier, *counting_, regions({{0, 100}}, {{0, 10}}), nullptr, {});
  ASSERT_TRUE(ram.ok());
  std::memset(host_.data(), 0xdd, host_.size());
  auto other = regions({{0, 100}}, {{0, 10}});
  other[1].layout.size -= 1;
  EXPECT_EQ(copy_from_ram(*ram, *counting_, other).code(), StatusCode::kForeign);
  EXPECT_EQ(host_[0], std::byte{0xdd}) << "nothing copied";
  other.pop_back();
  EXPECT_EQ(copy_from_ram(*ram, *counting_, other).code(), StatusCode::kForeign);
}

TEST_P(RamSnapshotTest, ACopyThatFailsKeepsNothingAndLeavesNoCopyInFlight) {
  std::unique_ptr<RamTier> tier = make_tier(uint64_t{64} << 20);
  const uint64_t long_extent = sim_->staging_buffer_bytes() * 2 + 123;
  // The second device copy fails (injected): the first was enqueued and must be waited for
  // before the block it writes into is given back.
  FaultyBackend faulty(*sim_, FaultPlan(FaultKind::kCopyFails, 2, /*sticky=*/false));
  SCOPED_TRACE(faulty.plan().describe());
  Result<RamSnapshot> ram =
      copy_to_ram(*tier, faulty, regions({{0, 100}, {5000, long_extent}}, {}), nullptr, {});
  EXPECT_EQ(ram.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(ram.status().message().find("injected"), std::string::npos);
  EXPECT_EQ(tier->stats().used_bytes, 0u);
  EXPECT_EQ(tier->stats().blocks, 0u);
}

INSTANTIATE_TEST_SUITE_P(StagingAndDirect, RamSnapshotTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("Direct") : std::string("Staging");
                         });

// A backend that refuses to pin: the pages are given back, nothing is charged, and the save
// goes elsewhere (the offloader writes it to disk).
class PinRefusingBackend final : public MemoryBackendWrapper {
 public:
  explicit PinRefusingBackend(MemoryBackend& inner) : MemoryBackendWrapper(inner) {}
  Status register_host(std::span<std::byte> memory) override {
    (void)memory;
    ++refusals;
    return OutOfMemory("injected: the system refused to pin the pages");
  }
  int refusals = 0;
};

class CountingPages final : public RamPages {
 public:
  Result<std::byte*> map(size_t bytes) override {
    ++mapped;
    return anonymous_.map(bytes);
  }
  void unmap(std::byte* pages, size_t bytes) override {
    ++unmapped;
    anonymous_.unmap(pages, bytes);
  }
  int mapped = 0;
  int unmapped = 0;

 private:
  AnonymousRamPages anonymous_;
};

TEST(RegisteredRamPagesTest, PagesTheBackendWillNotPinAreGivenBackAndChargeNothing) {
  std::unique_ptr<SimBackend> sim = SimBackend::create(test_util::small_sim_options()).value();
  PinRefusingBackend refusing(*sim);
  auto counting = std::make_unique<CountingPages>();
  CountingPages* pages = counting.get();
  RamTier tier(64 * kPage, std::make_unique<RegisteredRamPages>(refusing, std::move(counting)));
  EXPECT_TRUE(tier.device_copies());
  Result<RamBlock> block = tier.allocate(4 * kPage);
  EXPECT_EQ(block.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(block.status().message().find("injected"), std::string::npos);
  EXPECT_EQ(refusing.refusals, 1);
  EXPECT_EQ(pages->mapped, 1);
  EXPECT_EQ(pages->unmapped, 1) << "the refused pages are given back";
  EXPECT_EQ(tier.stats().used_bytes, 0u);
  EXPECT_EQ(tier.stats().allocation_failures, 1u);
}

TEST(RegisteredRamPagesTest, ABlockIsRegisteredWhileItLivesAndUnregisteredAfter) {
  std::unique_ptr<SimBackend> sim = SimBackend::create(test_util::small_sim_options()).value();
  RamTier tier(64 * kPage,
               std::make_unique<RegisteredRamPages>(*sim, std::make_unique<AnonymousRamPages>()));
  SIESTA_ASSERT_OK_AND_ASSIGN(RamBlock block, tier.allocate(2 * kPage));
  EXPECT_TRUE(block.device_copies());
  // Registered: registering it again is an overlap.
  SIESTA_EXPECT_CODE(sim->register_host({block.data(), 2 * kPage}), StatusCode::kInvalidArgument);
  std::byte* data = block.data();
  block.reset();
  // Unregistered (and unmapped): the same addresses may be registered by their next owner.
  void* again = ::mmap(data, 2 * kPage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_NE(again, MAP_FAILED) << "the block's pages were not given back";
  SIESTA_EXPECT_OK(sim->register_host({data, 2 * kPage}));
  sim->unregister_host(data);
  ::munmap(again, 2 * kPage);
}

TEST(RamTierTest, TheServersDefaultBudgetIsAQuarterOfTheMachineAtMostEightGiB) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(default_ram_tier_bytes(16 * kGiB), 4 * kGiB);
  EXPECT_EQ(default_ram_tier_bytes(64 * kGiB), 8 * kGiB);
  EXPECT_EQ(default_ram_tier_bytes(1024 * kGiB), 8 * kGiB);
  EXPECT_EQ(default_ram_tier_bytes(10 * kGiB + 3), uint64_t{2560} << 20) << "whole MiB";
  EXPECT_EQ(default_ram_tier_bytes(0), 0u) << "unknown memory: no tier";
}

}  // namespace
}  // namespace siesta
