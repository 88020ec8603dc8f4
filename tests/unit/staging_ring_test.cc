#include "core/memory/staging_ring.h"

#include <gtest/gtest.h>

#include <vector>

namespace siesta {
namespace {

// The ring only needs an owner to hand buffers back to; this one records what came back.
class RecordingOwner : public MemoryBackend {
 public:
  explicit RecordingOwner(StagingRing* ring) : ring_(ring) {}
  std::vector<uint32_t> returned;

  std::string name() const override { return "recording"; }
  size_t granularity() const override { return 4096; }
  Result<DeviceRange> reserve(size_t) override { return Unsupported("test"); }
  Status commit(DeviceRange) override { return Unsupported("test"); }
  Status decommit(DeviceRange) override { return Unsupported("test"); }
  void unreserve(DeviceRange) override {}
  Status synchronize() override { return Status::Ok(); }
  Status zero(DeviceRange) override { return Unsupported("test"); }
  size_t staging_buffer_bytes() const override { return ring_->buffer_bytes(); }
  size_t staging_buffer_count() const override { return ring_->count(); }
  Result<StagingBuffer> acquire_staging() override { return ring_->acquire(this); }
  Result<CopyTicket> copy_to_staging(DeviceAddress, size_t, StagingBuffer&) override {
    return Unsupported("test");
  }
  Result<CopyTicket> copy_from_staging(const StagingBuffer&, size_t, DeviceAddress) override {
    return Unsupported("test");
  }
  Status wait(CopyTicket) override { return Status::Ok(); }
  MemoryStats stats() const override { return {}; }

 private:
  void release_staging(uint32_t slot) override {
    returned.push_back(slot);
    ring_->mark_free(slot);
  }
  StagingRing* ring_;
};

TEST(StagingRingTest, LendsEachBufferOnceUntilGivenBack) {
  std::vector<std::byte> memory(3 * 64);
  StagingRing ring({{memory.data(), 64}, {memory.data() + 64, 64}, {memory.data() + 128, 64}});
  RecordingOwner owner(&ring);
  EXPECT_EQ(ring.count(), 3u);
  EXPECT_EQ(ring.buffer_bytes(), 64u);

  std::vector<StagingBuffer> held;
  for (int i = 0; i < 3; ++i) {
    Result<StagingBuffer> buffer = owner.acquire_staging();
    ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
    held.push_back(std::move(buffer).value());
  }
  EXPECT_NE(held[0].bytes().data(), held[1].bytes().data());
  EXPECT_NE(held[1].bytes().data(), held[2].bytes().data());

  Result<StagingBuffer> fourth = owner.acquire_staging();
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(fourth.status().code(), StatusCode::kFailedPrecondition);

  uint32_t given_back = held[1].slot();
  held[1].reset();
  EXPECT_EQ(owner.returned, std::vector<uint32_t>{given_back});
  Result<StagingBuffer> again = owner.acquire_staging();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->slot(), given_back);
}

TEST(StagingRingTest, RemembersTheLastCopyOfEachSlotUntilFree) {
  std::vector<std::byte> memory(64);
  StagingRing ring({{memory.data(), 64}});
  ring.note_copy(0, CopyTicket{41});
  ring.note_copy(0, CopyTicket{42});
  EXPECT_EQ(ring.last_copy(0).sequence, 42u);
  ring.mark_free(0);
  EXPECT_EQ(ring.last_copy(0).sequence, 0u);
}

TEST(StagingBufferTest, MoveTransfersOwnershipAndReturnsOnce) {
  std::vector<std::byte> memory(64);
  StagingRing ring({{memory.data(), 64}});
  RecordingOwner owner(&ring);
  {
    StagingBuffer first = std::move(owner.acquire_staging()).value();
    StagingBuffer second = std::move(first);
    EXPECT_FALSE(first.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_TRUE(second.valid());
  }
  EXPECT_EQ(owner.returned.size(), 1u);
}

}  // namespace
}  // namespace siesta
