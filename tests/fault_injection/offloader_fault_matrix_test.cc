// The fault matrix of the Offloader: every FileSystem and MemoryBackend call a save and a
// restore make, failing once (transient: each call in turn) and on every call from the first
// (persistent). Each row (phase, call, transient or persistent) states the outcome it
// expects:
//   kept      the save fails, the memory is kept, a later save succeeds; nothing lost
//   hit       the restore succeeds anyway (a transient read error is read again)
//   fallback  the history is discarded (typed reason), the session continues fresh
//   retry     the restore is refused as OutOfMemory, the snapshot kept; a later one succeeds
//   fatal     the memory cannot be mapped back: the fatal handler runs, the session is lost
//             (siesta-server then exits with status 70)
//
// One test runs every case in one process (CTest runs each test case in its own), so that
// it holds the whole table. Each case fails the test when its outcome is not its row's, when
// its fault never fired (a case that tests nothing), when a byte is wrong, or when a
// descriptor or released memory is left behind. A call the matrix has no row for (a save or
// restore that starts making a new kind of call) fails it too. The table of what was observed
// is printed, written to the file $SIESTA_FAULT_MATRIX_OUT names (markdown), and compared with
// the one docs/TESTING.md holds between its offloader-fault-matrix markers: a row whose outcome
// or case count changes fails here until the document is regenerated (docs/TESTING.md says
// how).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

enum class Outcome { kKept, kHit, kFallback, kRetry, kFatal, kSavedAnyway, kBroken };
const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kKept: return "memory kept, saved later";
    case Outcome::kHit: return "restored anyway";
    case Outcome::kFallback: return "history discarded";
    case Outcome::kRetry: return "503, restored later";
    case Outcome::kFatal: return "session lost";
    case Outcome::kSavedAnyway: return "saved anyway";
    case Outcome::kBroken: return "HISTORY LOST OR WRONG";
  }
  return "?";
}

// What one case saw.
struct Observed {
  Outcome outcome = Outcome::kBroken;
  bool fired = false;
  bool wrong_bytes = false;    // verify() failed on memory a command ran on
  bool leaked_fds = false;     // a file or lock of the FaultyFileSystem still open
  bool leaked_memory = false;  // committed memory while the state is disk or expired
};

struct Row {
  int cases = 0;
  std::map<Outcome, int> outcomes;
  int wrong_bytes = 0;
  int leaked_fds = 0;
  int leaked_memory = 0;
};

using Table = std::map<std::string, Row>;

constexpr uint32_t kLength = 20;

bool memory_leaked(OffloaderFixture& f) {
  const OffloadState s = f.state();
  const bool released = s == OffloadState::kDisk || s == OffloadState::kExpired;
  return released && (f.sim_->stats().committed_bytes != 0 || f.host_.stats().committed_bytes != 0);
}

bool fired(OffloaderFixture& f) {
  return f.fs_.counters().faults_fired > 0 || f.faulty_backend_->counters().faults_fired > 0;
}

void heal(OffloaderFixture& f) {
  f.fs_.set_plan(FsFaultPlan::none());
  f.faulty_backend_->set_plan(FaultPlan::none());
}

// The calls one clean save and one clean restore make, per operation. The restore's count
// includes the executor's work after the command (the retired file's unlink).
struct CallCounts {
  FsCounters save_fs, restore_fs;
  FaultCounters save_backend, restore_backend;
};
CallCounts clean_counts() {
  CallCounts c;
  OffloaderFixture f;
  EXPECT_TRUE(f.command(kLength).ok());
  heal(f);
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  c.save_fs = f.fs_.counters();
  c.save_backend = f.faulty_backend_->counters();
  heal(f);
  EXPECT_TRUE(f.command(0).ok());
  f.executor_.run_due();
  c.restore_fs = f.fs_.counters();
  c.restore_backend = f.faulty_backend_->counters();
  return c;
}

// A save under `fault`; then, healed, the session must save and restore with every byte.
Observed run_save_case(const std::function<void(OffloaderFixture&)>& fault) {
  Observed seen;
  OffloaderFixture f;
  EXPECT_TRUE(f.command(kLength).ok());
  fault(f);
  f.pass(OffloaderFixture::kIdle);
  seen.fired = fired(f);
  const bool kept = f.state() == OffloadState::kResident && f.target_->verify().empty();
  const bool saved = f.state() == OffloadState::kDisk;
  seen.leaked_memory = memory_leaked(f);
  seen.leaked_fds = f.fs_.counters().open_files != 0;
  heal(f);
  for (int i = 0; i < 8 && f.state() != OffloadState::kDisk; ++i) f.pass(120);
  seen.leaked_memory = seen.leaked_memory || memory_leaked(f);
  Result<Admission> admitted = f.command(0);
  f.executor_.run_due();
  const bool intact = admitted.ok() && admitted->restored && f.target_->length() == kLength;
  seen.wrong_bytes = admitted.ok() && !f.target_->verify().empty();
  seen.leaked_fds = seen.leaked_fds || f.fs_.counters().open_files != 0;
  seen.outcome = !intact ? Outcome::kBroken
                 : kept  ? Outcome::kKept
                 : saved ? Outcome::kSavedAnyway
                         : Outcome::kBroken;
  return seen;
}

// A restore under `fault`.
Observed run_restore_case(const std::function<void(OffloaderFixture&)>& fault) {
  Observed seen;
  OffloaderFixture f;
  EXPECT_TRUE(f.command(kLength).ok());
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  fault(f);
  {
    Result<Offloader::Lease> lease = f.offloader_->acquire();
    if (lease.ok()) {
      const Admission& admission = lease->admission();
      seen.wrong_bytes = !f.target_->verify().empty();
      if (admission.restored && f.target_->length() == kLength) {
        seen.outcome = Outcome::kHit;
      } else if (admission.fallback && f.target_->length() == 0) {
        seen.outcome = Outcome::kFallback;
      }
    } else if (lease.status().code() == StatusCode::kOutOfMemory &&
               f.state() == OffloadState::kDisk && f.snapshot_exists()) {
      heal(f);
      Result<Offloader::Lease> later = f.offloader_->acquire();
      seen.wrong_bytes = later.ok() && !f.target_->verify().empty();
      if (later.ok() && later->admission().restored && f.target_->length() == kLength) {
        seen.outcome = Outcome::kRetry;
      }
    } else if (f.fatal_.size() == 1 && f.offloader_->status().memory_lost) {
      seen.outcome = Outcome::kFatal;
    }
  }
  f.executor_.run_due();  // the retired file's unlink
  seen.fired = fired(f);
  seen.leaked_fds = f.fs_.counters().open_files != 0;
  seen.leaked_memory = memory_leaked(f);
  return seen;
}

std::string row_name(const char* phase, std::string_view op, bool sticky) {
  return std::string(phase) + " " + std::string(op) + (sticky ? " (persistent)" : " (transient)");
}

// Records a case in its row and checks it against the row's expected outcome.
void check(Table& table, const std::string& row, const std::string& injected, Outcome expected,
           const Observed& seen) {
  Row& r = table[row];
  ++r.cases;
  ++r.outcomes[seen.outcome];
  r.wrong_bytes += seen.wrong_bytes ? 1 : 0;
  r.leaked_fds += seen.leaked_fds ? 1 : 0;
  r.leaked_memory += seen.leaked_memory ? 1 : 0;
  const std::string what = row + ", injected: " + injected;
  EXPECT_TRUE(seen.fired) << what << ": the fault never fired";
  EXPECT_EQ(outcome_name(seen.outcome), std::string(outcome_name(expected))) << what;
  EXPECT_FALSE(seen.wrong_bytes) << what;
  EXPECT_FALSE(seen.leaked_fds) << what;
  EXPECT_FALSE(seen.leaked_memory) << what;
}

// The rows: what a failing call of each operation must lead to. nullopt: the matrix has no
// row for a call of that operation (a test failure when a clean save or restore makes one).
std::optional<Outcome> expected_save(FsOp op) {
  switch (op) {
    case FsOp::kCreate:
    case FsOp::kWrite:
    case FsOp::kSync:
    case FsOp::kRename:
    case FsOp::kSyncDirectory: return Outcome::kKept;
    default: return std::nullopt;
  }
}
std::optional<Outcome> expected_restore(FsOp op, bool sticky) {
  switch (op) {
    case FsOp::kOpen:
    case FsOp::kRead:
      // A transient error is read once more; every read failing costs the history.
      return sticky ? Outcome::kFallback : Outcome::kHit;
    case FsOp::kRename:  // the retire's rename: the file is removed instead
    case FsOp::kRemove:  // the retired file's unlink on the executor: counted, nothing lost
      return Outcome::kHit;
    default: return std::nullopt;
  }
}
std::vector<FsFaultKind> save_kinds(FsOp op) {
  if (op == FsOp::kWrite)
    return {FsFaultKind::kIoError, FsFaultKind::kNoSpace, FsFaultKind::kShortWrite};
  return {FsFaultKind::kIoError, FsFaultKind::kNoSpace};
}

const FsOp kAllFsOps[] = {FsOp::kCreate, FsOp::kWrite,         FsOp::kSync,
                          FsOp::kRename, FsOp::kSyncDirectory, FsOp::kRemove,
                          FsOp::kOpen,   FsOp::kRead,          FsOp::kLock};

void save_file_system_cases(Table& table, const CallCounts& counts) {
  for (FsOp op : kAllFsOps) {
    const uint64_t calls = counts.save_fs.of(op);
    if (calls == 0) continue;
    const std::optional<Outcome> expected = expected_save(op);
    if (!expected) {
      ADD_FAILURE() << "a clean save makes " << calls << " " << fs_op_name(op)
                    << " call(s), and the matrix has no row for them";
      continue;
    }
    for (bool sticky : {false, true}) {
      for (uint64_t nth = 1; nth <= (sticky ? 1 : calls); ++nth) {
        for (FsFaultKind kind : save_kinds(op)) {
          const FsFaultPlan plan(op, nth, kind, sticky);
          check(table, row_name("save", fs_op_name(op), sticky), plan.describe(), *expected,
                run_save_case([&](OffloaderFixture& f) { f.fs_.set_plan(plan); }));
        }
      }
    }
  }
}

void save_backend_cases(Table& table, const CallCounts& counts) {
  EXPECT_EQ(counts.save_backend.commit_calls, 0u) << "a save commits: add its row";
  EXPECT_EQ(counts.save_backend.decommit_calls, 1u);
  for (bool sticky : {false, true}) {
    // The Nth device-to-staging copy of the save fails.
    for (uint64_t nth = 1; nth <= (sticky ? 1 : counts.save_backend.copy_calls); ++nth) {
      const FaultPlan plan(FaultKind::kCopyFails, nth, sticky);
      check(table, row_name("save", "copy", sticky), plan.describe(), Outcome::kKept,
            run_save_case([&](OffloaderFixture& f) { f.faulty_backend_->set_plan(plan); }));
    }
    // The decommit after the durable write fails.
    const FaultPlan plan(FaultKind::kDecommitFails, 1, sticky);
    check(table, row_name("save", "decommit", sticky), plan.describe(), Outcome::kKept,
          run_save_case([&](OffloaderFixture& f) { f.faulty_backend_->set_plan(plan); }));
  }
}

void restore_file_system_cases(Table& table, const CallCounts& counts) {
  for (FsOp op : kAllFsOps) {
    const uint64_t calls = counts.restore_fs.of(op);
    if (calls == 0) continue;
    if (!expected_restore(op, false)) {
      ADD_FAILURE() << "a clean restore makes " << calls << " " << fs_op_name(op)
                    << " call(s), and the matrix has no row for them";
      continue;
    }
    for (bool sticky : {false, true}) {
      for (uint64_t nth = 1; nth <= (sticky ? 1 : calls); ++nth) {
        const FsFaultPlan plan(op, nth, FsFaultKind::kIoError, sticky);
        check(table, row_name("restore", fs_op_name(op), sticky), plan.describe(),
              *expected_restore(op, sticky),
              run_restore_case([&](OffloaderFixture& f) { f.fs_.set_plan(plan); }));
      }
    }
  }
}

void restore_backend_cases(Table& table, const CallCounts& counts) {
  EXPECT_EQ(counts.restore_backend.commit_calls, 1u) << "a restore commits more: add rows";
  EXPECT_EQ(counts.restore_backend.decommit_calls, 0u) << "a restore decommits: add its row";
  for (bool sticky : {false, true}) {
    const struct {
      const char* call;
      FaultKind kind;
      Outcome expected;
    } commits[] = {
        {"commit out of memory", FaultKind::kCommitOutOfMemory, Outcome::kRetry},
        {"commit device error", FaultKind::kCommitDeviceError, Outcome::kFatal},
        // The commit maps, then its access setup fails (rolled back).
        {"partial commit", FaultKind::kPartialCommit, Outcome::kFatal},
    };
    for (const auto& c : commits) {
      const FaultPlan plan(c.kind, 1, sticky);
      check(table, row_name("restore", c.call, sticky), plan.describe(), c.expected,
            run_restore_case([&](OffloaderFixture& f) { f.faulty_backend_->set_plan(plan); }));
    }
    // The Nth staging-to-device copy of the restore fails: the bytes cannot be had.
    for (uint64_t nth = 1; nth <= (sticky ? 1 : counts.restore_backend.copy_calls); ++nth) {
      const FaultPlan plan(FaultKind::kCopyFails, nth, sticky);
      check(table, row_name("restore", "copy", sticky), plan.describe(), Outcome::kFallback,
            run_restore_case([&](OffloaderFixture& f) { f.faulty_backend_->set_plan(plan); }));
    }
  }
}

std::string outcome_text(const Row& row) {
  std::string text;
  for (const auto& [outcome, n] : row.outcomes) {
    if (!text.empty()) text += "; ";
    text += outcome_name(outcome);
    if (row.outcomes.size() > 1) text += " (" + std::to_string(n) + ")";
  }
  return text;
}

std::vector<std::string> markdown(const Table& table) {
  std::vector<std::string> lines = {
      "| fault | cases | outcome | wrong bytes | leaked fds | leaked memory |",
      "|---|---|---|---|---|---|"};
  for (const auto& [name, row] : table) {
    lines.push_back("| " + name + " | " + std::to_string(row.cases) + " | " + outcome_text(row) +
                    " | " + std::to_string(row.wrong_bytes) + " | " +
                    std::to_string(row.leaked_fds) + " | " + std::to_string(row.leaked_memory) +
                    " |");
  }
  return lines;
}

constexpr const char* kBegin = "<!-- offloader-fault-matrix:begin -->";
constexpr const char* kEnd = "<!-- offloader-fault-matrix:end -->";

// The lines of docs/TESTING.md between the markers; nullopt when a marker is missing.
std::optional<std::vector<std::string>> documented_table() {
  std::ifstream doc(std::string(SIESTA_SOURCE_DIR) + "/docs/TESTING.md");
  if (!doc.good()) return std::nullopt;
  std::vector<std::string> lines;
  bool inside = false, ended = false;
  for (std::string line; std::getline(doc, line);) {
    if (line == kBegin) {
      inside = true;
    } else if (line == kEnd) {
      ended = inside;
      inside = false;
    } else if (inside) {
      lines.push_back(line);
    }
  }
  if (!ended) return std::nullopt;
  return lines;
}

TEST(OffloaderFaultMatrixTest, EveryRowHasTheOutcomeTheDocumentSays) {
  const CallCounts counts = clean_counts();
  Table table;
  save_file_system_cases(table, counts);
  save_backend_cases(table, counts);
  restore_file_system_cases(table, counts);
  restore_backend_cases(table, counts);

  const std::vector<std::string> lines = markdown(table);
  int total = 0;
  for (const auto& [name, row] : table) total += row.cases;
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  std::printf("%d cases\n", total);
  EXPECT_GT(total, 20);
  if (const char* out = std::getenv("SIESTA_FAULT_MATRIX_OUT"); out != nullptr && *out != '\0') {
    std::ofstream file(out, std::ios::trunc);
    for (const std::string& line : lines) file << line << "\n";
    EXPECT_TRUE(file.good()) << "cannot write " << out;
  }

  const std::optional<std::vector<std::string>> documented = documented_table();
  ASSERT_TRUE(documented.has_value())
      << "docs/TESTING.md has no table between " << kBegin << " and " << kEnd;
  if (*documented != lines) {
    const std::set<std::string> doc_lines(documented->begin(), documented->end());
    const std::set<std::string> test_lines(lines.begin(), lines.end());
    std::ostringstream diff;
    for (const std::string& line : *documented) {
      if (!test_lines.contains(line)) diff << "  documented only: " << line << "\n";
    }
    for (const std::string& line : lines) {
      if (!doc_lines.contains(line)) diff << "  observed only:   " << line << "\n";
    }
    ADD_FAILURE() << "docs/TESTING.md's fault matrix is not what the test observed:\n"
                  << diff.str()
                  << "regenerate it as docs/TESTING.md says (SIESTA_FAULT_MATRIX_OUT)";
  }
}

}  // namespace
}  // namespace siesta
