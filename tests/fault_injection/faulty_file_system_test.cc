// FaultyFileSystem over the POSIX file system: each fault fires exactly on its Nth call of its
// operation (once, or from then on when sticky), says "injected" and the plan, and leaves
// the state the FileSystem contract promises; crash() drops exactly what was not made
// durable (file bytes not synced, names not followed by a directory sync).
#include "testing/faulty_file_system.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/posix_file_system.h"
#include "core/base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using siesta::testing::TempDir;
using ::testing::HasSubstr;

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// The file's content, or "<missing>".
std::string content_of(const std::string& path) {
  if (!std::filesystem::exists(path)) return "<missing>";
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void expect_injected(const Status& status, const FsFaultPlan& plan) {
  EXPECT_THAT(status.message(), HasSubstr("injected")) << status.to_string();
  EXPECT_THAT(status.message(), HasSubstr(plan.describe())) << status.to_string();
}

// Creates, writes, syncs and closes `path` through `fs`; returns the first error.
Status write_file(FileSystem& fs, const std::string& path, const std::string& text) {
  SIESTA_ASSIGN_OR_RETURN(auto file, fs.create_exclusive(path, 0600));
  SIESTA_RETURN_IF_ERROR(file->write_at(0, bytes_of(text)));
  SIESTA_RETURN_IF_ERROR(file->sync());
  return file->close();
}

TEST(FsFaultPlanTest, DescribeNamesKindOpCallAndStickiness) {
  EXPECT_EQ(FsFaultPlan::none().describe(), "no fault");
  EXPECT_EQ((FsFaultPlan{FsOp::kWrite, 3, FsFaultKind::kNoSpace, false}).describe(),
            "no_space on write call 3");
  EXPECT_EQ((FsFaultPlan{FsOp::kSyncDirectory, 1, FsFaultKind::kIoError, true}).describe(),
            "io_error on sync_directory call 1 and every later one");
}

TEST(FsFaultPlanTest, FromSeedIsDeterministicCoversEveryOpAndOnlySensibleKinds) {
  std::set<FsOp> ops;
  std::set<FsFaultKind> kinds;
  bool saw_sticky = false;
  for (uint64_t seed = 1; seed <= 500; ++seed) {
    const FsFaultPlan plan = FsFaultPlan::from_seed(seed, 5);
    EXPECT_EQ(plan, FsFaultPlan::from_seed(seed, 5)) << "seed " << seed;
    EXPECT_GE(plan.when.nth_call, 1u);
    EXPECT_LE(plan.when.nth_call, 5u);
    if (plan.kind == FsFaultKind::kShortWrite) {
      EXPECT_EQ(plan.op, FsOp::kWrite);
    }
    if (plan.kind == FsFaultKind::kNoSpace) {
      EXPECT_NE(plan.op, FsOp::kRead);
      EXPECT_NE(plan.op, FsOp::kLock);
    }
    ops.insert(plan.op);
    kinds.insert(plan.kind);
    saw_sticky |= plan.when.sticky;
  }
  EXPECT_EQ(ops.size(), static_cast<size_t>(kFsOpCount));
  EXPECT_EQ(kinds.size(), static_cast<size_t>(kFsFaultKindCount));
  EXPECT_TRUE(saw_sticky);
}

// Runs `call` (one call of `op`) five times under a plan firing on call 3; returns which
// calls failed.
template <class Call>
std::vector<int> failing_calls(FaultyFileSystem& fs, FsFaultPlan plan, Call call) {
  fs.set_plan(plan);
  std::vector<int> failed;
  for (int i = 1; i <= 5; ++i) {
    Status status = call(i);
    if (!status.ok()) {
      expect_injected(status, plan);
      EXPECT_THAT(status.message(), HasSubstr("call " + std::to_string(i))) << status.to_string();
      failed.push_back(i);
    }
  }
  EXPECT_EQ(fs.counters().of(plan.op), 5u);
  return failed;
}

class FaultyFileSystemOpTest : public ::testing::TestWithParam<std::tuple<FsOp, bool>> {};

TEST_P(FaultyFileSystemOpTest, FiresExactlyOnTheNthCall) {
  // Named variables, not a structured binding: the lambda below captures them.
  const FsOp op = std::get<0>(GetParam());
  const bool sticky = std::get<1>(GetParam());
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  // Five of everything to act on, made before the plan is set.
  for (int i = 1; i <= 5; ++i) write_plain(temp.file("r" + std::to_string(i)), "read me");
  auto file = fs.create_exclusive(temp.file("w"), 0600).value();
  auto readable = fs.open_readable(temp.file("r1")).value();
  std::vector<std::unique_ptr<FileLock>> locks;

  const FsFaultPlan plan{op, 3, FsFaultKind::kIoError, sticky};
  std::vector<int> failed = failing_calls(fs, plan, [&](int i) -> Status {
    const std::string n = std::to_string(i);
    switch (op) {
      case FsOp::kCreate: return fs.create_exclusive(temp.file("c" + n), 0600).status();
      case FsOp::kWrite: return file->write_at(0, bytes_of("x"));
      case FsOp::kSync: return file->sync();
      case FsOp::kRename: return fs.rename(temp.file("r" + n), temp.file("renamed" + n));
      case FsOp::kSyncDirectory: return fs.sync_directory(temp.path());
      case FsOp::kRemove: return fs.remove(temp.file("r" + n));
      case FsOp::kOpen: return fs.open_readable(temp.file("r" + n)).status();
      case FsOp::kRead: {
        std::byte buffer[4];
        return readable->read_at(0, buffer).status();
      }
      case FsOp::kLock: {
        auto lock = fs.lock_file(temp.file("l" + n), false);
        Status status = lock.status();
        if (lock.ok()) locks.push_back(std::move(lock).value());
        return status;
      }
    }
    return Internal("unreachable");
  });
  EXPECT_EQ(failed, sticky ? std::vector<int>({3, 4, 5}) : std::vector<int>({3}));
  EXPECT_EQ(fs.counters().faults_fired, failed.size());
  // A failed call did nothing: no file made, renamed or removed by it.
  if (op == FsOp::kCreate) {
    EXPECT_FALSE(std::filesystem::exists(temp.file("c3")));
  }
  if (op == FsOp::kRename || op == FsOp::kRemove) {
    EXPECT_EQ(content_of(temp.file("r3")), "read me");
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOps, FaultyFileSystemOpTest,
    ::testing::Combine(::testing::Values(FsOp::kCreate, FsOp::kWrite, FsOp::kSync, FsOp::kRename,
                                         FsOp::kSyncDirectory, FsOp::kRemove, FsOp::kOpen,
                                         FsOp::kRead, FsOp::kLock),
                       ::testing::Bool()),
    [](const auto& test) {
      return std::string(fs_op_name(std::get<0>(test.param))) +
             (std::get<1>(test.param) ? "_sticky" : "_once");
    });

TEST(FaultyFileSystemTest, NoSpaceIsItsOwnCode) {
  TempDir temp;
  PosixFileSystem posix;
  const FsFaultPlan plan{FsOp::kCreate, 1, FsFaultKind::kNoSpace, false};
  FaultyFileSystem fs(posix, plan);
  Status status = fs.create_exclusive(temp.file("a"), 0600).status();
  EXPECT_EQ(status.code(), StatusCode::kNoSpace);
  expect_injected(status, plan);
  EXPECT_TRUE(fs.create_exclusive(temp.file("a"), 0600).ok()) << "transient: the next works";
}

TEST(FaultyFileSystemTest, ShortWriteWritesAPrefixThenFails) {
  TempDir temp;
  PosixFileSystem posix;
  const FsFaultPlan plan{FsOp::kWrite, 2, FsFaultKind::kShortWrite, false};
  FaultyFileSystem fs(posix, plan);
  auto file = fs.create_exclusive(temp.file("a"), 0600).value();
  ASSERT_TRUE(file->write_at(0, bytes_of("0123")).ok());
  Status status = file->write_at(4, bytes_of("abcdefgh"));
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  expect_injected(status, plan);
  EXPECT_THAT(status.message(), HasSubstr("wrote 4 of 8 bytes"));
  EXPECT_EQ(content_of(temp.file("a")), "0123abcd");
}

TEST(FaultyFileSystemTest, CountsOpenFilesAndLocksSoLeaksShow) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  {
    auto w = fs.create_exclusive(temp.file("a"), 0600).value();
    EXPECT_EQ(fs.counters().open_files, 1);
    auto r = fs.open_readable(temp.file("a")).value();
    auto lock = fs.lock_file(temp.file("lock"), false).value();
    EXPECT_EQ(fs.counters().open_files, 2);
    EXPECT_EQ(fs.counters().held_locks, 1);
    ASSERT_TRUE(w->close().ok());
    EXPECT_EQ(fs.counters().open_files, 1) << "close() releases the descriptor at once";
  }
  EXPECT_EQ(fs.counters().open_files, 0);
  EXPECT_EQ(fs.counters().held_locks, 0);
}

TEST(FaultyFileSystemTest, ReadsAroundThePageCacheAreCountedAndFaultedAsAnyRead) {
  // Fault injected: io_error on the second read, which is the first read around the cache.
  TempDir temp;
  PosixFileSystem posix;
  const FsFaultPlan plan{FsOp::kRead, 2, FsFaultKind::kIoError, false};
  FaultyFileSystem fs(posix, plan);
  ASSERT_TRUE(write_file(fs, temp.file("a"), std::string(8192, 'x')).ok());
  auto readable = fs.open_readable(temp.file("a")).value();
  EXPECT_EQ(readable->cached_bytes(0, 8192).value(), 8192u) << "passed on: just written";
  std::byte first[16];
  ASSERT_TRUE(readable->read_at(0, first).ok());
  auto direct = readable->open_direct();
  UniqueFd probe(::open(temp.file("a").c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (!probe.valid()) {  // tmpfs: the file system's answer, passed on
    EXPECT_EQ(direct.status().code(), StatusCode::kUnsupported) << direct.status().to_string();
    return;
  }
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_EQ(fs.counters().open_files, 2) << "the handle around the cache is counted";
  void* aligned = nullptr;
  ASSERT_EQ(::posix_memalign(&aligned, kDirectReadAlignment, 4096), 0);
  std::unique_ptr<void, decltype(&std::free)> buffer(aligned, &std::free);
  const std::span<std::byte> block(static_cast<std::byte*>(aligned), 4096);
  Status failed = (*direct)->read_at(0, block).status();
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  expect_injected(failed, plan);
  EXPECT_EQ((*direct)->read_at(4096, block).value(), 4096u) << "once: the next works";
  direct->reset();
  EXPECT_EQ(fs.counters().open_files, 1);
}

TEST(FaultyFileSystemCrashTest, DropsBytesWrittenAfterTheLastSync) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  const std::string path = temp.file("a");
  auto file = fs.create_exclusive(path, 0600).value();
  ASSERT_TRUE(fs.sync_directory(temp.path()).ok());
  ASSERT_TRUE(file->write_at(0, bytes_of("durable")).ok());
  ASSERT_TRUE(file->sync().ok());
  ASSERT_TRUE(file->write_at(7, bytes_of("-lost")).ok());
  ASSERT_TRUE(file->write_at(0, bytes_of("D")).ok());
  EXPECT_EQ(content_of(path), "Durable-lost");
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(path), "durable");
  EXPECT_EQ(file->write_at(0, bytes_of("x")).code(), StatusCode::kFailedPrecondition)
      << "a handle from before the crash belongs to a dead process";
  EXPECT_TRUE(file->close().ok());
  EXPECT_EQ(fs.counters().open_files, 0);
}

TEST(FaultyFileSystemCrashTest, FailedSyncMakesNothingDurable) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix, {FsOp::kSync, 2, FsFaultKind::kIoError, false});
  auto file = fs.create_exclusive(temp.file("a"), 0600).value();
  ASSERT_TRUE(fs.sync_directory(temp.path()).ok());
  ASSERT_TRUE(file->write_at(0, bytes_of("one")).ok());
  ASSERT_TRUE(file->sync().ok());
  ASSERT_TRUE(file->write_at(3, bytes_of("two")).ok());
  EXPECT_FALSE(file->sync().ok());
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(temp.file("a")), "one");
}

TEST(FaultyFileSystemCrashTest, CreationWithoutDirectorySyncVanishesEvenIfSynced) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  ASSERT_TRUE(write_file(fs, temp.file("a"), "synced bytes, unsynced name").ok());
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(temp.file("a")), "<missing>");
}

TEST(FaultyFileSystemCrashTest, TheWriteProtocolSurvivesOnlyWhenComplete) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  const std::string final_path = temp.file("snap");
  // A previous complete snapshot: written, synced, renamed, directory synced.
  ASSERT_TRUE(write_file(fs, final_path + ".tmp-1", "old").ok());
  ASSERT_TRUE(fs.rename(final_path + ".tmp-1", final_path).ok());
  ASSERT_TRUE(fs.sync_directory(temp.path()).ok());
  // A new one renamed over it, but the directory never synced: the crash brings "old" back.
  ASSERT_TRUE(write_file(fs, final_path + ".tmp-2", "new").ok());
  ASSERT_TRUE(fs.rename(final_path + ".tmp-2", final_path).ok());
  EXPECT_EQ(content_of(final_path), "new");
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(final_path), "old");
  EXPECT_EQ(content_of(final_path + ".tmp-2"), "<missing>") << "its creation was never durable";
  EXPECT_EQ(content_of(final_path + ".tmp-1"), "<missing>");
  // Done completely, it survives.
  ASSERT_TRUE(write_file(fs, final_path + ".tmp-3", "newer").ok());
  ASSERT_TRUE(fs.rename(final_path + ".tmp-3", final_path).ok());
  ASSERT_TRUE(fs.sync_directory(temp.path()).ok());
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(final_path), "newer");
  EXPECT_EQ(content_of(final_path + ".tmp-3"), "<missing>");
}

TEST(FaultyFileSystemCrashTest, UnsyncedRemovalIsUndone) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  write_plain(temp.file("outside"), "made before the wrapper");
  ASSERT_TRUE(write_file(fs, temp.file("inside"), "mine").ok());
  ASSERT_TRUE(fs.sync_directory(temp.path()).ok());
  ASSERT_TRUE(fs.remove(temp.file("outside")).ok());
  ASSERT_TRUE(fs.remove(temp.file("inside")).ok());
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(temp.file("outside")), "made before the wrapper");
  EXPECT_EQ(content_of(temp.file("inside")), "mine");
  // A synced removal stays done.
  ASSERT_TRUE(fs.remove(temp.file("inside")).ok());
  ASSERT_TRUE(fs.sync_directory(temp.path() + "/").ok()) << "same directory, other spelling";
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(temp.file("inside")), "<missing>");
}

TEST(FaultyFileSystemCrashTest, ADirectorySyncCoversOnlyItsOwnDirectory) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  ASSERT_TRUE(fs.make_directory(temp.file("sub"), 0700).ok());
  ASSERT_TRUE(write_file(fs, temp.file("a"), "a").ok());
  ASSERT_TRUE(write_file(fs, temp.file("sub/b"), "b").ok());
  ASSERT_TRUE(fs.sync_directory(temp.file("sub")).ok());
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(temp.file("a")), "<missing>");
  EXPECT_EQ(content_of(temp.file("sub/b")), "b");
}

// halt_after: the halting call runs, every later call of any kind is refused without
// reaching the disk (so a writer's clean-up cannot run either), and crash() ends the halt.
TEST(FaultyFileSystemCrashTest, HaltAfterRefusesEveryLaterCallUntilTheCrash) {
  TempDir temp;
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  const std::string path = temp.file("a");
  fs.halt_after(FsOp::kWrite, 2);
  auto file = fs.create_exclusive(path, 0600);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->write_at(0, bytes_of("on")).ok());
  ASSERT_TRUE((*file)->write_at(2, bytes_of("e!")).ok()) << "the halting call itself runs";
  const Status third = (*file)->write_at(4, bytes_of("x"));
  EXPECT_EQ(third.code(), StatusCode::kIoError);
  EXPECT_THAT(third.message(), HasSubstr("halted"));
  EXPECT_EQ((*file)->sync().code(), StatusCode::kIoError);
  EXPECT_EQ(fs.rename(path, temp.file("b")).code(), StatusCode::kIoError);
  EXPECT_EQ(fs.remove(path).code(), StatusCode::kIoError);
  EXPECT_EQ(fs.sync_directory(temp.path()).code(), StatusCode::kIoError);
  EXPECT_FALSE(fs.create_exclusive(temp.file("c"), 0600).ok());
  EXPECT_FALSE(fs.open_readable(path).ok());
  EXPECT_EQ(content_of(path), "one!") << "nothing after the halt reached the disk";
  EXPECT_EQ(content_of(temp.file("c")), "<missing>");
  EXPECT_TRUE((*file)->close().ok());
  EXPECT_EQ(fs.counters().open_files, 0);
  ASSERT_TRUE(fs.crash().ok());
  EXPECT_EQ(content_of(path), "<missing>") << "its creation was never made durable";
  EXPECT_TRUE(write_file(fs, path, "after").ok()) << "the crash ends the halt";
  EXPECT_EQ(content_of(path), "after");
}

// The snapshot write protocol (temporary, write, sync, close, rename, directory sync) under one
// seeded plan per seed, then a crash: the final name holds the new content if the protocol
// finished and the previous one otherwise; no temporary survives; no descriptor leaks.
TEST(FaultyFileSystemCrashTest, SeededWriteProtocolSweep) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const FsFaultPlan plan = FsFaultPlan::from_seed(seed, 4);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + plan.describe());
    TempDir temp;
    PosixFileSystem posix;
    FaultyFileSystem fs(posix);
    const std::string final_path = temp.file("snap");
    ASSERT_TRUE(write_file(fs, final_path + ".tmp-old", "old").ok());
    ASSERT_TRUE(fs.rename(final_path + ".tmp-old", final_path).ok());
    ASSERT_TRUE(fs.sync_directory(temp.path()).ok());

    fs.set_plan(plan);
    const std::string temp_path = final_path + ".tmp-new";
    auto protocol = [&]() -> Status {
      SIESTA_ASSIGN_OR_RETURN(auto file, fs.create_exclusive(temp_path, 0600));
      SIESTA_RETURN_IF_ERROR(file->write_at(0, bytes_of("ne")));
      SIESTA_RETURN_IF_ERROR(file->write_at(2, bytes_of("w!")));
      SIESTA_RETURN_IF_ERROR(file->sync());
      SIESTA_RETURN_IF_ERROR(file->close());
      SIESTA_RETURN_IF_ERROR(fs.rename(temp_path, final_path));
      return fs.sync_directory(temp.path());
    };
    const Status done = protocol();
    if (!done.ok()) {
      EXPECT_THAT(done.message(), HasSubstr("injected"));
      fs.remove(temp_path).ignore();  // what a writer does on failure; may fail too
    }
    EXPECT_EQ(fs.counters().open_files, 0);
    ASSERT_TRUE(fs.crash().ok());
    const std::string after = content_of(final_path);
    // A protocol that failed anywhere, even at the last directory sync, never made the new
    // name durable.
    EXPECT_EQ(after, done.ok() ? "new!" : "old");
    EXPECT_EQ(content_of(temp_path), "<missing>");
  }
}

}  // namespace
}  // namespace siesta
