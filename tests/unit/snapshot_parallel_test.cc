// SnapshotWriter and SnapshotReader on several threads (core/snapshot/internal/chunk_pipeline.h):
// the thread count changes neither the file nor what a read restores or reports. Round trips with
// 1, 2 and 4 threads agree (host and device regions, every mode), device chunks smaller than a
// staging buffer share one per run of neighbouring chunks and go in one copy, the first failure
// in file order
// decides a read's outcome however the work is spread, a fault on any write leaves no file,
// and a cancelled write stops within a chunk or two.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/memory_backend_wrapper.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "testing/faulty_file_system.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::Extent;
using snapshot::PersistKind;
using snapshot::SnapshotMode;
using snapshot_test::host_region;
using snapshot_test::HostRegion;

constexpr uint32_t kThreadCounts[] = {1, 2, 4};

// A device region of `size` bytes at `address`, of which `extents` are saved.
SnapshotRegion device_region(const std::string& name, size_t size, std::vector<Extent> extents,
                             DeviceAddress address) {
  SnapshotRegion region;
  region.layout = {name, PersistKind::kContents, size, std::move(extents)};
  region.place = SnapshotRegion::Place::kDevice;
  region.device = address;
  return region;
}

std::vector<SnapshotRegion> views(const std::vector<HostRegion>& r) {
  std::vector<SnapshotRegion> out;
  out.reserve(r.size());
  for (const auto& h : r) out.push_back(h.region);
  return out;
}

// Where each chunk record lies in a file, from its (decoded, unverified) header.
struct Record {
  uint64_t offset = 0;
  uint32_t length = 0;  // payload bytes
};
std::vector<Record> records_of(const std::vector<uint8_t>& file) {
  auto prefix = snapshot::decode_prefix({file.data(), snapshot::kPrefixBytes});
  EXPECT_TRUE(prefix.ok()) << prefix.status().to_string();
  if (!prefix.ok()) return {};
  const uint32_t header_bytes = prefix->header_bytes;
  auto header =
      snapshot::decode_header_body(snapshot::split_sealed_header({file.data(), header_bytes}).body);
  EXPECT_TRUE(header.ok()) << header.status().to_string();
  std::vector<Record> out;
  if (!header.ok()) return out;
  uint64_t offset = header_bytes;
  snapshot::for_each_chunk(*header, [&](uint64_t, const snapshot::ChunkSpan& span) {
    out.push_back({offset, span.length});
    offset += snapshot::chunk_record_layout(span.length).size;
    return Status::Ok();
  }).ignore();
  return out;
}

class SnapshotParallelTest : public ::testing::TestWithParam<SnapshotMode> {
 protected:
  SnapshotMode mode() const { return GetParam(); }

  SnapshotWriteOptions write_options(const std::string& path, uint32_t threads) const {
    SnapshotWriteOptions o;
    o.path = path;
    o.mode = mode();
    o.fingerprint = snapshot_test::fingerprint(9);
    o.expiry_unix = clock_.unix_seconds() + 100;
    o.chunk_bytes = 1000;  // many chunks, odd boundaries: every thread gets work
    o.threads = threads;
    return o;
  }
  SnapshotReadOptions read_options(const std::string& path, uint32_t threads) const {
    SnapshotReadOptions o{path, mode(), snapshot_test::fingerprint(9)};
    o.threads = threads;
    return o;
  }

  // ~190 chunks of 1000 bytes in two host regions (one sparse) and a reinit region.
  static std::vector<HostRegion> sample(uint64_t seed) {
    std::vector<HostRegion> r;
    r.push_back(host_region("kv", 200'000, {{0, 1}, {10, 90'000}, {100'000, 99'999}}, seed));
    r.push_back(host_region("ckpt", 7777, {{0, 7777}}, seed + 1));
    r.push_back(host_region("rope", 128, {}, seed + 2, PersistKind::kReinit));
    return r;
  }
  static std::vector<HostRegion> zeroed() {
    auto r = sample(0);
    for (auto& h : r) std::fill(h.bytes.begin(), h.bytes.end(), std::byte{0});
    return r;
  }
  // The saved extents of `got` hold `want`'s bytes, everything else is zero.
  static void expect_restored(const std::vector<HostRegion>& want,
                              const std::vector<HostRegion>& got) {
    for (size_t r = 0; r < want.size(); ++r) {
      std::vector<std::byte> expected(got[r].bytes.size(), std::byte{0});
      for (const Extent& e : want[r].region.layout.extents) {
        std::copy_n(want[r].bytes.begin() + static_cast<ptrdiff_t>(e.offset), e.length,
                    expected.begin() + static_cast<ptrdiff_t>(e.offset));
      }
      EXPECT_EQ(test_util::first_difference(got[r].bytes, expected), -1) << "region " << r;
    }
  }

  Status read_sample(const std::string& path, uint32_t threads) {
    auto dest = zeroed();
    SnapshotReader reader(fs_, clock_, key_, nullptr);
    return reader.read(read_options(path, threads), views(dest)).status();
  }

  testing::TempDir dir_;
  PosixFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(1);
};

TEST_P(SnapshotParallelTest, RoundTripsAgreeForEveryThreadCount) {
  const auto source = sample(42);
  std::vector<std::vector<uint8_t>> files;
  for (uint32_t w : kThreadCounts) {
    const std::string path = dir_.file("w" + std::to_string(w) + ".snap");
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written,
                                writer.write(write_options(path, w), views(source)));
    EXPECT_GT(written.chunk_count, 150u);
    files.push_back(snapshot_test::read_file(path));
    ASSERT_EQ(files.back().size(), files.front().size()) << w << " threads";
    for (uint32_t r : kThreadCounts) {
      auto dest = zeroed();
      SnapshotReader reader(fs_, clock_, key_, nullptr);
      SIESTA_ASSERT_OK(reader.read(read_options(path, r), views(dest)));
      expect_restored(source, dest);
    }
  }
  // Each file has its own random file id, so seals (and AES ciphertexts) differ between files;
  // the writer has no way to fix the id. In the digest modes the records' headers and
  // payloads are plaintext: they must be the same bytes at the same offsets.
  if (mode() == SnapshotMode::kSessionEncrypted) return;
  const auto records = records_of(files.front());
  ASSERT_FALSE(records.empty());
  for (size_t f = 1; f < files.size(); ++f) {
    for (const Record& rec : records) {
      const auto* a = files.front().data() + rec.offset;
      const auto* b = files[f].data() + rec.offset;
      ASSERT_EQ(std::memcmp(a, b, snapshot::kChunkHeaderBytes + rec.length), 0)
          << "record at " << rec.offset << " of the " << kThreadCounts[f] << "-thread file";
    }
  }
}

TEST_P(SnapshotParallelTest, DeviceRegionsRoundTripWithEveryThreadCount) {
  SimBackendOptions sim_options;
  sim_options.capacity_bytes = 16u << 20;
  sim_options.granularity = 64u << 10;
  sim_options.max_chunk_bytes = 256u << 10;
  sim_options.staging_buffer_bytes = 16u << 10;  // ~20 device chunks
  sim_options.staging_buffer_count = 3;          // fewer than 4 threads + 1
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimBackend> sim, SimBackend::create(sim_options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange range, ReservedRange::reserve(*sim, 1u << 20));
  SIESTA_ASSERT_OK(sim->commit(range.range()));
  const size_t size = 300'001;
  const auto pattern = test_util::make_pattern(size, 77);
  auto host = host_region("ckpt", 50'000, {{100, 49'900}}, 5);
  const auto host_pattern = host.bytes;
  const SnapshotRegion device =
      device_region("kv", size, {{0, 200'000}, {250'000, 50'001}}, range.range().base);
  const std::vector<SnapshotRegion> regions = {device, host.region};
  auto expected = pattern;
  std::fill_n(expected.begin() + 200'000, 50'000, std::byte{0});  // the gap is not saved

  for (auto [w, r] : {std::pair{1u, 4u}, {4u, 1u}, {2u, 2u}, {4u, 4u}}) {
    SCOPED_TRACE(std::to_string(w) + " writing, " + std::to_string(r) + " reading threads");
    SIESTA_ASSERT_OK(test_util::write_device(*sim, range.range().base, pattern));
    std::copy(host_pattern.begin(), host_pattern.end(), host.bytes.begin());
    const std::string path = dir_.file("d.snap");
    SnapshotWriter writer(fs_, clock_, key_, sim.get());
    SnapshotWriteOptions wo = write_options(path, w);
    wo.chunk_bytes = 1u << 20;  // lowered to the staging buffer size
    SIESTA_ASSERT_OK(writer.write(wo, regions));

    SIESTA_ASSERT_OK(sim->zero(range.range()));
    std::fill(host.bytes.begin(), host.bytes.end(), std::byte{0});
    SnapshotReader reader(fs_, clock_, key_, sim.get());
    SIESTA_ASSERT_OK(reader.read(read_options(path, r), regions));
    SIESTA_ASSERT_OK_AND_ASSIGN(auto back, test_util::read_device(*sim, range.range().base, size));
    EXPECT_EQ(test_util::first_difference(back, expected), -1);
    EXPECT_EQ(test_util::first_difference(std::span(host.bytes).subspan(100),
                                          std::span(host_pattern).subspan(100)),
              -1);
  }
}

// Counts the copies out of staging buffers and checks each one's size against the buffer.
class CopyCountingBackend final : public MemoryBackendWrapper {
 public:
  explicit CopyCountingBackend(MemoryBackend& inner) : MemoryBackendWrapper(inner) {}
  Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                       DeviceAddress destination) override {
    copies.fetch_add(1);
    if (bytes > buffer.bytes().size()) oversized.fetch_add(1);
    return MemoryBackendWrapper::copy_from_staging(buffer, bytes, destination);
  }
  std::atomic<int> copies{0};
  std::atomic<int> oversized{0};
};

// Chunks of 5,000 bytes into 64 KiB staging buffers: a run takes 13 chunks whose destinations
// follow one another (65,000 bytes), a gap in the destinations -- between two extents, or
// between two device regions with a host region between them in the file -- ends one, and
// each run is one copy. A ring of two buffers, fewer than the reading threads.
TEST_P(SnapshotParallelTest, SmallDeviceChunksShareAStagingBufferPerRun) {
  SimBackendOptions sim_options;
  sim_options.capacity_bytes = 16u << 20;
  sim_options.granularity = 64u << 10;
  sim_options.staging_buffer_bytes = 64u << 10;
  sim_options.staging_buffer_count = 2;
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimBackend> sim, SimBackend::create(sim_options));
  CopyCountingBackend counting(*sim);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange range, ReservedRange::reserve(*sim, 1u << 20));
  SIESTA_ASSERT_OK(sim->commit(range.range()));
  const size_t kv_bytes = 300'001;
  const size_t second_at = 512u << 10;  // the second device region, after the host one
  const size_t second_bytes = 20'000;
  const auto pattern = test_util::make_pattern(second_at + second_bytes, 78);
  auto host = host_region("ckpt", 30'000, {{0, 30'000}}, 6);
  const auto host_pattern = host.bytes;
  // Extents of 200,000 bytes (40 chunks: runs of 13, 13, 13, 1) and 50,001 (11 chunks, one run).
  const SnapshotRegion kv =
      device_region("kv", kv_bytes, {{0, 200'000}, {250'000, 50'001}}, range.range().base);
  const SnapshotRegion second =  // 4 chunks, one run
      device_region("kv2", second_bytes, {{0, second_bytes}}, range.range().base + second_at);
  const std::vector<SnapshotRegion> regions = {kv, host.region, second};
  constexpr int kRuns = 4 + 1 + 1;

  const std::string path = dir_.file("runs.snap");
  SIESTA_ASSERT_OK(test_util::write_device(*sim, range.range().base, pattern));
  SnapshotWriter writer(fs_, clock_, key_, sim.get());
  SnapshotWriteOptions wo = write_options(path, 2);
  wo.chunk_bytes = 5000;
  SIESTA_ASSERT_OK(writer.write(wo, regions));
  auto expected = pattern;
  std::fill_n(expected.begin() + 200'000, 50'000, std::byte{0});  // the gap is not saved
  std::fill(expected.begin() + kv_bytes, expected.begin() + second_at, std::byte{0});
  for (uint32_t r : kThreadCounts) {
    SCOPED_TRACE(std::to_string(r) + " reading threads");
    SIESTA_ASSERT_OK(sim->zero(range.range()));
    std::fill(host.bytes.begin(), host.bytes.end(), std::byte{0});
    counting.copies = 0;
    SnapshotReader reader(fs_, clock_, key_, &counting);
    SIESTA_ASSERT_OK(reader.read(read_options(path, r), regions));
    EXPECT_EQ(counting.copies.load(), kRuns);
    EXPECT_EQ(counting.oversized.load(), 0);
    SIESTA_ASSERT_OK_AND_ASSIGN(auto back,
                                test_util::read_device(*sim, range.range().base, expected.size()));
    EXPECT_EQ(test_util::first_difference(back, expected), -1);
    EXPECT_EQ(test_util::first_difference(host.bytes, host_pattern), -1);
  }
}

// A damaged chunk in the middle is Corrupt and named, with every thread count, and a later
// failure -- another damaged chunk, a chunk out of place, a failing read -- never takes its
// place, however the chunks are spread over threads.
TEST_P(SnapshotParallelTest, FirstDamagedChunkInFileOrderDecides) {
  const std::string path = dir_.file("s.snap");
  const auto source = sample(3);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options(path, 4), views(source)));
  const auto clean = snapshot_test::read_file(path);
  const auto records = records_of(clean);
  ASSERT_GT(records.size(), 100u);
  const size_t k = records.size() / 2;
  const std::string named = "chunk " + std::to_string(k) + ":";

  auto damaged = clean;
  damaged[records[k].offset + snapshot::kChunkHeaderBytes + 7] ^= 0x40;  // its payload
  damaged[records[k + 5].offset + snapshot::kChunkHeaderBytes] ^= 0x01;  // a later seal
  damaged[records[k + 1].offset + 4] ^= 0x01;  // the next chunk's index: out of place
  snapshot_test::write_file(path, damaged);
  for (uint32_t threads : kThreadCounts) {
    for (int round = 0; round < 10; ++round) {
      const Status read = read_sample(path, threads);
      ASSERT_EQ(read.code(), StatusCode::kCorrupt) << read.to_string();
      ASSERT_NE(read.message().find(named), std::string::npos)
          << threads << " threads: " << read.to_string();
    }
  }

  // Alone, the out-of-place chunk is the one named.
  auto misplaced = clean;
  misplaced[records[k + 1].offset + 4] ^= 0x01;
  snapshot_test::write_file(path, misplaced);
  const Status out_of_place = read_sample(path, 4);
  EXPECT_EQ(out_of_place.code(), StatusCode::kCorrupt);
  EXPECT_NE(out_of_place.message().find("chunk " + std::to_string(k + 1) + " is out of place"),
            std::string::npos)
      << out_of_place.to_string();

  // A read that fails after the damaged chunk (at chunk k + 3's record, whichever worker
  // reads it, and whether before or after chunk k is read) is not what is reported; alone, it
  // is.
  snapshot_test::write_file(path, damaged);
  snapshot_test::TestFileSystem failing;
  failing.fail_reads_from = records[k + 3].offset;
  FaultyFileSystem counting(failing);  // no plan: counts the descriptors left open
  for (uint32_t threads : kThreadCounts) {
    for (int round = 0; round < 10; ++round) {
      auto dest = zeroed();
      SnapshotReader reader(counting, clock_, key_, nullptr);
      const Status read = reader.read(read_options(path, threads), views(dest)).status();
      ASSERT_EQ(read.code(), StatusCode::kCorrupt) << read.to_string();
      ASSERT_NE(read.message().find(named), std::string::npos) << read.to_string();
    }
  }
  snapshot_test::write_file(path, clean);
  auto dest = zeroed();
  SnapshotReader reader(counting, clock_, key_, nullptr);
  const Status read = reader.read(read_options(path, 4), views(dest)).status();
  EXPECT_EQ(read.code(), StatusCode::kIoError) << read.to_string();
  EXPECT_NE(read.message().find("injected"), std::string::npos) << read.to_string();
  EXPECT_NE(read.message().find("chunk " + std::to_string(k + 3)), std::string::npos)
      << "the failing read is named by its chunk: " << read.to_string();
  EXPECT_EQ(counting.counters().open_files, 0);
}

// A fault on the Nth write -- every N, every kind -- fails the write with several threads and
// leaves no file behind: no temporary, no final name, no open descriptor.
TEST_P(SnapshotParallelTest, AFaultOnAnyWriteLeavesNoFile) {
  const auto source = sample(4);
  const std::string path = dir_.file("s.snap");
  FaultyFileSystem faulty(fs_);
  {
    SnapshotWriter writer(faulty, clock_, key_, nullptr);
    SnapshotWriteOptions o = write_options(path, 4);
    o.chunk_bytes = 16'000;  // ~13 chunks: every write below is tried
    SIESTA_ASSERT_OK(writer.write(o, views(source)));
    SIESTA_ASSERT_OK(fs_.remove(path));
  }
  const uint64_t writes = faulty.counters().of(FsOp::kWrite);
  ASSERT_GT(writes, 10u);
  for (uint32_t threads : {2u, 4u}) {
    for (FsFaultKind kind : {FsFaultKind::kIoError, FsFaultKind::kShortWrite}) {
      for (uint64_t nth = 1; nth <= writes; ++nth) {
        const FsFaultPlan plan{FsOp::kWrite, nth, kind, nth % 3 == 0};
        SCOPED_TRACE(plan.describe() + ", " + std::to_string(threads) + " threads");
        faulty.set_plan(plan);
        SnapshotWriter writer(faulty, clock_, key_, nullptr);
        SnapshotWriteOptions o = write_options(path, threads);
        o.chunk_bytes = 16'000;
        const Status written = writer.write(o, views(source)).status();
        ASSERT_EQ(written.code(), StatusCode::kIoError) << written.to_string();
        ASSERT_EQ(snapshot_test::count_files(dir_.path()), 0u);
        ASSERT_EQ(faulty.counters().open_files, 0);
      }
    }
  }
}

// Cancelled after a few writes, a write with several threads stops within the chunk being
// written, removes its temporary and leaves the previous snapshot as it was.
TEST_P(SnapshotParallelTest, CancelStopsWithinAChunk) {
  const std::string path = dir_.file("s.snap");
  SIESTA_ASSERT_OK(
      SnapshotWriter(fs_, clock_, key_, nullptr).write(write_options(path, 4), views(sample(1))));
  const auto previous = snapshot_test::read_file(path);
  const auto source = sample(2);
  for (uint32_t threads : kThreadCounts) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::atomic<bool> cancel{false};
    FaultyFileSystem faulty(fs_);
    faulty.set_call_hook([&](FsOp op, uint64_t call) {
      if (op == FsOp::kWrite && call == 3) cancel = true;  // the header and a chunk or so done
    });
    SnapshotWriteOptions o = write_options(path, threads);
    o.cancel = &cancel;
    SnapshotWriter writer(faulty, clock_, key_, nullptr);
    SIESTA_EXPECT_CODE(writer.write(o, views(source)), StatusCode::kCancelled);
    // Call 3 runs, then at most the rest of its chunk (a digest chunk is three writes).
    EXPECT_LE(faulty.counters().of(FsOp::kWrite), 5u);
    EXPECT_EQ(faulty.counters().open_files, 0);
    EXPECT_EQ(snapshot_test::read_file(path), previous);
    EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
  }
  SIESTA_EXPECT_OK(read_sample(path, 4));
}

// Cancelled from another thread at an arbitrary moment: either the write finished first or it
// is Cancelled and left nothing; in both cases the final name holds a complete snapshot.
TEST_P(SnapshotParallelTest, CancelFromAnotherThreadAtAnyMoment) {
  const std::string path = dir_.file("s.snap");
  SIESTA_ASSERT_OK(
      SnapshotWriter(fs_, clock_, key_, nullptr).write(write_options(path, 4), views(sample(1))));
  auto big = host_region("kv", 4u << 20, {{0, 4u << 20}}, 11);
  for (int delay_us : {0, 200, 1000, 5000}) {
    std::atomic<bool> cancel{false};
    SnapshotWriteOptions o = write_options(path, 4);
    o.chunk_bytes = 64u << 10;
    o.cancel = &cancel;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      cancel = true;
    });
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    const Status written = writer.write(o, std::span(&big.region, 1)).status();
    canceller.join();
    EXPECT_TRUE(written.ok() || written.code() == StatusCode::kCancelled) << written.to_string();
    EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u) << "delay " << delay_us << " us";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotParallelTest,
                         ::testing::Values(SnapshotMode::kSessionEncrypted,
                                           SnapshotMode::kSessionDigest,
                                           SnapshotMode::kDurableExport),
                         [](const auto& param_info) {
                           std::string name(snapshot::snapshot_mode_name(param_info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace siesta
