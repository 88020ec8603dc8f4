// FaultyFileSystem: wraps any FileSystem and makes one kind of call fail on its Nth use, and
// simulates a crash by dropping whatever was not made durable, so that tests can drive the
// snapshot write protocol through every failure storage allows (docs/ARCHITECTURE.md, the seams).
//
// Everything is forwarded to the inner file system (FileSystemWrapper; target() is the inner
// one); files and locks it returns are wrapped so their calls are counted and can fail too. What
// each fault does when it fires:
//   kIoError     the call returns IoError without reaching the inner file system (a failed
//                sync syncs nothing, a failed rename renames nothing, a failed create
//                creates nothing).
//   kNoSpace     the same, with NoSpace (what ENOSPC / EDQUOT become).
//   kShortWrite  write_at() writes the first half of its bytes (rounded down), then returns
//                IoError: the "unspecified prefix" the WritableFile contract allows. On any
//                other operation it acts as kIoError.
// Calls are counted per operation (FsOp) from 1, failed ones included; the fault fires on call
// `nth_call` of its operation and, when `sticky`, on every later call of it. Every injected
// error's message contains "injected" and the plan's describe().
//
// Crash model (crash()): a file's bytes survive only up to its last successful sync(); a
// creation, rename or removal survives only once sync_directory() of the directory that holds
// the name has succeeded after it. crash() rolls the real files back to that state:
//   - every file created through the wrapper is rewritten with the bytes it held at its last
//     successful sync (empty if never synced);
//   - pending directory operations are undone newest first: a creation is removed, a rename
//     is moved back (and a file it replaced is restored), a removed file is recreated.
// The synced content of every file created through the wrapper is kept in memory (tests use
// small files). Files the wrapper did not create are taken as durable when first touched (a
// removal or a replacing rename reads them so that it can undo itself). Simplifications,
// stated so that no test relies on more: a rename is pending on the directory of its target
// only; directories made with make_directory() and lock files are durable at once; crash()
// does not release locks (destroy the lock objects to model the owner's death). Handles
// opened before crash() fail with FailedPrecondition afterwards (the process that held them
// is gone) but still close normally.
//
// Ownership: the wrapper borrows the inner file system, which must outlive it; files and
// locks it returns must not outlive the wrapper.
// Thread rule: any thread, like every FileSystem (one mutex guards the crash model; counters
// are atomic). crash() REQUIRES that no other call is in flight.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/file_system_wrapper.h"
#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "testing/fault_schedule.h"

namespace siesta {

// The operations a fault can be planned on.
enum class FsOp : uint8_t {
  kCreate,         // FileSystem::create_exclusive
  kWrite,          // WritableFile::write_at
  kSync,           // WritableFile::sync (fdatasync)
  kRename,         // FileSystem::rename
  kSyncDirectory,  // FileSystem::sync_directory
  kRemove,         // FileSystem::remove
  kOpen,           // FileSystem::open_readable
  kRead,           // ReadableFile::read_at
  kLock,           // FileSystem::lock_file
};
inline constexpr int kFsOpCount = 9;

enum class FsFaultKind : uint8_t { kIoError, kNoSpace, kShortWrite };
inline constexpr int kFsFaultKindCount = 3;

// Stable names: "create", "write", "sync", "rename", "sync_directory", "remove", "open",
// "read", "lock"; "io_error", "no_space", "short_write".
std::string_view fs_op_name(FsOp op);
std::string_view fs_fault_kind_name(FsFaultKind kind);

struct FsFaultPlan {
  FsOp op = FsOp::kCreate;
  FsFaultKind kind = FsFaultKind::kIoError;
  FaultSchedule when;  // which calls of `op` fail

  FsFaultPlan() = default;
  FsFaultPlan(FsOp operation, uint64_t nth_call, FsFaultKind fault, bool sticky)
      : op(operation), kind(fault), when{nth_call, sticky} {}

  static FsFaultPlan none() { return {}; }

  // Picks op, a kind that makes sense for the op (short writes only on kWrite, NoSpace on
  // create / write / sync / rename / sync_directory), then nth_call in [1, max_nth_call] and
  // sticky (one time in four) from `seed` with std::mt19937_64 and explicit arithmetic, so
  // the same seed gives the same plan on every machine. max_nth_call 0 is taken as 1.
  static FsFaultPlan from_seed(uint64_t seed, uint64_t max_nth_call = 8);

  bool fires_on(uint64_t call) const { return when.fires_on(call); }

  // One line, e.g. "no_space on write call 3 and every later one" or "no fault".
  std::string describe() const;

  friend bool operator==(const FsFaultPlan&, const FsFaultPlan&) = default;
};

struct FsCounters {
  std::array<uint64_t, kFsOpCount> calls{};  // indexed by FsOp
  uint64_t faults_fired = 0;
  // Wrapped writable files not yet closed, readable files alive and locks held: what a test
  // checks to find descriptor leaks (0 once everything is released).
  int64_t open_files = 0;
  int64_t held_locks = 0;

  uint64_t of(FsOp op) const { return calls[static_cast<size_t>(op)]; }
};

class FaultyFileSystem final : public FileSystemWrapper {
 public:
  // Borrows `inner`, which must outlive the wrapper.
  explicit FaultyFileSystem(FileSystem& inner, FsFaultPlan plan = FsFaultPlan::none());
  ~FaultyFileSystem() override;
  FaultyFileSystem(const FaultyFileSystem&) = delete;
  FaultyFileSystem& operator=(const FaultyFileSystem&) = delete;

  const FsFaultPlan& plan() const { return plan_; }
  // Replaces the plan and restarts every call count from zero (open-file counts are kept).
  // REQUIRES: no other call in flight.
  void set_plan(FsFaultPlan plan);
  FsCounters counters() const;

  // Calls `hook(op, call)` at the start of every counted call, on the caller's thread, before
  // the call proceeds (and before its fault, if one is planned): what lets a test act at an
  // exact step of a protocol, e.g. send a command in the middle of a save. An empty function
  // removes the hook. REQUIRES: no other call in flight.
  void set_call_hook(std::function<void(FsOp op, uint64_t call)> hook) {
    call_hook_ = std::move(hook);
  }

  // Models the process dying right after call `nth_call` of `op` (counted as for plans, so
  // set_plan restarts the count): that call runs as usual (its fault, if planned, included),
  // and every later call of any operation, file handles' included, fails with IoError
  // ("halted") without reaching the inner file system, until crash() or halt_after(op, 0).
  // A test halts, lets the code under test run to its end (its clean-up is refused like any
  // other call, as a dead process would not do it), then calls crash().
  // REQUIRES: no other call in flight.
  void halt_after(FsOp op, uint64_t nth_call);

  // Rolls the real files back to their durable state (see the header comment) and ends a
  // halt_after().
  // Failure: the inner file system's error; the files are then in an unspecified state.
  Status crash();

  Result<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                         uint32_t mode) override;
  Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove(const std::string& path) override;
  Status sync_directory(const std::string& path) override;
  // Directory creation, listing, stats and free space are forwarded (FileSystemWrapper):
  // nothing is injected there.
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path, bool wait) override;

 private:
  class Writable;
  class Readable;
  class Lock;

  // A file's durable identity, independent of the names it has had.
  struct Node {
    uint32_t mode = 0600;
    std::vector<std::byte> live;    // what the file holds now (mirrors every write)
    std::vector<std::byte> synced;  // what survives a crash
  };
  // A directory operation not yet followed by a successful sync_directory().
  struct PendingOp {
    enum class Type { kCreate, kRename, kRemove } type;
    std::string directory;             // the directory whose sync makes it durable
    std::string path;                  // created / removed name, or the rename's target
    std::string from;                  // the rename's source
    uint64_t node = 0;                 // the file created, renamed or removed
    std::optional<uint64_t> replaced;  // the node a rename replaced, if any
  };

  // Counts a call of `op`; returns its 1-based number.
  uint64_t count(FsOp op) {
    const uint64_t call = calls_[static_cast<size_t>(op)].fetch_add(1) + 1;
    if (call_hook_) call_hook_(op, call);
    return call;
  }
  bool fires(FsOp op, uint64_t call) const { return plan_.op == op && plan_.fires_on(call); }
  // Whether call `call` of `op` comes after the halt_after() point; then the refusal.
  bool halted(FsOp op, uint64_t call) const;
  Status halted_error(FsOp op, uint64_t call, const std::string& path) const;
  // The injected error (counted in faults_fired):
  // "injected <kind> on <op> call <n> of <path><detail> (fault plan: <plan>)".
  Status injected(FsOp op, uint64_t call, const std::string& path, const std::string& detail = "");
  // The generation handles opened now belong to.
  uint64_t generation() const SIESTA_EXCLUDES(mutex_);

  // The node a name refers to, adopting a file the wrapper did not create (read through the
  // inner file system as durable) when needed. nullopt when the name does not exist or
  // cannot be read.
  std::optional<uint64_t> node_for_locked(const std::string& path) SIESTA_REQUIRES(mutex_);
  // Replaces the file at `path` with `node`'s synced bytes.
  Status restore_locked(const std::string& path, const Node& node) SIESTA_REQUIRES(mutex_);

  FsFaultPlan plan_;
  std::function<void(FsOp, uint64_t)> call_hook_;
  std::array<std::atomic<uint64_t>, kFsOpCount> calls_{};
  std::atomic<uint64_t> faults_fired_{0};
  std::atomic<int64_t> open_files_{0};
  std::atomic<int64_t> held_locks_{0};
  std::atomic<FsOp> halt_op_{FsOp::kCreate};
  std::atomic<uint64_t> halt_nth_{0};  // 0: not halting

  mutable Mutex mutex_;  // guards everything below
  // Bumped by crash(): handles from before it are dead.
  uint64_t generation_ SIESTA_GUARDED_BY(mutex_) = 0;
  uint64_t next_node_ SIESTA_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, Node> nodes_ SIESTA_GUARDED_BY(mutex_);
  // Live name -> node, for known nodes.
  std::map<std::string, uint64_t> names_ SIESTA_GUARDED_BY(mutex_);
  std::vector<PendingOp> pending_ SIESTA_GUARDED_BY(mutex_);  // oldest first
};

}  // namespace siesta
