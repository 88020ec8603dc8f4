// The fault matrix of the Offloader: every FileSystem and MemoryBackend call a save and a
// restore make, failing once (transient: each call in turn) and on every call from the first
// (persistent). Each row states the outcome it expects:
//   kept      the save fails, the memory is kept, a later save succeeds; nothing lost
//   hit       the restore succeeds anyway (a transient read error is read again)
//   fallback  the history is discarded (typed reason), the session continues fresh
//   retry     the restore is refused as OutOfMemory, the snapshot kept; a later one succeeds
//   fatal     the memory cannot be mapped back: the fatal handler runs, the session is lost
//             (siesta-server then exits with status 70)
// and the test counts, over all cases: sessions lost where the row expects none, wrong bytes
// (verify() failing), descriptors left open, and memory left committed when released. The
// table is printed (docs/TESTING.md quotes it).
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

enum class Expect { kKept, kHit, kFallback, kRetry, kFatal };
const char* expect_name(Expect e) {
  switch (e) {
    case Expect::kKept: return "memory kept, saved later";
    case Expect::kHit: return "restored anyway";
    case Expect::kFallback: return "history discarded";
    case Expect::kRetry: return "503, restored later";
    case Expect::kFatal: return "session lost";
  }
  return "?";
}

struct Tally {
  int cases = 0;
  int lost = 0;         // history lost where the row expects none
  int wrong_bytes = 0;  // verify() failed
  int leaked_fds = 0;
  int leaked_memory = 0;
  int unexpected = 0;  // an outcome other than the row's
};

std::map<std::string, std::pair<Expect, Tally>>& table() {
  static std::map<std::string, std::pair<Expect, Tally>> rows;
  return rows;
}

constexpr uint32_t kLength = 20;

// Counts the calls one clean save and one clean restore make, per operation.
struct CallCounts {
  FsCounters save_fs, restore_fs;
  FaultCounters save_backend, restore_backend;
};
const CallCounts& clean_counts() {
  static const CallCounts counts = [] {
    CallCounts c;
    OffloaderFixture f;
    EXPECT_TRUE(f.command(kLength).ok());
    f.fs_.set_plan(FsFaultPlan::none());
    f.faulty_backend_->set_plan(FaultPlan::none());
    f.pass(OffloaderFixture::kIdle);
    c.save_fs = f.fs_.counters();
    c.save_backend = f.faulty_backend_->counters();
    f.fs_.set_plan(FsFaultPlan::none());
    f.faulty_backend_->set_plan(FaultPlan::none());
    EXPECT_TRUE(f.command(0).ok());
    c.restore_fs = f.fs_.counters();
    c.restore_backend = f.faulty_backend_->counters();
    return c;
  }();
  return counts;
}

void record(const std::string& row, Expect expect, bool as_expected, bool lost, bool wrong,
            OffloaderFixture& f) {
  auto& [e, tally] = table()[row];
  e = expect;
  ++tally.cases;
  tally.unexpected += as_expected ? 0 : 1;
  tally.lost += lost ? 1 : 0;
  tally.wrong_bytes += wrong ? 1 : 0;
  tally.leaked_fds += f.fs_.counters().open_files != 0 ? 1 : 0;
  const OffloadState s = f.state();
  const bool released = s == OffloadState::kDisk || s == OffloadState::kExpired;
  tally.leaked_memory += released && f.sim_->stats().committed_bytes != 0 ? 1 : 0;
  EXPECT_TRUE(as_expected) << row;
  EXPECT_FALSE(lost) << row;
  EXPECT_FALSE(wrong) << row;
}

// A save under `fault`; then, healed, the session must save and restore with every byte.
void run_save_case(const std::string& row, const std::function<void(OffloaderFixture&)>& fault) {
  SCOPED_TRACE(row);
  OffloaderFixture f;
  ASSERT_TRUE(f.command(kLength).ok());
  fault(f);
  f.pass(OffloaderFixture::kIdle);
  const bool kept = f.state() == OffloadState::kResident && f.target_->verify().empty();
  const bool kept_or_saved = kept || f.state() == OffloadState::kDisk;
  f.fs_.set_plan(FsFaultPlan::none());
  f.faulty_backend_->set_plan(FaultPlan::none());
  for (int i = 0; i < 8 && f.state() != OffloadState::kDisk; ++i) f.pass(120);
  Result<Admission> admitted = f.command(0);
  const bool ok = admitted.ok();
  const bool lost = !ok || admitted->fallback.has_value() || f.target_->length() != kLength;
  const bool wrong = ok && !f.target_->verify().empty();
  record(row, Expect::kKept, kept_or_saved && ok, lost, wrong, f);
}

// A restore under `fault`, with the outcome `expect`.
void run_restore_case(const std::string& row, Expect expect,
                      const std::function<void(OffloaderFixture&)>& fault) {
  SCOPED_TRACE(row);
  OffloaderFixture f;
  ASSERT_TRUE(f.command(kLength).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  fault(f);
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  const Result<Admission> admitted =
      lease.ok() ? Result<Admission>(lease->admission()) : lease.status();
  bool as_expected = false, lost = false, wrong = false;
  switch (expect) {
    case Expect::kHit:
      as_expected = admitted.ok() && admitted->restored;
      lost = !as_expected;
      break;
    case Expect::kFallback:
      as_expected = admitted.ok() && admitted->fallback.has_value() && f.target_->length() == 0;
      break;
    case Expect::kRetry:
      as_expected = admitted.status().code() == StatusCode::kOutOfMemory &&
                    f.state() == OffloadState::kDisk && f.snapshot_exists();
      break;
    case Expect::kFatal: as_expected = !admitted.ok() && f.fatal_.size() == 1; break;
    case Expect::kKept: break;
  }
  if (admitted.ok()) {
    wrong = !f.target_->verify().empty();
    lease->release();
  }
  if (expect == Expect::kRetry) {
    f.fs_.set_plan(FsFaultPlan::none());
    f.faulty_backend_->set_plan(FaultPlan::none());
    Result<Offloader::Lease> later = f.offloader_->acquire();
    lost = !later.ok() || !later->admission().restored;
    wrong = later.ok() && !f.target_->verify().empty();
  }
  record(row, expect, as_expected, lost, wrong, f);
}

std::string row_name(const char* phase, std::string_view op, bool sticky) {
  return std::string(phase) + " " + std::string(op) + (sticky ? " (persistent)" : " (transient)");
}

TEST(OffloaderFaultMatrixTest, SaveFileSystemFaults) {
  const CallCounts& counts = clean_counts();
  for (FsOp op : {FsOp::kCreate, FsOp::kWrite, FsOp::kSync, FsOp::kRename, FsOp::kSyncDirectory}) {
    const uint64_t calls = counts.save_fs.of(op);
    ASSERT_GT(calls, 0u) << fs_op_name(op);
    for (bool sticky : {false, true}) {
      for (uint64_t nth = 1; nth <= (sticky ? 1 : calls); ++nth) {
        for (FsFaultKind kind : {FsFaultKind::kIoError, FsFaultKind::kNoSpace}) {
          // Injected: `kind` on call `nth` of `op` during the save (and later ones if sticky).
          run_save_case(row_name("save", fs_op_name(op), sticky), [=](OffloaderFixture& f) {
            f.fs_.set_plan({op, nth, kind, sticky});
          });
        }
      }
    }
  }
}

TEST(OffloaderFaultMatrixTest, SaveBackendFaults) {
  const CallCounts& counts = clean_counts();
  for (bool sticky : {false, true}) {
    for (uint64_t nth = 1; nth <= (sticky ? 1 : counts.save_backend.copy_calls); ++nth) {
      // Injected: the Nth device-to-staging copy of the save fails.
      run_save_case(row_name("save", "copy", sticky), [=](OffloaderFixture& f) {
        f.faulty_backend_->set_plan({FaultKind::kCopyFails, nth, sticky});
      });
    }
    // Injected: the decommit after the durable write fails.
    run_save_case(row_name("save", "decommit", sticky), [=](OffloaderFixture& f) {
      f.faulty_backend_->set_plan({FaultKind::kDecommitFails, 1, sticky});
    });
  }
}

TEST(OffloaderFaultMatrixTest, RestoreFileSystemFaults) {
  const CallCounts& counts = clean_counts();
  for (FsOp op : {FsOp::kOpen, FsOp::kRead}) {
    const uint64_t calls = counts.restore_fs.of(op);
    ASSERT_GT(calls, 0u) << fs_op_name(op);
    for (uint64_t nth = 1; nth <= calls; ++nth) {
      // Injected: EIO on call `nth` of `op` during the restore, once: read again, restored.
      run_restore_case(row_name("restore", fs_op_name(op), false), Expect::kHit,
                       [=](OffloaderFixture& f) {
                         f.fs_.set_plan({op, nth, FsFaultKind::kIoError, false});
                       });
    }
    // Injected: EIO on every call of `op` from the first: the history is given up.
    run_restore_case(row_name("restore", fs_op_name(op), true), Expect::kFallback,
                     [=](OffloaderFixture& f) {
                       f.fs_.set_plan({op, 1, FsFaultKind::kIoError, true});
                     });
  }
  // Injected: the removal of the restored snapshot fails; the session is intact.
  run_restore_case(row_name("restore", "remove", true), Expect::kHit, [](OffloaderFixture& f) {
    f.fs_.set_plan({FsOp::kRemove, 1, FsFaultKind::kIoError, true});
  });
}

TEST(OffloaderFaultMatrixTest, RestoreBackendFaults) {
  const CallCounts& counts = clean_counts();
  for (bool sticky : {false, true}) {
    // Injected: out of memory on the restore's commit.
    run_restore_case(row_name("restore", "commit out of memory", sticky), Expect::kRetry,
                     [=](OffloaderFixture& f) {
                       f.faulty_backend_->set_plan({FaultKind::kCommitOutOfMemory, 1, sticky});
                     });
    // Injected: a driver error on the restore's commit.
    run_restore_case(row_name("restore", "commit device error", sticky), Expect::kFatal,
                     [=](OffloaderFixture& f) {
                       f.faulty_backend_->set_plan({FaultKind::kCommitDeviceError, 1, sticky});
                     });
    // Injected: the commit maps but access setup fails (rolled back).
    run_restore_case(row_name("restore", "partial commit", sticky), Expect::kFatal,
                     [=](OffloaderFixture& f) {
                       f.faulty_backend_->set_plan({FaultKind::kPartialCommit, 1, sticky});
                     });
    for (uint64_t nth = 1; nth <= (sticky ? 1 : counts.restore_backend.copy_calls); ++nth) {
      // Injected: the Nth staging-to-device copy of the restore fails.
      run_restore_case(row_name("restore", "copy", sticky), Expect::kFallback,
                       [=](OffloaderFixture& f) {
                         f.faulty_backend_->set_plan({FaultKind::kCopyFails, nth, sticky});
                       });
    }
  }
}

// Runs last (gtest runs tests in definition order): prints the table.
TEST(OffloaderFaultMatrixTest, PrintTable) {
  std::printf(
      "| fault | expected | cases | sessions lost | wrong bytes | leaked fds | "
      "leaked memory | unexpected |\n|---|---|---|---|---|---|---|---|\n");
  int total = 0;
  for (const auto& [row, entry] : table()) {
    const auto& [expect, t] = entry;
    total += t.cases;
    std::printf("| %s | %s | %d | %d | %d | %d | %d | %d |\n", row.c_str(), expect_name(expect),
                t.cases, t.lost, t.wrong_bytes, t.leaked_fds, t.leaked_memory, t.unexpected);
  }
  std::printf("%d cases\n", total);
  if (!table().empty()) {
    EXPECT_GT(total, 20);
  }
}

}  // namespace
}  // namespace siesta
