// Each typed outcome of the SnapshotReader, in every mode: a missing file, another process's
// key, fingerprint, layout, mode, owner or generation, a FIFO or directory in the snapshot's place,
// expiry at the deadline, truncation anywhere (a file that shrinks while read included),
// trailing bytes, magic and version, a damaged chunk too large for a staging buffer, and a
// layout the writer refuses before any file.
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

using snapshot::PersistKind;
using snapshot::SnapshotMode;
using snapshot_test::host_region;
using snapshot_test::HostRegion;

class SnapshotRefusalTest : public snapshot_test::SnapshotFileFixture {};

TEST_P(SnapshotRefusalTest, MissingFileIsNotFound) {
  SIESTA_EXPECT_CODE(read_sample(key_), StatusCode::kNotFound);
}

TEST_P(SnapshotRefusalTest, OtherProcessKeyIsForeignUnlessExported) {
  SIESTA_ASSERT_OK(write_sample(1));
  ProcessKey other = snapshot_test::fixed_key(2);
  if (mode() == SnapshotMode::kDurableExport) {
    SIESTA_EXPECT_OK(read_sample(other));  // an export belongs to no process
  } else {
    SIESTA_EXPECT_CODE(read_sample(other), StatusCode::kForeign);
  }
}

TEST_P(SnapshotRefusalTest, OtherFingerprintOrLayoutOrModeIsForeign) {
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
TEST_P(SnapshotRefusalTest, AnOlderGenerationPutBackIsForeign) {
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

// Another owner's file: two sessions' snapshots (or two exports) of the same process, key,
// fingerprint, layout and generation differ only in the owner the writer named. A file put
// under the other's name is refused before a byte of it is restored; the owner is sealed with
// the header, so editing it breaks the seal.
TEST_P(SnapshotRefusalTest, AnotherOwnersFileIsForeign) {
  auto regions = sample(1);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SnapshotWriteOptions options = write_options();
  options.owner = "1";
  SIESTA_ASSERT_OK(writer.write(options, views(regions)));
  auto into = sample(0);
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SnapshotReadOptions read = read_options();
  read.owner = "0";
  auto refused = reader.read(read, views(into));
  SIESTA_EXPECT_CODE(refused, StatusCode::kForeign);
  EXPECT_NE(refused.status().message().find("written by \"1\", expected \"0\""), std::string::npos)
      << refused.status().to_string();
  EXPECT_EQ(into[1].bytes, sample(0)[1].bytes) << "nothing was restored";
  read.owner = "1";
  SIESTA_EXPECT_OK(reader.read(read, views(into)));  // the file itself is intact
  auto forged = snapshot_test::read_file(path());
  const size_t owner_at = snapshot::kFixedHeaderBytes + 1;  // after its length byte
  ASSERT_EQ(forged[owner_at], '1');
  forged[owner_at] = '0';  // injected: the owner edited to the other session's
  snapshot_test::write_file(path(), forged);
  read.owner = "0";
  SIESTA_EXPECT_CODE(reader.read(read, views(into)), StatusCode::kCorrupt);
}

// A FIFO (or a directory) put in place of a snapshot: refused at once, with the file system's
// typed error, never waited on (opening a FIFO for reading blocks until a writer comes).
TEST_P(SnapshotRefusalTest, AFifoOrDirectoryInPlaceOfTheSnapshotIsRefusedWithoutBlocking) {
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

TEST_P(SnapshotRefusalTest, ExpiredExactlyAtTheDeadline) {
  SIESTA_ASSERT_OK(write_sample(1));
  clock_.advance(std::chrono::seconds(99));
  SIESTA_EXPECT_OK(read_sample(key_));
  clock_.advance(std::chrono::seconds(1));
  SIESTA_EXPECT_CODE(read_sample(key_), StatusCode::kExpired);
}

TEST_P(SnapshotRefusalTest, TruncationTrailingBytesMagicAndVersion) {
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
TEST_P(SnapshotRefusalTest, AFileThatShrinksWhileReadIsTruncated) {
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

TEST_P(SnapshotRefusalTest, InvalidLayoutIsRefusedBeforeAnyFile) {
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
      views.reserve(regions.size());
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
      o.owner = mode == SnapshotMode::kDurableExport ? name : std::to_string(variant);
      if (mode != SnapshotMode::kDurableExport && variant == 1) o.route = {0x01, 0x02, 0x03};
      SnapshotWriter writer(fs, clock, key, nullptr);
      SIESTA_ASSERT_OK(writer.write(o, views));
      SnapshotReader reader(fs, clock, key, nullptr);
      SnapshotReadOptions read{o.path, mode, o.fingerprint};
      read.generation = o.generation;
      read.owner = o.owner;
      SIESTA_EXPECT_OK(reader.read(read, views));
      if (export_dir != nullptr) {
        snapshot_test::write_file(std::string(export_dir) + "/" + name,
                                  snapshot_test::read_file(o.path));
      }
    }
  }
}

// A chunk larger than the device's staging buffers is opened in host memory before it is
// copied over. Guards: such a chunk copied to the device unverified, or its damage reported
// as anything but Corrupt (and only after the chunks before it are all done).
TEST_P(SnapshotRefusalTest, ADamagedChunkLargerThanAStagingBufferIsCorrupt) {
  SimBackendOptions sim_options;
  sim_options.capacity_bytes = 16u << 20;
  sim_options.granularity = 64u << 10;
  sim_options.staging_buffer_bytes = 300;  // the file's chunks are 1000 bytes
  sim_options.staging_buffer_count = 2;
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SimBackend> sim, SimBackend::create(sim_options));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange range, ReservedRange::reserve(*sim, 64u << 10));
  SIESTA_ASSERT_OK(sim->commit(range.range()));
  SIESTA_ASSERT_OK(sim->zero(range.range()));
  HostRegion host = host_region("kv", 5000, {{0, 5000}}, 11);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(const SnapshotWriteResult written,
                              writer.write(write_options(), std::span(&host.region, 1)));
  // The last chunk's payload: its record ends 16 bytes (the tag) before the trailer.
  std::vector<uint8_t> bytes = snapshot_test::read_file(path());
  bytes[written.file_bytes - snapshot::kTrailerBytes - snapshot::kTagBytes - 1] ^= 0x20;
  snapshot_test::write_file(path(), bytes);
  SnapshotRegion device = host.region;
  device.place = SnapshotRegion::Place::kDevice;
  device.host = nullptr;
  device.device = range.range().base;
  SnapshotReader reader(fs_, clock_, key_, sim.get());
  const Result<SnapshotReadResult> read = reader.read(read_options(), std::span(&device, 1));
  EXPECT_EQ(read.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(read.status().message().find("chunk 4"), std::string::npos)
      << read.status().to_string();
  SIESTA_ASSERT_OK_AND_ASSIGN(auto back, test_util::read_device(*sim, range.range().base, 5000));
  EXPECT_EQ(
      test_util::first_difference(std::span(back).first(4000), std::span(host.bytes).first(4000)),
      -1)
      << "the chunks before it are in place";
  EXPECT_EQ(std::count(back.begin() + 4000, back.end(), std::byte{0}), 1000)
      << "the damaged chunk never reached the device";
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotRefusalTest, snapshot_test::kEveryMode,
                         snapshot_test::mode_test_name);

}  // namespace
}  // namespace siesta
