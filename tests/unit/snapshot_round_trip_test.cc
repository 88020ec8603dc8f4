// SnapshotWriter and SnapshotReader together, round trips in every mode: host and device
// (SimBackend, through the staging ring) regions, sparse extents, a huge region with small
// extents, a ring mostly held elsewhere, chunks larger than a staging buffer, an empty snapshot,
// and encrypted chunks that do not show their bytes.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/snapshot_file_fixture.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::Extent;
using snapshot::PersistKind;
using snapshot::SnapshotMode;
using snapshot_test::host_region;

class SnapshotRoundTripTest : public snapshot_test::SnapshotFileFixture {};

TEST_P(SnapshotRoundTripTest, HostRegionsRoundTripOnlyTheirExtents) {
  const auto source = sample(42);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written,
                              writer.write(write_options(), views(source)));
  EXPECT_EQ(written.payload_bytes, 1u + 2500 + 1000 + 777);
  EXPECT_EQ(written.file_bytes, snapshot_test::read_file(path()).size());
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);  // no temporary left

  auto dest = sample(0);
  for (auto& h : dest) std::memset(h.bytes.data(), 0xee, h.bytes.size());
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotReadResult read, reader.read(read_options(), views(dest)));
  EXPECT_EQ(read.payload_bytes, written.payload_bytes);
  EXPECT_EQ(read.header.file_id, written.file_id);
  for (size_t r = 0; r < dest.size(); ++r) {
    std::vector<bool> saved(dest[r].bytes.size(), false);
    for (const Extent& e : source[r].region.layout.extents) {
      for (uint64_t i = e.offset; i < e.offset + e.length; ++i) saved[i] = true;
    }
    for (size_t i = 0; i < saved.size(); ++i) {
      const std::byte want = saved[i] ? source[r].bytes[i] : std::byte{0xee};
      ASSERT_EQ(dest[r].bytes[i], want) << "region " << r << " byte " << i;
    }
  }
}

TEST_P(SnapshotRoundTripTest, DeviceAndHostRegionsRoundTripThroughStaging) {
  // 64 KiB granules and a 48 KiB staging buffer, which divides neither the region nor the
  // extents, so chunks end at odd places.
  SimBackendOptions sim_options;
  sim_options.capacity_bytes = 16u << 20;
  sim_options.granularity = 64u << 10;
  sim_options.max_chunk_bytes = 256u << 10;
  sim_options.staging_buffer_bytes = 48u << 10;
  sim_options.staging_buffer_count = 3;
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimBackend> sim, SimBackend::create(sim_options));
  MemoryBackend& backend = *sim;
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange range, ReservedRange::reserve(backend, 1u << 20));
  SIESTA_ASSERT_OK(backend.commit(range.range()));
  const size_t size = 300'001;  // not a multiple of the 48 KiB staging buffer
  const auto pattern = test_util::make_pattern(size, 77);
  SIESTA_ASSERT_OK(test_util::write_device(backend, range.range().base, pattern));
  auto host = host_region("ckpt", 5000, {{100, 4900}}, 5);
  SnapshotRegion device;
  device.layout = {"kv", PersistKind::kContents, size, {{0, 200'000}, {250'000, 50'001}}};
  device.place = SnapshotRegion::Place::kDevice;
  device.device = range.range().base;
  std::vector<SnapshotRegion> regions = {device, host.region};

  SnapshotWriter writer(fs_, clock_, key_, &backend);
  SnapshotWriteOptions options = write_options();
  options.chunk_bytes = 1u << 20;  // lowered to the staging buffer size
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written, writer.write(options, regions));
  EXPECT_EQ(written.payload_bytes, 250'001u + 4900);

  SIESTA_ASSERT_OK(backend.zero(range.range()));
  std::memset(host.bytes.data(), 0, host.bytes.size());
  SnapshotReader reader(fs_, clock_, key_, &backend);
  SIESTA_ASSERT_OK(reader.read(read_options(), regions));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto back, test_util::read_device(backend, range.range().base, size));
  auto expected = pattern;
  std::memset(expected.data() + 200'000, 0, 50'000);  // the gap was not saved
  EXPECT_EQ(test_util::first_difference(back, expected), -1);
  const auto host_pattern = test_util::make_pattern(5000, 5);
  EXPECT_EQ(test_util::first_difference(std::span(host.bytes).subspan(100),
                                        std::span(host_pattern).subspan(100)),
            -1);
}

// A region of several GiB described, a few KiB saved: the file holds only the extents, and
// the reader touches only their pages (the memory is reserved, not committed).
TEST_P(SnapshotRoundTripTest, HugeRegionWithSmallExtents) {
  const size_t size = 6ull << 30;
  void* raw = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  std::unique_ptr<void, std::function<void(void*)>> unmap(raw,
                                                          [size](void* p) { ::munmap(p, size); });
  auto* bytes = static_cast<std::byte*>(raw);
  const std::vector<Extent> extents = {{0, 100}, {5ull << 30, 3000}, {size - 10, 10}};
  for (const Extent& e : extents) {
    for (uint64_t i = 0; i < e.length; ++i)
      bytes[e.offset + i] = test_util::pattern_byte(8, e.offset + i);
  }
  SnapshotRegion region;
  region.layout = {"kv", PersistKind::kContents, size, extents};
  region.host = bytes;
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written,
                              writer.write(write_options(), std::span(&region, 1)));
  EXPECT_LT(written.file_bytes, 8000u);
  for (const Extent& e : extents) std::memset(bytes + e.offset, 0, e.length);
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(reader.read(read_options(), std::span(&region, 1)));
  for (const Extent& e : extents) {
    for (uint64_t i = 0; i < e.length; ++i) {
      ASSERT_EQ(bytes[e.offset + i], test_util::pattern_byte(8, e.offset + i)) << e.offset + i;
    }
  }
}

// With part of the staging ring lent elsewhere, writer and reader go on with the buffers
// they can get.
TEST_P(SnapshotRoundTripTest, DeviceRegionWithMostOfTheRingHeldElsewhere) {
  SimBackendOptions sim_options;
  sim_options.capacity_bytes = 16u << 20;
  sim_options.granularity = 64u << 10;
  sim_options.max_chunk_bytes = 256u << 10;
  sim_options.staging_buffer_bytes = 16u << 10;
  sim_options.staging_buffer_count = 3;
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimBackend> sim, SimBackend::create(sim_options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange range, ReservedRange::reserve(*sim, 256u << 10));
  SIESTA_ASSERT_OK(sim->commit(range.range()));
  const auto pattern = test_util::make_pattern(200'000, 3);
  SIESTA_ASSERT_OK(test_util::write_device(*sim, range.range().base, pattern));
  SnapshotRegion device;
  device.layout = {"kv", PersistKind::kContents, pattern.size(), {{0, pattern.size()}}};
  device.place = SnapshotRegion::Place::kDevice;
  device.device = range.range().base;
  {
    SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer held1, sim->acquire_staging());
    SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer held2, sim->acquire_staging());
    SnapshotWriter writer(fs_, clock_, key_, sim.get());
    SIESTA_ASSERT_OK(writer.write(write_options(), std::span(&device, 1)));
    SIESTA_ASSERT_OK(sim->zero(range.range()));
    SnapshotReader reader(fs_, clock_, key_, sim.get());
    SIESTA_ASSERT_OK(reader.read(read_options(), std::span(&device, 1)));
  }
  SIESTA_ASSERT_OK_AND_ASSIGN(auto back,
                              test_util::read_device(*sim, range.range().base, pattern.size()));
  EXPECT_EQ(test_util::first_difference(back, pattern), -1);
}

// A file written from host memory restored onto a device whose staging buffers are smaller
// than the file's chunks: the reader opens such chunks in host memory and streams them over.
TEST_P(SnapshotRoundTripTest, ChunksLargerThanStagingBuffersReachTheDevice) {
  SimBackendOptions sim_options;
  sim_options.capacity_bytes = 16u << 20;
  sim_options.granularity = 64u << 10;
  sim_options.max_chunk_bytes = 256u << 10;
  sim_options.staging_buffer_bytes = 300;  // the file's chunks are 1000 bytes
  sim_options.staging_buffer_count = 2;
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimBackend> sim, SimBackend::create(sim_options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange range, ReservedRange::reserve(*sim, 64u << 10));
  SIESTA_ASSERT_OK(sim->commit(range.range()));
  SIESTA_ASSERT_OK(sim->zero(range.range()));
  auto host = host_region("kv", 5000, {{0, 200}, {700, 4000}}, 11);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options(), std::span(&host.region, 1)));
  SnapshotRegion device = host.region;
  device.place = SnapshotRegion::Place::kDevice;
  device.host = nullptr;
  device.device = range.range().base;
  SnapshotReader reader(fs_, clock_, key_, sim.get());
  SIESTA_ASSERT_OK(reader.read(read_options(), std::span(&device, 1)));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto back, test_util::read_device(*sim, range.range().base, 5000));
  auto expected = host.bytes;
  std::fill(expected.begin() + 200, expected.begin() + 700, std::byte{0});
  std::fill(expected.begin() + 4700, expected.end(), std::byte{0});
  EXPECT_EQ(test_util::first_difference(back, expected), -1);
}

TEST_P(SnapshotRoundTripTest, EmptySnapshotRoundTrips) {
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options(), {}));
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotReadResult read, reader.read(read_options(), {}));
  EXPECT_EQ(read.payload_bytes, 0u);
}

TEST_P(SnapshotRoundTripTest, EncryptedChunksDoNotShowTheirBytes) {
  auto regions = sample(3);
  std::memset(regions[1].bytes.data(), 'Z', regions[1].bytes.size());
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options(), views(regions)));
  const auto file = snapshot_test::read_file(path());
  const std::string run(64, 'Z');
  const bool visible = std::search(file.begin(), file.end(), run.begin(), run.end()) != file.end();
  EXPECT_EQ(visible, mode() != SnapshotMode::kSessionEncrypted);
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotRoundTripTest, snapshot_test::kEveryMode,
                         snapshot_test::mode_test_name);

}  // namespace
}  // namespace siesta
