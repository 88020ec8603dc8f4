// SnapshotExporter: durable exports round trip (host and SimBackend device regions), outlive
// the process that wrote them, refuse cache snapshots and other fingerprints (Foreign), refuse
// unsafe names before touching storage, keep the previous export when a replacement fails,
// and erase.
#include "core/snapshot/snapshot_export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "testing/faulty_file_system.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::PersistKind;
using snapshot::SnapshotMode;
using snapshot_test::host_region;
using snapshot_test::HostRegion;

std::vector<HostRegion> sample(uint64_t seed) {
  std::vector<HostRegion> r;
  r.push_back(host_region("kv", 5000, {{0, 1}, {10, 2500}, {4000, 1000}}, seed));
  r.push_back(host_region("ckpt", 777, {{0, 777}}, seed + 1));
  r.push_back(host_region("rope", 128, {}, seed + 2, PersistKind::kReinit));
  return r;
}

std::vector<SnapshotRegion> views(const std::vector<HostRegion>& r) {
  std::vector<SnapshotRegion> out;
  out.reserve(r.size());
  for (const auto& h : r) out.push_back(h.region);
  return out;
}

// Regions shaped like sample() with every byte zero, ready to be imported into.
std::vector<HostRegion> zeroed() {
  auto r = sample(0);
  for (auto& h : r) std::memset(h.bytes.data(), 0, h.bytes.size());
  return r;
}

// The saved extents of `got` equal those of `want`.
void expect_same_saved_bytes(const std::vector<HostRegion>& got,
                             const std::vector<HostRegion>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    for (const auto& e : want[r].region.layout.extents) {
      EXPECT_EQ(test_util::first_difference(std::span(got[r].bytes).subspan(e.offset, e.length),
                                            std::span(want[r].bytes).subspan(e.offset, e.length)),
                -1)
          << "region " << r << " extent at " << e.offset;
    }
  }
}

class SnapshotExportTest : public ::testing::Test {
 protected:
  void SetUp() override { exporter_ = open_exporter(fs_); }

  std::unique_ptr<SnapshotExporter> open_exporter(FileSystem& fs,
                                                  MemoryBackend* backend = nullptr) {
    SnapshotExporter::Options options;
    options.chunk_bytes = 1000;  // many chunks, odd boundaries
    auto opened = SnapshotExporter::open(fs, clock_, backend, dir_.path() + "/", options);
    EXPECT_TRUE(opened.ok()) << opened.status().to_string();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }
  Status import_into(SnapshotExporter& exporter, const std::string& name,
                     std::vector<HostRegion>& into, uint8_t fingerprint_seed = 9) {
    return exporter.import_session(name, snapshot_test::fingerprint(fingerprint_seed), views(into))
        .status();
  }

  testing::TempDir dir_;
  PosixFileSystem fs_;
  ManualClock clock_;
  std::unique_ptr<SnapshotExporter> exporter_;
  const snapshot::Fingerprint fingerprint_ = snapshot_test::fingerprint(9);
};

TEST(ExportNameTest, SafeNamesAreAccepted) {
  using namespace std::string_literals;
  for (const std::string& name : {"a"s, "conversation-1.snap"s, "A_b.c-9"s, "x.y.z"s, "x.tmp"s,
                                  std::string(kMaxExportNameBytes, 'n')}) {
    SIESTA_EXPECT_OK(validate_export_name(name));
  }
}

TEST(ExportNameTest, UnsafeNamesAreRefusedWithAOneLineQuotedMessage) {
  using namespace std::string_literals;
  for (const std::string& name :
       {""s, "."s, ".."s, "a/b"s, "../x"s, ".hidden"s, std::string(kMaxExportNameBytes + 1, 'n'),
        "a\nb"s, "a\0b"s, "/abs"s, "a..b"s, "a b"s, "a\\b"s, "x.snap.tmp-0123456789abcdef"s,
        "caf\xc3\xa9"s}) {
    const Status s = validate_export_name(name);
    SIESTA_EXPECT_CODE(s, StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\0'), std::string::npos);
    EXPECT_NE(s.message().find("export name \""), std::string::npos) << s.message();
  }
  EXPECT_NE(validate_export_name("a\nb").message().find("\"a\\nb\""), std::string::npos);
}

TEST_F(SnapshotExportTest, BadNamesTouchNothing) {
  FaultyFileSystem counting(fs_);
  auto exporter = open_exporter(counting);
  ASSERT_NE(exporter, nullptr);
  const FsCounters before = counting.counters();
  auto source = sample(1);
  auto dest = zeroed();
  using namespace std::string_literals;
  for (const std::string& name : {""s, "."s, ".."s, "a/b"s, "../x"s, ".hidden"s,
                                  std::string(kMaxExportNameBytes + 1, 'n'), "a\nb"s, "a\0b"s}) {
    SIESTA_EXPECT_CODE(exporter->export_session(name, fingerprint_, views(source)),
                       StatusCode::kInvalidArgument);
    SIESTA_EXPECT_CODE(exporter->import_session(name, fingerprint_, views(dest)),
                       StatusCode::kInvalidArgument);
    SIESTA_EXPECT_CODE(exporter->erase(name), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(counting.counters().calls, before.calls);
  EXPECT_EQ(counting.counters().faults_fired, 0u);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

TEST_F(SnapshotExportTest, HostRegionsRoundTrip) {
  const auto source = sample(42);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written,
                              exporter_->export_session("conv-1", fingerprint_, views(source)));
  EXPECT_EQ(written.payload_bytes, 1u + 2500 + 1000 + 777);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);  // no temporary left
  struct stat st {};
  ASSERT_EQ(::stat(dir_.file("conv-1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  auto dest = zeroed();
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotReadResult read,
                              exporter_->import_session("conv-1", fingerprint_, views(dest)));
  EXPECT_EQ(read.payload_bytes, written.payload_bytes);
  EXPECT_EQ(read.header.mode, SnapshotMode::kDurableExport);
  EXPECT_EQ(read.header.process_nonce, snapshot::ProcessNonce{});
  EXPECT_EQ(read.header.expiry_unix, snapshot::kNeverExpires);
  expect_same_saved_bytes(dest, source);
}

TEST_F(SnapshotExportTest, DeviceAndHostRegionsRoundTrip) {
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
  const size_t size = 300'001;
  const auto pattern = test_util::make_pattern(size, 77);
  SIESTA_ASSERT_OK(test_util::write_device(backend, range.range().base, pattern));
  auto host = host_region("ckpt", 5000, {{100, 4900}}, 5);
  SnapshotRegion device;
  device.layout = {"kv", PersistKind::kContents, size, {{0, 200'000}, {250'000, 50'001}}};
  device.place = SnapshotRegion::Place::kDevice;
  device.device = range.range().base;
  const std::vector<SnapshotRegion> regions = {device, host.region};

  auto exporter = open_exporter(fs_, &backend);
  ASSERT_NE(exporter, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written,
                              exporter->export_session("dev", fingerprint_, regions));
  EXPECT_EQ(written.payload_bytes, 250'001u + 4900);

  SIESTA_ASSERT_OK(backend.zero(range.range()));
  std::memset(host.bytes.data(), 0, host.bytes.size());
  SIESTA_ASSERT_OK(exporter->import_session("dev", fingerprint_, regions));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto back, test_util::read_device(backend, range.range().base, size));
  auto expected = pattern;
  std::memset(expected.data() + 200'000, 0, 50'000);  // the gap was not saved
  EXPECT_EQ(test_util::first_difference(back, expected), -1);
  const auto host_pattern = test_util::make_pattern(5000, 5);
  EXPECT_EQ(test_util::first_difference(std::span(host.bytes).subspan(100),
                                        std::span(host_pattern).subspan(100)),
            -1);
}

// The point of durable mode: nothing in the file depends on the process that wrote it.
TEST_F(SnapshotExportTest, AnExportOutlivesItsProcessAndNeverExpires) {
  const auto source = sample(7);
  SIESTA_ASSERT_OK(exporter_->export_session("keep", fingerprint_, views(source)));
  exporter_.reset();  // the writing "process" is gone, its throwaway key with it

  clock_.advance(std::chrono::hours(24 * 365 * 50));  // no expiry applies to an export
  auto later = open_exporter(fs_);                    // a new exporter: a new random key
  ASSERT_NE(later, nullptr);
  auto dest = zeroed();
  SIESTA_ASSERT_OK(import_into(*later, "keep", dest));
  expect_same_saved_bytes(dest, source);

  // Any other process key reads it too, through the plain reader in durable mode.
  for (uint8_t seed : {1, 2, 3}) {
    const ProcessKey key = snapshot_test::fixed_key(seed);
    SnapshotReader reader(fs_, clock_, key, nullptr);
    auto again = zeroed();
    SnapshotReadOptions read{dir_.file("keep"), SnapshotMode::kDurableExport, fingerprint_};
    read.owner = "keep";  // an export's owner is its name
    SIESTA_EXPECT_OK(reader.read(read, views(again)));
  }
}

TEST_F(SnapshotExportTest, CacheSnapshotUnderAnExportNameIsForeign) {
  const ProcessKey key = snapshot_test::fixed_key(1);
  for (SnapshotMode mode : {SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest}) {
    auto source = sample(3);
    SnapshotWriteOptions o;
    o.path = dir_.file("cache");
    o.mode = mode;
    o.fingerprint = fingerprint_;
    o.expiry_unix = clock_.unix_seconds() + 100;
    SnapshotWriter writer(fs_, clock_, key, nullptr);
    SIESTA_ASSERT_OK(writer.write(o, views(source)));
    auto dest = zeroed();
    SIESTA_EXPECT_CODE(import_into(*exporter_, "cache", dest), StatusCode::kForeign);
  }
}

TEST_F(SnapshotExportTest, OtherFingerprintOrLayoutIsForeign) {
  const auto source = sample(1);
  SIESTA_ASSERT_OK(exporter_->export_session("m", fingerprint_, views(source)));
  auto dest = zeroed();
  SIESTA_EXPECT_CODE(import_into(*exporter_, "m", dest, /*fingerprint_seed=*/10),
                     StatusCode::kForeign);
  auto v = views(dest);
  v[0].layout.size += 1;
  SIESTA_EXPECT_CODE(exporter_->import_session("m", fingerprint_, v), StatusCode::kForeign);
}

TEST_F(SnapshotExportTest, MissingIsNotFound) {
  auto dest = zeroed();
  SIESTA_EXPECT_CODE(import_into(*exporter_, "nothing", dest), StatusCode::kNotFound);
  SIESTA_EXPECT_CODE(exporter_->erase("nothing"), StatusCode::kNotFound);
}

TEST_F(SnapshotExportTest, DamagedExportIsCorruptOrTruncated) {
  const auto source = sample(1);
  SIESTA_ASSERT_OK(exporter_->export_session("d", fingerprint_, views(source)));
  const auto good = snapshot_test::read_file(dir_.file("d"));
  auto bytes = good;
  bytes[300] ^= 1;  // inside the first chunk's payload
  snapshot_test::write_file(dir_.file("d"), bytes);
  auto dest = zeroed();
  SIESTA_EXPECT_CODE(import_into(*exporter_, "d", dest), StatusCode::kCorrupt);
  snapshot_test::write_file(dir_.file("d"), {good.begin(), good.end() - 1});
  SIESTA_EXPECT_CODE(import_into(*exporter_, "d", dest), StatusCode::kTruncated);
}

TEST_F(SnapshotExportTest, FailedReplacementKeepsThePreviousExport) {
  const auto first = sample(1);
  SIESTA_ASSERT_OK(exporter_->export_session("x", fingerprint_, views(first)));
  const auto previous = snapshot_test::read_file(dir_.file("x"));
  const auto second = sample(2);

  // Each step of the write protocol failing in turn.
  for (FsOp op : {FsOp::kCreate, FsOp::kWrite, FsOp::kSync, FsOp::kRename}) {
    FaultyFileSystem faulty(fs_, {op, 1, FsFaultKind::kIoError, /*sticky=*/true});
    auto exporter = open_exporter(faulty);
    ASSERT_NE(exporter, nullptr);
    const auto result = exporter->export_session("x", fingerprint_, views(second));
    SIESTA_EXPECT_CODE(result, StatusCode::kIoError);
    EXPECT_NE(result.status().message().find("injected"), std::string::npos);
    EXPECT_EQ(snapshot_test::read_file(dir_.file("x")), previous) << fs_op_name(op);
    EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u) << fs_op_name(op);  // no temporary
    EXPECT_EQ(faulty.counters().open_files, 0) << fs_op_name(op);
  }

  // Cancelled midway, after the header and a chunk are written.
  std::atomic<bool> cancel{false};
  int writes = 0;
  snapshot_test::TestFileSystem test_fs;
  test_fs.after_write = [&] {
    if (++writes == 2) cancel = true;
  };
  auto exporter = open_exporter(test_fs);
  ASSERT_NE(exporter, nullptr);
  SIESTA_EXPECT_CODE(exporter->export_session("x", fingerprint_, views(second), &cancel),
                     StatusCode::kCancelled);
  EXPECT_EQ(snapshot_test::read_file(dir_.file("x")), previous);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);

  auto dest = zeroed();
  SIESTA_ASSERT_OK(import_into(*exporter_, "x", dest));
  expect_same_saved_bytes(dest, first);

  // A successful replacement does replace.
  SIESTA_ASSERT_OK(exporter_->export_session("x", fingerprint_, views(second)));
  SIESTA_ASSERT_OK(import_into(*exporter_, "x", dest));
  expect_same_saved_bytes(dest, second);
}

TEST_F(SnapshotExportTest, EraseRemovesOnlyThatExport) {
  const auto source = sample(1);
  SIESTA_ASSERT_OK(exporter_->export_session("a", fingerprint_, views(source)));
  SIESTA_ASSERT_OK(exporter_->export_session("b", fingerprint_, views(source)));
  SIESTA_ASSERT_OK(exporter_->erase("a"));
  auto dest = zeroed();
  SIESTA_EXPECT_CODE(import_into(*exporter_, "a", dest), StatusCode::kNotFound);
  SIESTA_EXPECT_OK(import_into(*exporter_, "b", dest));
  SIESTA_EXPECT_CODE(exporter_->erase("a"), StatusCode::kNotFound);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 1u);
}

TEST_F(SnapshotExportTest, TheDirectoryFollowsTheCacheDirectoryRule) {
  // Missing: created private.
  const std::string made = dir_.file("exports");
  SIESTA_ASSERT_OK_AND_ASSIGN(auto created, SnapshotExporter::open(fs_, clock_, nullptr, made, {}));
  struct stat st {};
  ASSERT_EQ(::stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  // Writable by others, or another user's: refused, in core's words (no flag: the server's
  // to add).
  ASSERT_EQ(::chmod(made.c_str(), 0777), 0);
  SnapshotExporter::Options options;
  auto refused = SnapshotExporter::open(fs_, clock_, nullptr, made, options);
  SIESTA_EXPECT_CODE(refused, StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message().find("export directory \"" + made +
                                            "\" is writable by group or others"),
            0u)
      << refused.status().to_string();
  ASSERT_EQ(::chmod(made.c_str(), 0700), 0);
  options.owner_uid = static_cast<uint32_t>(::geteuid()) + 1;
  SIESTA_EXPECT_CODE(SnapshotExporter::open(fs_, clock_, nullptr, made, options),
                     StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(SnapshotExporter::open(fs_, clock_, nullptr, "", {}),
                     StatusCode::kInvalidArgument);
}

// An export is meant to be imported again and again: it carries no generation, so importing
// it many times, or putting an earlier copy of it back, is simply another import.
TEST_F(SnapshotExportTest, AnExportImportsAnyNumberOfTimesAndCarriesNoGeneration) {
  const auto source = sample(1);
  SIESTA_ASSERT_OK(exporter_->export_session("again", fingerprint_, views(source)));
  const auto first = snapshot_test::read_file(dir_.file("again"));
  for (int i = 0; i < 3; ++i) {
    auto dest = zeroed();
    SIESTA_ASSERT_OK(import_into(*exporter_, "again", dest));
    expect_same_saved_bytes(dest, source);
  }
  SIESTA_ASSERT_OK_AND_ASSIGN(
      snapshot::SnapshotHeader fixed,
      snapshot::decode_fixed_fields({first.data(), snapshot::kFixedHeaderBytes}));
  EXPECT_EQ(fixed.generation, 0u);
  const auto other = sample(2);
  SIESTA_ASSERT_OK(exporter_->export_session("again", fingerprint_, views(other)));
  snapshot_test::write_file(dir_.file("again"), first);  // the earlier copy put back
  auto dest = zeroed();
  SIESTA_ASSERT_OK(import_into(*exporter_, "again", dest));
  expect_same_saved_bytes(dest, source);
}

// A FIFO under an export's name: refused at once, never waited on; a directory likewise.
TEST_F(SnapshotExportTest, AFifoOrDirectoryUnderAnExportsNameIsRefusedWithoutBlocking) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Status imported;
  auto dest = zeroed();
  EXPECT_TRUE(test_util::finishes_without_blocking(fifo, [&] {
    imported = import_into(*exporter_, "fifo", dest);
  })) << "the import blocked on a FIFO";
  SIESTA_EXPECT_CODE(imported, StatusCode::kFailedPrecondition);
  ASSERT_EQ(::mkdir(dir_.file("dir").c_str(), 0700), 0);
  SIESTA_EXPECT_CODE(import_into(*exporter_, "dir", dest), StatusCode::kFailedPrecondition);
  // Saving over the FIFO replaces it with a real export (the writer renames onto the name).
  const auto source = sample(1);
  SIESTA_ASSERT_OK(exporter_->export_session("fifo", fingerprint_, views(source)));
  SIESTA_EXPECT_OK(import_into(*exporter_, "fifo", dest));
}

// The reader's expiry rule for the modes: 0 means "never" for an export only.
TEST(ExportExpiryTest, ZeroMeansNeverOnlyInDurableMode) {
  snapshot::SnapshotHeader h;
  h.expiry_unix = snapshot::kNeverExpires;
  h.mode = SnapshotMode::kDurableExport;
  EXPECT_FALSE(snapshot::is_expired(h, 1'800'000'000));
  h.mode = SnapshotMode::kSessionDigest;
  EXPECT_TRUE(snapshot::is_expired(h, 1'800'000'000));
  h.mode = SnapshotMode::kDurableExport;
  h.expiry_unix = 100;  // an explicit deadline is honoured in every mode
  EXPECT_FALSE(snapshot::is_expired(h, 99));
  EXPECT_TRUE(snapshot::is_expired(h, 100));
}

}  // namespace
}  // namespace siesta
