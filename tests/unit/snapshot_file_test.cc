// SnapshotWriter and SnapshotReader together: round trips of host and device (SimBackend)
// regions in every mode, sparse extents, the write protocol's promises (NoSpace before a
// byte, cancellation, no temporary file left, an earlier snapshot untouched) and each typed
// outcome of the reader.
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
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::Extent;
using snapshot::PersistKind;
using snapshot::SnapshotMode;
using snapshot_test::host_region;
using snapshot_test::HostRegion;

class SnapshotFileTest : public ::testing::TestWithParam<SnapshotMode> {
 protected:
  SnapshotMode mode() const { return GetParam(); }
  std::string path() const { return dir_.file("s.snap"); }

  SnapshotWriteOptions write_options() const {
    SnapshotWriteOptions o;
    o.path = path();
    o.mode = mode();
    o.fingerprint = snapshot_test::fingerprint(9);
    o.expiry_unix = clock_.unix_seconds() + 100;
    o.chunk_bytes = 1000;  // small: many chunks, odd boundaries
    return o;
  }
  SnapshotReadOptions read_options() const {
    return {path(), mode(), snapshot_test::fingerprint(9)};
  }

  // Two host regions (one sparse) and a reinit region, written with `key_`.
  std::vector<HostRegion> sample(uint64_t seed) const {
    std::vector<HostRegion> r;
    r.push_back(host_region("kv", 5000, {{0, 1}, {10, 2500}, {4000, 1000}}, seed));
    r.push_back(host_region("ckpt", 777, {{0, 777}}, seed + 1));
    r.push_back(host_region("rope", 128, {}, seed + 2, PersistKind::kReinit));
    return r;
  }
  static std::vector<SnapshotRegion> views(const std::vector<HostRegion>& r) {
    std::vector<SnapshotRegion> out;
    for (const auto& h : r) out.push_back(h.region);
    return out;
  }
  Result<SnapshotWriteResult> write_sample(uint64_t seed) {
    auto regions = sample(seed);
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    return writer.write(write_options(), views(regions));
  }
  // Reads into fresh zeroed regions shaped like sample().
  Status read_sample(const ProcessKey& key) {
    auto regions = sample(0);
    for (auto& h : regions) std::memset(h.bytes.data(), 0, h.bytes.size());
    SnapshotReader reader(fs_, clock_, key, nullptr);
    return reader.read(read_options(), views(regions)).status();
  }

  testing::TempDir dir_;
  PosixFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(1);
};

TEST_P(SnapshotFileTest, HostRegionsRoundTripOnlyTheirExtents) {
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

TEST_P(SnapshotFileTest, DeviceAndHostRegionsRoundTripThroughStaging) {
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
TEST_P(SnapshotFileTest, HugeRegionWithSmallExtents) {
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
TEST_P(SnapshotFileTest, DeviceRegionWithMostOfTheRingHeldElsewhere) {
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
TEST_P(SnapshotFileTest, ChunksLargerThanStagingBuffersReachTheDevice) {
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

TEST_P(SnapshotFileTest, EmptySnapshotRoundTrips) {
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options(), {}));
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotReadResult read, reader.read(read_options(), {}));
  EXPECT_EQ(read.payload_bytes, 0u);
}

TEST_P(SnapshotFileTest, MissingFileIsNotFound) {
  SIESTA_EXPECT_CODE(read_sample(key_), StatusCode::kNotFound);
}

TEST_P(SnapshotFileTest, OtherProcessKeyIsForeignUnlessExported) {
  SIESTA_ASSERT_OK(write_sample(1));
  ProcessKey other = snapshot_test::fixed_key(2);
  if (mode() == SnapshotMode::kDurableExport) {
    SIESTA_EXPECT_OK(read_sample(other));  // an export belongs to no process
  } else {
    SIESTA_EXPECT_CODE(read_sample(other), StatusCode::kForeign);
  }
}

TEST_P(SnapshotFileTest, OtherFingerprintOrLayoutOrModeIsForeign) {
  SIESTA_ASSERT_OK(write_sample(1));
  auto regions = sample(0);
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SnapshotReadOptions o = read_options();
  o.fingerprint[5] ^= 1;
  SIESTA_EXPECT_CODE(reader.read(o, views(regions)), StatusCode::kForeign);
  o = read_options();
  o.mode = mode() == SnapshotMode::kSessionEncrypted ? SnapshotMode::kSessionDigest
                                                     : SnapshotMode::kSessionEncrypted;
  SIESTA_EXPECT_CODE(reader.read(o, views(regions)), StatusCode::kForeign);
  auto v = views(regions);
  v[1].layout.size += 1;
  SIESTA_EXPECT_CODE(reader.read(read_options(), v), StatusCode::kForeign);
  v = views(regions);
  v[2].layout.name = "rope2";
  SIESTA_EXPECT_CODE(reader.read(read_options(), v), StatusCode::kForeign);
  v = views(regions);
  v.pop_back();
  SIESTA_EXPECT_CODE(reader.read(read_options(), v), StatusCode::kForeign);
}

// A replay: an older snapshot of the same process and session put back where the newer one
// was. Its seals are good (same key, same layout); only the generation the caller expects
// tells it apart.
TEST_P(SnapshotFileTest, AnOlderGenerationPutBackIsForeign) {
  auto regions = sample(1);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SnapshotWriteOptions options = write_options();
  if (mode() == SnapshotMode::kDurableExport) {
    // An export has no generation: it may be imported again and again.
    options.generation = 1;
    SIESTA_EXPECT_CODE(writer.write(options, views(regions)), StatusCode::kInvalidArgument);
    options.generation = 0;
    SIESTA_ASSERT_OK(writer.write(options, views(regions)));
    for (int i = 0; i < 3; ++i) SIESTA_EXPECT_OK(read_sample(key_));
    return;
  }
  options.generation = 1;
  SIESTA_ASSERT_OK(writer.write(options, views(regions)));
  const auto first = snapshot_test::read_file(path());
  options.generation = 2;
  SIESTA_ASSERT_OK(writer.write(options, views(regions)));
  auto into = sample(0);
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SnapshotReadOptions read = read_options();
  read.generation = 2;
  SIESTA_EXPECT_OK(reader.read(read, views(into)));
  snapshot_test::write_file(path(), first);  // injected: the older file put back
  auto refused = reader.read(read, views(into));
  SIESTA_EXPECT_CODE(refused, StatusCode::kForeign);
  EXPECT_NE(refused.status().message().find("generation 1"), std::string::npos)
      << refused.status().to_string();
  read.generation = 1;
  SIESTA_EXPECT_OK(reader.read(read, views(into)));  // the file itself is intact
  // The generation is sealed with the header: changing its bytes breaks the seal, it does
  // not make an old file new.
  auto forged = first;
  forged[100] ^= 3;  // generation 1 -> 2 (docs/SNAPSHOT_FORMAT.md, offset 100)
  snapshot_test::write_file(path(), forged);
  read.generation = 2;
  SIESTA_EXPECT_CODE(reader.read(read, views(into)), StatusCode::kCorrupt);
}

// A FIFO (or a directory) put in place of a snapshot: refused at once, with the file system's
// typed error, never waited on (opening a FIFO for reading blocks until a writer comes).
TEST_P(SnapshotFileTest, AFifoOrDirectoryInPlaceOfTheSnapshotIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path().c_str(), 0600), 0);
  Status read;
  EXPECT_TRUE(test_util::finishes_without_blocking(path(), [&] { read = read_sample(key_); }))
      << "the reader blocked on a FIFO";
  SIESTA_EXPECT_CODE(read, StatusCode::kFailedPrecondition);
  EXPECT_NE(read.message().find("FIFO"), std::string::npos) << read.to_string();
  ASSERT_EQ(::unlink(path().c_str()), 0);
  ASSERT_EQ(::mkdir(path().c_str(), 0700), 0);
  SIESTA_EXPECT_CODE(read_sample(key_), StatusCode::kFailedPrecondition);
}

TEST_P(SnapshotFileTest, ExpiredExactlyAtTheDeadline) {
  SIESTA_ASSERT_OK(write_sample(1));
  clock_.advance(std::chrono::seconds(99));
  SIESTA_EXPECT_OK(read_sample(key_));
  clock_.advance(std::chrono::seconds(1));
  SIESTA_EXPECT_CODE(read_sample(key_), StatusCode::kExpired);
}

TEST_P(SnapshotFileTest, TruncationTrailingBytesMagicAndVersion) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto good = snapshot_test::read_file(path());
  auto damaged = [&](auto&& edit) {
    auto bytes = good;
    edit(bytes);
    snapshot_test::write_file(path(), bytes);
    return read_sample(key_);
  };
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b.resize(b.size() - 1); }), StatusCode::kTruncated);
  // Cut inside the trailer's body, on the boundary before it, and inside the last chunk
  // record (its tag).
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b.resize(b.size() - snapshot::kTrailerBytes + 3); }),
                     StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b.resize(b.size() - snapshot::kTrailerBytes); }),
                     StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(damaged([](auto& b) {
                       b.resize(b.size() - snapshot::kTrailerBytes - snapshot::kTagBytes / 2);
                     }),
                     StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b.resize(10); }), StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b.clear(); }), StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b.push_back(0); }), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b[0] = 'X'; }), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b[8] = snapshot::kFormatVersion + 1; }),
                     StatusCode::kUnsupported);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b[8] = 1; }), StatusCode::kUnsupported);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b[b.size() - 1] ^= 1; }), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b[200] ^= 1; }), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(damaged([](auto& b) { b[95] ^= 1; }), StatusCode::kCorrupt);  // expiry
}

// The file is cut after the reader took its size (another process truncating it mid-read):
// wherever the cut, in the header, a chunk record or the trailer, the short read is Truncated.
TEST_P(SnapshotFileTest, AFileThatShrinksWhileReadIsTruncated) {
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written, write_sample(1));
  const uint64_t size = written.file_bytes;
  for (uint64_t cut : {uint64_t{10}, uint64_t{snapshot::kMinHeaderBytes}, size / 2,
                       size - snapshot::kTrailerBytes - 1, size - 1}) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut) + " of " + std::to_string(size));
    snapshot_test::TestFileSystem shrinking;
    shrinking.shrink_after_size_at = cut;
    auto regions = sample(0);
    SnapshotReader reader(shrinking, clock_, key_, nullptr);
    const Status read = reader.read(read_options(), views(regions)).status();
    SIESTA_EXPECT_CODE(read, StatusCode::kTruncated);
  }
}

TEST_P(SnapshotFileTest, NoSpaceWritesNothing) {
  snapshot_test::TestFileSystem small(100);
  auto regions = sample(1);
  SnapshotWriter writer(small, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(write_options(), views(regions)), StatusCode::kNoSpace);
  EXPECT_EQ(small.creates, 0);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

TEST_P(SnapshotFileTest, CancelLeavesThePreviousSnapshotAndNoTemporary) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto previous = snapshot_test::read_file(path());
  std::atomic<bool> cancel{true};
  SnapshotWriteOptions o = write_options();
  o.cancel = &cancel;
  auto regions = sample(2);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(o, views(regions)), StatusCode::kCancelled);
  EXPECT_EQ(snapshot_test::read_file(path()), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
  SIESTA_EXPECT_OK(read_sample(key_));
}

TEST_P(SnapshotFileTest, CancelMidwayRemovesTheTemporaryFile) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto previous = snapshot_test::read_file(path());
  std::atomic<bool> cancel{false};
  int writes = 0;
  snapshot_test::TestFileSystem fs;
  fs.after_write = [&] {
    if (++writes == 3) cancel = true;  // header and two chunks are on disk by then
  };
  SnapshotWriteOptions o = write_options();
  o.cancel = &cancel;
  // The memory is let go before the temporary file is unlinked (slow for a large file).
  size_t files_when_read = 0;
  int reads_done = 0;
  o.on_memory_read = [&] {
    ++reads_done;
    files_when_read = snapshot_test::count_files(dir_.path());
  };
  auto regions = sample(2);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(o, views(regions)), StatusCode::kCancelled);
  EXPECT_GE(writes, 3);
  EXPECT_EQ(reads_done, 1);
  EXPECT_EQ(files_when_read, 2u) << "the previous snapshot and the temporary one";
  EXPECT_EQ(snapshot_test::read_file(path()), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
}

// The Offloader lets a waiting command run as soon as the writer has read the memory; a cancel
// raised then abandons the file before fdatasync (the slow step) and leaves nothing behind.
TEST_P(SnapshotFileTest, ACancelAfterTheLastReadAbandonsTheFileBeforeSyncing) {
  SIESTA_ASSERT_OK(write_sample(1));
  const auto previous = snapshot_test::read_file(path());
  std::atomic<bool> cancel{false};
  int reads_done = 0;
  int writes_when_read = 0;
  snapshot_test::TestFileSystem fs;
  int writes = 0;
  fs.after_write = [&] { ++writes; };
  SnapshotWriteOptions o = write_options();
  o.cancel = &cancel;
  o.on_memory_read = [&] {
    ++reads_done;
    writes_when_read = writes;
    cancel = true;
  };
  auto regions = sample(2);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(o, views(regions)), StatusCode::kCancelled);
  EXPECT_EQ(reads_done, 1);
  EXPECT_GE(writes_when_read, 2) << "called after the header and the chunks were written";
  EXPECT_EQ(writes, writes_when_read + 1) << "only the trailer after it";
  EXPECT_EQ(fs.syncs, 0) << "a cancelled write never waits for fdatasync";
  EXPECT_EQ(snapshot_test::read_file(path()), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
}

TEST_P(SnapshotFileTest, MemoryReadIsReportedOnceOnASuccessfulWrite) {
  int reads_done = 0;
  SnapshotWriteOptions o = write_options();
  o.on_memory_read = [&] { ++reads_done; };
  auto regions = sample(2);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(o, views(regions)).status());
  EXPECT_EQ(reads_done, 1);
  SIESTA_EXPECT_OK(read_sample(key_));
}

// The writer keeps its dirty bytes to a window: write-back starts for every chunk as it is
// written, and what lies further behind than the window is waited for, so no write stalls long
// in the kernel's throttling (a cancelling command waits for the write under way).
TEST_P(SnapshotFileTest, WriteBackFollowsTheWritesWithinTheWindow) {
  snapshot_test::TestFileSystem fs;
  SnapshotWriteOptions o = write_options();  // 1000-byte chunks: several windows' worth
  o.writeback_window_bytes = 2500;
  auto regions = sample(3);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written, writer.write(o, views(regions)));
  ASSERT_GT(written.chunk_count, 5u);
  const uint64_t largest_record = snapshot::kChunkHeaderBytes + 1000 + snapshot::kTagBytes;
  EXPECT_TRUE(fs.writeback.started_in_order) << "one contiguous range, header first";
  EXPECT_EQ(fs.writeback.started_end, written.file_bytes - snapshot::kTrailerBytes)
      << "every chunk's write-back started (the trailer goes with fdatasync)";
  EXPECT_GT(fs.writeback.waited_end, 0u);
  EXPECT_LE(fs.writeback.max_unwaited, o.writeback_window_bytes + largest_record);
  SIESTA_EXPECT_OK(read_sample(key_));
}

TEST_P(SnapshotFileTest, InvalidLayoutIsRefusedBeforeAnyFile) {
  auto regions = sample(1);
  auto v = views(regions);
  v[0].layout.extents = {{4000, 2000}};  // past the end
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_EXPECT_CODE(writer.write(write_options(), v), StatusCode::kInvalidArgument);
  v = views(regions);
  v[0].place = SnapshotRegion::Place::kDevice;  // no backend
  SIESTA_EXPECT_CODE(writer.write(write_options(), v), StatusCode::kInvalidArgument);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

TEST_P(SnapshotFileTest, EncryptedChunksDoNotShowTheirBytes) {
  auto regions = sample(3);
  std::memset(regions[1].bytes.data(), 'Z', regions[1].bytes.size());
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options(), views(regions)));
  const auto file = snapshot_test::read_file(path());
  const std::string run(64, 'Z');
  const bool visible = std::search(file.begin(), file.end(), run.begin(), run.end()) != file.end();
  EXPECT_EQ(visible, mode() != SnapshotMode::kSessionEncrypted);
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotFileTest,
                         ::testing::Values(SnapshotMode::kSessionEncrypted,
                                           SnapshotMode::kSessionDigest,
                                           SnapshotMode::kDurableExport),
                         [](const auto& param_info) {
                           std::string name(snapshot::snapshot_mode_name(param_info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The fuzz target's seeds (tests/fuzz/corpus/snapshot_reader): valid files of every mode, read
// back here with the key, clock and fingerprint the fuzz target uses. With
// SIESTA_WRITE_FUZZ_CORPUS=<dir> the files are also copied there (how the corpus was made).
// They are named *.seed: *.snap is ignored by git.
TEST(SnapshotFuzzCorpus, ValidSeedsReadBack) {
  testing::TempDir dir;
  PosixFileSystem fs;
  ManualClock clock;  // 1'800'000'000, as in the fuzz target
  const ProcessKey key = snapshot_test::fixed_key(1);
  const char* export_dir = std::getenv("SIESTA_WRITE_FUZZ_CORPUS");
  for (SnapshotMode mode : {SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest,
                            SnapshotMode::kDurableExport}) {
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<HostRegion> regions;
      if (variant == 1) {
        regions.push_back(host_region("kv", 300, {{0, 1}, {10, 150}, {200, 100}}, 1));
        regions.push_back(host_region("ckpt", 40, {{0, 40}}, 2));
        regions.push_back(host_region("rope", 16, {}, 3, PersistKind::kReinit));
      }
      std::vector<SnapshotRegion> views;
      for (const auto& h : regions) views.push_back(h.region);
      const std::string name =
          std::string(snapshot::snapshot_mode_name(mode)) + "-" + std::to_string(variant) + ".seed";
      SnapshotWriteOptions o;
      o.path = dir.file(name);
      o.mode = mode;
      o.fingerprint = snapshot_test::fingerprint(9);
      o.expiry_unix = clock.unix_seconds() + 10 * 365 * 86400;
      o.chunk_bytes = 64;
      // Session files of the second variant are a later save (exports have no generation).
      o.generation = mode == SnapshotMode::kDurableExport ? 0 : 3 * variant;
      SnapshotWriter writer(fs, clock, key, nullptr);
      SIESTA_ASSERT_OK(writer.write(o, views));
      SnapshotReader reader(fs, clock, key, nullptr);
      SnapshotReadOptions read{o.path, mode, o.fingerprint};
      read.generation = o.generation;
      SIESTA_EXPECT_OK(reader.read(read, views));
      if (export_dir != nullptr) {
        snapshot_test::write_file(std::string(export_dir) + "/" + name,
                                  snapshot_test::read_file(o.path));
      }
    }
  }
}

}  // namespace
}  // namespace siesta
