// The snapshot layer's answers to a caller's mistakes and to a file system that fails where
// the fault plans cannot reach: regions without memory or without a backend, a backend with no
// staging buffers, buffers of mismatched sizes given to a sealer, headers the format does not
// allow (another version, an unknown persist kind, too many extents), a free-space query, a
// file size or a close that fails, and a file that shrinks under read_snapshot_expiry. Each is a
// typed error and writes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/memory_backend_wrapper.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/scripted_file_system.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::PersistKind;
using snapshot::SnapshotHeader;
using snapshot::SnapshotMode;
using ::testing::HasSubstr;

// A backend whose staging ring is empty (a misconfigured one): nothing can be copied.
class NoStagingBackend final : public MemoryBackendWrapper {
 public:
  using MemoryBackendWrapper::MemoryBackendWrapper;
  size_t staging_buffer_bytes() const override { return 0; }
};

class SnapshotMisuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimBackendOptions options;
    options.granularity = 64u << 10;
    options.staging_buffer_bytes = 16u << 10;
    options.staging_buffer_count = 2;
    sim_ = SimBackend::create(options).value();
    device_ = ReservedRange::reserve(*sim_, 64u << 10).value();
    ASSERT_TRUE(sim_->commit(device_.range()).ok());
  }
  void TearDown() override { device_.reset(); }

  SnapshotRegion device_region() const {
    SnapshotRegion r;
    r.layout = {"device", PersistKind::kContents, 4096, {{0, 4096}}};
    r.place = SnapshotRegion::Place::kDevice;
    r.device = device_.range().base;
    return r;
  }
  SnapshotWriteOptions write_options(const std::string& name) const {
    SnapshotWriteOptions o;
    o.path = dir_.file(name);
    o.fingerprint = snapshot_test::fingerprint(1);
    o.expiry_unix = clock_.unix_seconds() + 60;
    o.generation = 1;
    return o;
  }
  SnapshotReadOptions read_options(const std::string& name) const {
    SnapshotReadOptions o;
    o.path = dir_.file(name);
    o.fingerprint = snapshot_test::fingerprint(1);
    o.generation = 1;
    return o;
  }

  siesta::testing::TempDir dir_;
  PosixFileSystem posix_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(3);
  std::unique_ptr<SimBackend> sim_;
  ReservedRange device_;
};

// Guards: a host region that lists extents but has no memory written from address 0.
TEST_F(SnapshotMisuseTest, AHostRegionWithoutMemoryIsRefusedByWriterAndReader) {
  snapshot_test::HostRegion host = snapshot_test::host_region("host", 64, {{0, 64}}, 7);
  SnapshotWriter writer(posix_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options("s.snap"), std::span(&host.region, 1)));
  SnapshotRegion no_memory = host.region;
  no_memory.host = nullptr;
  const Result<SnapshotWriteResult> written =
      writer.write(write_options("t.snap"), std::span(&no_memory, 1));
  EXPECT_EQ(written.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(written.status().message(), HasSubstr("\"host\" has no memory"));
  SnapshotReader reader(posix_, clock_, key_, nullptr);
  const Result<SnapshotReadResult> read =
      reader.read(read_options("s.snap"), std::span(&no_memory, 1));
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u) << "nothing but the first file";
}

// Guards: device regions copied through a backend that is not there (a null dereference).
TEST_F(SnapshotMisuseTest, ADeviceRegionNeedsABackendToWriteAndToRead) {
  const SnapshotRegion region = device_region();
  SnapshotWriter without(posix_, clock_, key_, nullptr);
  EXPECT_EQ(without.write(write_options("s.snap"), std::span(&region, 1)).status().code(),
            StatusCode::kInvalidArgument);
  SnapshotWriter writer(posix_, clock_, key_, sim_.get());
  SIESTA_ASSERT_OK(writer.write(write_options("s.snap"), std::span(&region, 1)));
  SnapshotReader reader(posix_, clock_, key_, nullptr);
  const Result<SnapshotReadResult> read =
      reader.read(read_options("s.snap"), std::span(&region, 1));
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("needs a memory backend"));
}

// Guards: a chunk size of zero taken from a backend without staging buffers (an endless
// loop, or a division by zero).
TEST_F(SnapshotMisuseTest, ABackendWithoutStagingBuffersIsAnInternalError) {
  NoStagingBackend empty(*sim_);
  const SnapshotRegion region = device_region();
  SnapshotWriter writer(posix_, clock_, key_, &empty);
  const Result<SnapshotWriteResult> written =
      writer.write(write_options("s.snap"), std::span(&region, 1));
  EXPECT_EQ(written.status().code(), StatusCode::kInternal);
  EXPECT_THAT(written.status().message(), HasSubstr("no staging buffers"));
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

// Guards: a free-space query that fails taken for "enough space".
TEST_F(SnapshotMisuseTest, AFreeSpaceQueryThatFailsStopsTheWriteBeforeAByte) {
  test_util::ScriptedFileSystem fs(posix_);
  // Injected: statvfs fails with EIO.
  fs.available_bytes_answer = [](const std::string&) -> std::optional<Result<uint64_t>> {
    return IoError("injected statvfs failure");
  };
  snapshot_test::HostRegion host = snapshot_test::host_region("host", 64, {{0, 64}}, 7);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  const Result<SnapshotWriteResult> written =
      writer.write(write_options("s.snap"), std::span(&host.region, 1));
  EXPECT_EQ(written.status().code(), StatusCode::kIoError);
  EXPECT_THAT(written.status().message(), HasSubstr("injected statvfs failure"));
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

// Guards: a file whose size cannot be read trusted anyway, by the reader and by the expiry
// reader the store's clean-up uses.
TEST_F(SnapshotMisuseTest, AFileSizeThatFailsIsTheReadersError) {
  snapshot_test::HostRegion host = snapshot_test::host_region("host", 64, {{0, 64}}, 7);
  SnapshotWriter writer(posix_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options("s.snap"), std::span(&host.region, 1)));
  test_util::ScriptedFileSystem fs(posix_);
  // Injected: fstat of the opened file fails with EIO.
  fs.readable_size_answer = [](const std::string&) -> std::optional<Result<uint64_t>> {
    return IoError("injected fstat failure");
  };
  SnapshotReader reader(fs, clock_, key_, nullptr);
  const Result<SnapshotReadResult> read =
      reader.read(read_options("s.snap"), std::span(&host.region, 1));
  EXPECT_EQ(read.status().code(), StatusCode::kIoError);
  EXPECT_EQ(read_snapshot_expiry(fs, dir_.file("s.snap")).status().code(), StatusCode::kIoError);
}

// Guards: a close that fails after the fdatasync (on some file systems the data's write-back
// error comes only then) ignored, and the snapshot renamed into place anyway.
TEST_F(SnapshotMisuseTest, ACloseThatFailsKeepsTheSnapshotFromItsName) {
  test_util::ScriptedFileSystem fs(posix_);
  // Injected: close of the temporary fails with EIO.
  fs.writable_close_answer = [](const std::string& path) -> std::optional<Status> {
    return IoError("injected close failure of " + path);
  };
  snapshot_test::HostRegion host = snapshot_test::host_region("host", 64, {{0, 64}}, 7);
  SnapshotWriter writer(fs, clock_, key_, nullptr);
  const Result<SnapshotWriteResult> written =
      writer.write(write_options("s.snap"), std::span(&host.region, 1));
  EXPECT_EQ(written.status().code(), StatusCode::kIoError);
  EXPECT_THAT(written.status().message(), HasSubstr("injected close failure"));
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u) << "no snapshot, no temporary";
}

// Guards: the expiry reader trusting a size the file no longer has.
TEST_F(SnapshotMisuseTest, AFileThatShrinksUnderTheExpiryReaderIsTruncated) {
  snapshot_test::HostRegion host = snapshot_test::host_region("host", 64, {{0, 64}}, 7);
  SnapshotWriter writer(posix_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK(writer.write(write_options("s.snap"), std::span(&host.region, 1)));
  snapshot_test::TestFileSystem fs;
  fs.shrink_after_size_at = snapshot::kPrefixBytes + 8;  // the prefix reads, the fields do not
  const Result<int64_t> expiry = read_snapshot_expiry(fs, dir_.file("s.snap"));
  EXPECT_EQ(expiry.status().code(), StatusCode::kTruncated);
}

// Guards: a sealer that trusts its buffers' sizes (it would read or write past the shorter).
TEST_F(SnapshotMisuseTest, SealersRefuseBuffersOfDifferentSizes) {
  for (SnapshotMode mode : {SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest}) {
    SCOPED_TRACE(snapshot::snapshot_mode_name(mode));
    std::unique_ptr<ChunkSealer> sealer = make_sealer(mode, key_, snapshot::FileId{}).value();
    std::vector<uint8_t> plain(32, 1), shorter(31), aad(8, 2);
    snapshot::Tag tag{};
    EXPECT_EQ(sealer->seal(SealDomain::kChunk, 0, aad, plain, shorter, tag).code(),
              StatusCode::kInternal);
    EXPECT_EQ(sealer->open(SealDomain::kChunk, 0, aad, plain, tag, shorter).code(),
              StatusCode::kInternal);
  }
}

// Guards: the encoder writing a header its own reader refuses.
TEST_F(SnapshotMisuseTest, TheEncoderRefusesHeadersTheFormatDoesNotAllow) {
  SnapshotHeader header;
  header.process_nonce[0] = 1;
  header.chunk_bytes = 4096;
  header.regions = {{"r", PersistKind::kContents, 1u << 20, {}}};
  SIESTA_ASSERT_OK(snapshot::validate_header(header));

  SnapshotHeader other_version = header;
  other_version.version = snapshot::kFormatVersion - 1;
  EXPECT_EQ(snapshot::validate_header(other_version).code(), StatusCode::kInvalidArgument);

  SnapshotHeader unknown_kind = header;
  unknown_kind.regions[0].persist = static_cast<PersistKind>(7);
  EXPECT_EQ(snapshot::encode_header_body(unknown_kind).status().code(),
            StatusCode::kInvalidArgument);

  SnapshotHeader too_many = header;
  for (uint64_t i = 0; i <= snapshot::kMaxExtentsPerFile; ++i) {
    too_many.regions[0].extents.push_back({2 * i, 1});
  }
  EXPECT_EQ(snapshot::validate_header(too_many).code(), StatusCode::kInvalidArgument);
  too_many.regions[0].extents.pop_back();
  SIESTA_EXPECT_OK(snapshot::validate_header(too_many));  // exactly the bound is allowed

  const auto no_mode = static_cast<SnapshotMode>(9);
  EXPECT_EQ(snapshot::snapshot_mode_name(no_mode), "unknown");
  EXPECT_EQ(snapshot::flags_for(no_mode), 0u);
}

// Guards: the parent of a bare name or of a file in "/" computed wrongly (the writer syncs
// and measures that directory).
TEST_F(SnapshotMisuseTest, TheParentDirectoryOfAnyPath) {
  EXPECT_EQ(parent_directory("/a/b/s.snap"), "/a/b");
  EXPECT_EQ(parent_directory("/s.snap"), "/");
  EXPECT_EQ(parent_directory("s.snap"), ".");
}

}  // namespace
}  // namespace siesta
