// The real SnapshotWriter and SnapshotReader over a FaultyFileSystem (POSIX underneath, in a
// temporary directory), with a device region (SimBackend) and a host region. A valid snapshot
// A is written first; then snapshot B (other bytes) is attempted with a fault at each call of
// the write protocol, once and sticky, or with the process "dying" after each call of a
// successful write (halt_after, then crash()). After every case: the final name holds A or B
// exactly as the reader verifies them (B only when the writer succeeded, or, before a crash,
// when only the final directory sync failed, as snapshot_writer.h promises); no temporary
// file is left (except where the writer's own clean-up removal is refused: see
// RemoveFaultLeavesTheTemporary); no descriptor leaks; the reader accepts no partial file.
// The table of outcomes is in docs/TESTING.md ("Snapshot write protocol under faults").
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "testing/faulty_file_system.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::PersistKind;
using snapshot::SnapshotMode;

constexpr uint64_t kSeedA = 11;
constexpr uint64_t kSeedB = 22;
constexpr size_t kDeviceBytes = 200'000;  // about four 48 KiB staging chunks
constexpr size_t kHostBytes = 5000;

// What the final name holds, as the reader sees it.
enum class Holds { kNothing, kA, kB, kRejected, kOther };

const char* holds_name(Holds h) {
  switch (h) {
    case Holds::kNothing: return "nothing";
    case Holds::kA: return "A";
    case Holds::kB: return "B";
    case Holds::kRejected: return "a file the reader rejects";
    case Holds::kOther: return "bytes that are neither A nor B";
  }
  return "?";
}

// One session's regions, a FaultyFileSystem over POSIX in a fresh directory, and a writer
// and reader as the store would use them.
class World {
 public:
  // Failure: the backend could not be made (the test stops).
  static Result<std::unique_ptr<World>> make(FileSystem* inner = nullptr) {
    auto world = std::unique_ptr<World>(new World(inner));
    SimBackendOptions options;
    options.capacity_bytes = 16u << 20;
    options.granularity = 64u << 10;
    options.max_chunk_bytes = 256u << 10;
    options.staging_buffer_bytes = 48u << 10;
    options.staging_buffer_count = 3;
    SIESTA_ASSIGN_OR_RETURN(world->sim_, SimBackend::create(options));
    SIESTA_ASSIGN_OR_RETURN(ReservedRange range, ReservedRange::reserve(*world->sim_, 256u << 10));
    world->range_.emplace(std::move(range));
    SIESTA_RETURN_IF_ERROR(world->sim_->commit(world->range_->range()));
    world->host_.resize(kHostBytes);
    SnapshotRegion device;
    device.layout = {"kv", PersistKind::kContents, kDeviceBytes, {{0, kDeviceBytes}}};
    device.place = SnapshotRegion::Place::kDevice;
    device.device = world->range_->range().base;
    SnapshotRegion host;
    host.layout = {"ckpt", PersistKind::kContents, kHostBytes, {{0, kHostBytes}}};
    host.place = SnapshotRegion::Place::kHost;
    host.host = world->host_.data();
    world->regions_ = {device, host};
    return world;
  }

  FaultyFileSystem& fs() { return fs_; }
  FileSystem& plain() { return plain_; }
  const std::string& dir() const { return dir_.path(); }
  std::string path() const { return dir_.file("s.snap"); }

  // Puts the session state of `seed` in the regions and writes it to path() through fs()
  // (or `through`).
  // `on_memory_read`: the writer's callback once every chunk is read (SnapshotWriteOptions).
  Result<SnapshotWriteResult> write(uint64_t seed, const std::atomic<bool>* cancel = nullptr,
                                    FileSystem* through = nullptr,
                                    std::function<void()> on_memory_read = {}) {
    SIESTA_RETURN_IF_ERROR(
        test_util::write_device(*sim_, range_->range().base, device_pattern(seed)));
    const std::vector<std::byte> host = host_pattern(seed);
    std::copy(host.begin(), host.end(), host_.begin());  // in place: regions_ points at host_
    SnapshotWriteOptions options;
    options.path = path();
    options.fingerprint = snapshot_test::fingerprint(5);
    options.expiry_unix = clock_.unix_seconds() + 3600;
    options.cancel = cancel;
    options.on_memory_read = std::move(on_memory_read);
    SnapshotWriter writer(through != nullptr ? *through : fs_, clock_, key_, sim_.get());
    return writer.write(options, regions_);
  }

  // Reads `file` (the final name by default) into zeroed regions, through a plain POSIX
  // file system so that the faulty one's counters see only the writer.
  Holds read_back(std::string file = "", Status* status = nullptr) {
    if (file.empty()) file = path();
    if (!test_util::to_status(sim_->zero(range_->range())).ok()) return Holds::kOther;
    std::memset(host_.data(), 0, host_.size());
    SnapshotReader reader(plain_, clock_, key_, sim_.get());
    auto read = reader.read({file, SnapshotMode::kSessionEncrypted, snapshot_test::fingerprint(5)},
                            regions_);
    if (status != nullptr) *status = read.status();
    if (read.status().code() == StatusCode::kNotFound) return Holds::kNothing;
    if (!read.ok()) return Holds::kRejected;
    auto device = test_util::read_device(*sim_, range_->range().base, kDeviceBytes);
    if (!device.ok()) return Holds::kOther;
    for (uint64_t seed : {kSeedA, kSeedB}) {
      if (test_util::same_bytes(*device, device_pattern(seed)) &&
          test_util::same_bytes(host_, host_pattern(seed))) {
        return seed == kSeedA ? Holds::kA : Holds::kB;
      }
    }
    return Holds::kOther;
  }

  // Names in the directory other than the final one (temporaries).
  std::vector<std::string> leftovers() {
    std::vector<std::string> out;
    auto names = plain_.list_directory(dir());
    if (!names.ok()) return {"<cannot list: " + names.status().to_string() + ">"};
    for (const std::string& name : *names) {
      if (name != "s.snap") out.push_back(name);
    }
    return out;
  }

 private:
  explicit World(FileSystem* inner) : fs_(inner != nullptr ? *inner : posix_) {}

  static std::vector<std::byte> device_pattern(uint64_t seed) {
    return test_util::make_pattern(kDeviceBytes, seed);
  }
  static std::vector<std::byte> host_pattern(uint64_t seed) {
    return test_util::make_pattern(kHostBytes, seed + 1000);
  }

  siesta::testing::TempDir dir_;
  PosixFileSystem posix_;
  PosixFileSystem plain_;
  FaultyFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(1);
  std::unique_ptr<SimBackend> sim_;
  std::optional<ReservedRange> range_;  // released before sim_
  std::vector<std::byte> host_;
  std::vector<SnapshotRegion> regions_;
};

// How many calls of each operation a successful write of B makes (the regions' layout fixes
// it; the bytes do not change it).
FsCounters calls_of_a_clean_write() {
  auto world = World::make();
  if (!world.ok()) return {};
  if (!(*world)->write(kSeedA).ok()) return {};
  (*world)->fs().set_plan(FsFaultPlan::none());
  if (!(*world)->write(kSeedB).ok()) return {};
  return (*world)->fs().counters();
}

// Writes A (fault-free), so that every case starts from a valid snapshot at the final name.
#define SIESTA_WRITE_A(world)                         \
  do {                                                \
    SIESTA_ASSERT_OK((world).write(kSeedA).status()); \
    ASSERT_EQ((world).read_back(), Holds::kA);        \
    ASSERT_TRUE((world).leftovers().empty());         \
  } while (0)

// ---------------------------------------------------------------------------------------------
// One fault at one step, once or sticky.

enum class Nth { kFirst, kLast };

struct FaultCase {
  std::string name;
  FsOp op;
  FsFaultKind kind;
  Nth nth;
  bool sticky;
};

std::vector<FaultCase> fault_cases() {
  struct Step {
    FsOp op;
    FsFaultKind kind;
    Nth nth;
    const char* name;
  };
  const Step steps[] = {
      {FsOp::kCreate, FsFaultKind::kIoError, Nth::kFirst, "io_error_on_create"},
      {FsOp::kCreate, FsFaultKind::kNoSpace, Nth::kFirst, "no_space_on_create"},
      {FsOp::kWrite, FsFaultKind::kIoError, Nth::kFirst, "io_error_on_first_write"},
      {FsOp::kWrite, FsFaultKind::kIoError, Nth::kLast, "io_error_on_last_write"},
      {FsOp::kWrite, FsFaultKind::kNoSpace, Nth::kLast, "no_space_on_last_write"},
      {FsOp::kWrite, FsFaultKind::kShortWrite, Nth::kFirst, "short_write_on_first_write"},
      {FsOp::kWrite, FsFaultKind::kShortWrite, Nth::kLast, "short_write_on_last_write"},
      {FsOp::kSync, FsFaultKind::kIoError, Nth::kFirst, "io_error_on_fdatasync"},
      {FsOp::kRename, FsFaultKind::kIoError, Nth::kFirst, "io_error_on_rename"},
      {FsOp::kSyncDirectory, FsFaultKind::kIoError, Nth::kFirst, "io_error_on_directory_fsync"},
  };
  std::vector<FaultCase> out;
  for (const Step& step : steps) {
    for (bool sticky : {false, true}) {
      out.push_back({std::string(step.name) + (sticky ? "_sticky" : "_once"), step.op, step.kind,
                     step.nth, sticky});
    }
  }
  return out;
}

class SnapshotWriteFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(SnapshotWriteFaultTest, FinalNameHoldsAOrBAndNothingLeaks) {
  const FaultCase& c = GetParam();
  const FsCounters clean = calls_of_a_clean_write();
  ASSERT_GT(clean.of(FsOp::kWrite), 2u) << "the layout should take several writes";
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make());
  SIESTA_WRITE_A(*world);

  const FsFaultPlan plan{c.op, c.nth == Nth::kFirst ? 1 : clean.of(c.op), c.kind, c.sticky};
  std::cout << "injecting: " << plan.describe() << "\n";
  world->fs().set_plan(plan);
  const Result<SnapshotWriteResult> written = world->write(kSeedB);
  std::cout << "  writer: " << written.status().to_string() << "\n";

  ASSERT_FALSE(written.ok()) << "every step of the protocol is needed";
  EXPECT_NE(written.status().message().find("injected"), std::string::npos)
      << written.status().to_string();
  EXPECT_EQ(written.status().code(),
            c.kind == FsFaultKind::kNoSpace ? StatusCode::kNoSpace : StatusCode::kIoError);
  EXPECT_EQ(world->fs().counters().faults_fired, 1u) << "each step is called once per write";
  EXPECT_EQ(world->fs().counters().open_files, 0) << "descriptor leaked";
  EXPECT_TRUE(world->leftovers().empty()) << "temporary left: " << world->leftovers()[0];
  // snapshot_writer.h: when only the directory fsync after the rename fails, the complete
  // new file is in place (not known to be durable); otherwise the final name is untouched.
  const Holds want = c.op == FsOp::kSyncDirectory ? Holds::kB : Holds::kA;
  EXPECT_EQ(world->read_back(), want) << "expected " << holds_name(want);

  // And after a crash, nothing of B survives: its name change never became durable.
  world->fs().set_plan(FsFaultPlan::none());
  SIESTA_ASSERT_OK(world->fs().crash());
  EXPECT_EQ(world->read_back(), Holds::kA);
  EXPECT_TRUE(world->leftovers().empty());
}

INSTANTIATE_TEST_SUITE_P(EachStep, SnapshotWriteFaultTest, ::testing::ValuesIn(fault_cases()),
                         [](const ::testing::TestParamInfo<FaultCase>& p) { return p.param.name; });

// The writer's clean-up removal of its temporary is the one call the protocol makes only on
// failure; a cancelled write (the header is written, then the first chunk sees the flag)
// reaches it. The writer retries a refused removal once: a transient failure leaves nothing;
// a persistent one leaves the temporary (the writer returns the original error) until the
// store's start-up clean-up or remove(session) takes it, or, as here, a crash drops it (its
// creation was never made durable). It is never accepted.
struct RemoveCase {
  std::string name;
  bool sticky;
};

class SnapshotWriteRemoveFaultTest : public ::testing::TestWithParam<RemoveCase> {};

TEST_P(SnapshotWriteRemoveFaultTest, RemoveFaultIsRetriedOnceAndNeverAccepted) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make());
  SIESTA_WRITE_A(*world);
  const bool sticky = GetParam().sticky;
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, sticky};
  std::cout << "injecting: " << plan.describe() << " (write cancelled, so it cleans up)\n";
  world->fs().set_plan(plan);
  const std::atomic<bool> cancel{true};
  const Result<SnapshotWriteResult> written = world->write(kSeedB, &cancel);
  std::cout << "  writer: " << written.status().to_string() << "\n";
  EXPECT_EQ(written.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(world->fs().counters().of(FsOp::kRemove), 2u) << "one removal and one retry";
  EXPECT_EQ(world->fs().counters().faults_fired, sticky ? 2u : 1u);
  EXPECT_EQ(world->fs().counters().open_files, 0) << "descriptor leaked";
  EXPECT_EQ(world->read_back(), Holds::kA);
  const std::vector<std::string> left = world->leftovers();
  if (!sticky) {
    EXPECT_TRUE(left.empty()) << "the retry removes the temporary";
    return;
  }
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind("s.snap.tmp-", 0), 0u) << left[0];
  Status status;
  EXPECT_EQ(world->read_back(world->dir() + "/" + left[0], &status), Holds::kRejected)
      << "a partial temporary must never be accepted";
  EXPECT_EQ(status.code(), StatusCode::kTruncated) << status.to_string();

  world->fs().set_plan(FsFaultPlan::none());
  SIESTA_ASSERT_OK(world->fs().crash());
  EXPECT_EQ(world->read_back(), Holds::kA);
  EXPECT_TRUE(world->leftovers().empty());
}

INSTANTIATE_TEST_SUITE_P(CleanUp, SnapshotWriteRemoveFaultTest,
                         ::testing::Values(RemoveCase{"io_error_on_remove_once", false},
                                           RemoveCase{"io_error_on_remove_sticky", true}),
                         [](const ::testing::TestParamInfo<RemoveCase>& p) {
                           return p.param.name;
                         });

// Without a fault, a cancelled write leaves nothing and keeps A.
TEST(SnapshotWriteCancelTest, CancelledWriteRemovesItsTemporary) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make());
  SIESTA_WRITE_A(*world);
  world->fs().set_plan(FsFaultPlan::none());
  const std::atomic<bool> cancel{true};
  EXPECT_EQ(world->write(kSeedB, &cancel).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(world->fs().counters().of(FsOp::kRemove), 1u);
  EXPECT_EQ(world->fs().counters().open_files, 0);
  EXPECT_TRUE(world->leftovers().empty());
  EXPECT_EQ(world->read_back(), Holds::kA);
}

// A cancel raised after the last chunk was written (a command arrived during the trailer) is
// still honoured: the write is abandoned before fdatasync, its temporary removed, A kept.
// Guards a writer that checks the flag only between chunks and then syncs and renames anyway.
TEST(SnapshotWriteCancelTest, ACancelAfterTheLastChunkIsHonouredBeforeTheSync) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make());
  SIESTA_WRITE_A(*world);
  world->fs().set_plan(FsFaultPlan::none());
  std::atomic<bool> cancel{false};
  EXPECT_EQ(world->write(kSeedB, &cancel, nullptr, [&cancel] { cancel = true; }).status().code(),
            StatusCode::kCancelled);
  EXPECT_EQ(world->fs().counters().of(FsOp::kSync), 0u);
  EXPECT_EQ(world->fs().counters().of(FsOp::kRename), 0u);
  EXPECT_TRUE(world->leftovers().empty());
  EXPECT_EQ(world->read_back(), Holds::kA);
}

// ---------------------------------------------------------------------------------------------
// A crash right after each call of a successful write.

struct CrashCase {
  FsOp op;
  uint64_t nth;
};

std::vector<CrashCase> crash_cases() {
  const FsCounters clean = calls_of_a_clean_write();
  std::vector<CrashCase> out;
  for (FsOp op : {FsOp::kCreate, FsOp::kWrite, FsOp::kSync, FsOp::kRename, FsOp::kSyncDirectory}) {
    for (uint64_t n = 1; n <= clean.of(op); ++n) out.push_back({op, n});
  }
  return out;
}

class SnapshotWriteCrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(SnapshotWriteCrashTest, OnlyACompleteDurableWriteSurvives) {
  const CrashCase& c = GetParam();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make());
  SIESTA_WRITE_A(*world);
  world->fs().set_plan(FsFaultPlan::none());
  world->fs().halt_after(c.op, c.nth);
  std::cout << "injecting: crash after " << fs_op_name(c.op) << " call " << c.nth << "\n";
  const Result<SnapshotWriteResult> written = world->write(kSeedB);
  std::cout << "  writer: " << written.status().to_string() << "\n";
  const bool last_step = c.op == FsOp::kSyncDirectory;
  EXPECT_EQ(written.ok(), last_step) << written.status().to_string();
  EXPECT_EQ(world->fs().counters().open_files, 0) << "descriptor leaked";
  SIESTA_ASSERT_OK(world->fs().crash());
  const Holds want = last_step ? Holds::kB : Holds::kA;
  EXPECT_EQ(world->read_back(), want) << "expected " << holds_name(want);
  EXPECT_TRUE(world->leftovers().empty()) << "temporary left: " << world->leftovers()[0];
}

INSTANTIATE_TEST_SUITE_P(AfterEachCall, SnapshotWriteCrashTest, ::testing::ValuesIn(crash_cases()),
                         [](const ::testing::TestParamInfo<CrashCase>& p) {
                           return "crash_after_" + std::string(fs_op_name(p.param.op)) + "_" +
                                  std::to_string(p.param.nth);
                         });

// ---------------------------------------------------------------------------------------------
// Seeded plans (FsFaultPlan::from_seed), each followed by a crash.

TEST(SnapshotWriteSeededTest, TwoHundredSeeds) {
  int fired = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const FsFaultPlan plan = FsFaultPlan::from_seed(seed);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + plan.describe());
    std::cout << "seed " << seed << " injecting: " << plan.describe() << "\n";
    SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make());
    SIESTA_WRITE_A(*world);
    world->fs().set_plan(plan);
    const Result<SnapshotWriteResult> written = world->write(kSeedB);
    const FsCounters counters = world->fs().counters();
    EXPECT_EQ(written.ok(), counters.faults_fired == 0) << written.status().to_string();
    if (counters.faults_fired != 0) ++fired;
    EXPECT_EQ(counters.open_files, 0) << "descriptor leaked";
    const Holds holds = world->read_back();
    // B before a crash: success, or only the final directory sync failed.
    const bool b_in_place = written.ok() || plan.op == FsOp::kSyncDirectory;
    EXPECT_EQ(holds, b_in_place ? Holds::kB : Holds::kA) << holds_name(holds);
    // The writer removes its temporary on every failure; only a refused removal leaves it,
    // and remove is called only on failure, when the one plan has already fired elsewhere.
    EXPECT_TRUE(world->leftovers().empty()) << "temporary left: " << world->leftovers()[0];
    world->fs().set_plan(FsFaultPlan::none());
    SIESTA_ASSERT_OK(world->fs().crash());
    // A crash keeps B only when the whole protocol, directory sync included, succeeded.
    EXPECT_EQ(world->read_back(), written.ok() ? Holds::kB : Holds::kA);
    EXPECT_TRUE(world->leftovers().empty());
  }
  // Most plans name calls the writer never makes (open, read, lock, a later call number);
  // the rest must have fired somewhere.
  std::cout << "seeded plans that fired during the write: " << fired << " of 200\n";
  EXPECT_GT(fired, 20);
}

// ---------------------------------------------------------------------------------------------
// Not enough free space: NoSpace before a byte is written; no temporary is even created.

TEST(SnapshotWriteNoSpaceTest, RefusedBeforeCreatingAnything) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> sized, World::make());
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult a, sized->write(kSeedA));

  snapshot_test::TestFileSystem one_byte_short(a.file_bytes - 1);
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> world, World::make(&one_byte_short));
  SIESTA_ASSERT_OK(world->write(kSeedA, nullptr, &world->plain()).status());
  ASSERT_EQ(world->read_back(), Holds::kA);
  const std::vector<uint8_t> a_bytes = snapshot_test::read_file(world->path());
  std::cout << "injecting: available_bytes " << a.file_bytes - 1 << " for a " << a.file_bytes
            << "-byte snapshot\n";

  const Result<SnapshotWriteResult> written = world->write(kSeedB);
  std::cout << "  writer: " << written.status().to_string() << "\n";
  EXPECT_EQ(written.status().code(), StatusCode::kNoSpace);
  const FsCounters counters = world->fs().counters();
  EXPECT_EQ(counters.of(FsOp::kCreate), 0u) << "no temporary may be created";
  EXPECT_EQ(one_byte_short.creates, 0);
  EXPECT_EQ(counters.of(FsOp::kWrite), 0u);
  EXPECT_EQ(counters.of(FsOp::kRemove), 0u);
  EXPECT_EQ(counters.open_files, 0);
  EXPECT_TRUE(world->leftovers().empty());
  EXPECT_EQ(snapshot_test::read_file(world->path()), a_bytes) << "A must be untouched";
  EXPECT_EQ(world->read_back(), Holds::kA);

  // Exactly enough room is enough.
  snapshot_test::TestFileSystem exact(a.file_bytes);
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<World> roomy, World::make(&exact));
  SIESTA_ASSERT_OK(roomy->write(kSeedB).status());
  EXPECT_EQ(roomy->read_back(), Holds::kB);
}

}  // namespace
}  // namespace siesta
