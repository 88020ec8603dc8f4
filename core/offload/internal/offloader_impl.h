// Offloader's internals, shared by offloader.cc (admission, deadlines, commands),
// offloader_save.cc (save, release) and offloader_restore.cc (restore). Not part of the
// interface: include only from those three.
//
// Locking: `mu` guards the phase and everything the threads share (SIESTA_GUARDED_BY); it is
// held only to read or change them, never across a call into the file system, the backend,
// the target's memory, a callback or the log. Members that are not guarded are either set
// once by create() or owned by the phase: only the thread that holds a save phase (the
// executor) or a restoring phase (the command) touches them, and the phase changes under
// `mu`, which orders one owner's accesses before the next one's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "core/offload/internal/offload_machine.h"
#include "core/offload/offloader.h"
#include "core/offload/ram_snapshot.h"
#include "core/snapshot/record_buffer_pool.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

// A duration in milliseconds, as the status and the log lines give them.
inline double milliseconds(Clock::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Everything lives here, owned through a shared_ptr: timer tasks hold a weak_ptr, so a timer
// that fires after the Offloader is gone finds nothing to run.
// A RoomHolder of the RAM tier: the tier takes its copy's room (spilled to disk, or a resident
// session's base dropped) when another session's save needs it.
struct Offloader::Impl final : RoomHolder, std::enable_shared_from_this<Offloader::Impl> {
  Impl(Deps d, OffloaderOptions o)
      : deps(d),
        options(std::move(o)),
        disk_space(d.disk_budget != nullptr ? d.disk_budget->space() : DiskBudget::Space()),
        machine(options.config.enabled() ? offload::Phase::kResident : offload::Phase::kDisabled) {}

  // ---- Set once by create() ----
  const Deps deps;
  const OffloaderOptions options;
  // The snapshot's files: segment 0 (a whole save), then 1..config.delta_segments (deltas).
  std::vector<std::string> segment_paths;

  // Every save's chunk record buffers (core/snapshot/record_buffer_pool.h), kept between saves
  // so that no save pays to fault fresh pages in: the process's shared pool (Deps), else
  // own_record_buffers.
  RecordBufferPool own_record_buffers;
  RecordBufferPool& record_buffers =
      deps.record_buffers != nullptr ? *deps.record_buffers : own_record_buffers;

  // ---- Owned by the phase ----
  // Which of target.device_memory() are released (a release may stop half way; a restore
  // commits exactly these): written in kSaveReleasing and the restoring phases.
  std::vector<bool> device_released;

  // ---- Shared, under mu ----
  mutable Mutex mu;
  // The files that hold the session's snapshot, oldest first (store segment i is chain[i]):
  // a whole save, then the deltas written over it. Empty when there is no snapshot.
  struct Segment {
    // The reader expects it: every save draws a fresh one from the process key
    // (ProcessKey::next_generation()), so any other file of this process put in the segment's
    // place -- an older one of this session, another session's -- is Foreign.
    uint64_t generation = 0;
    uint64_t file_bytes = 0;
    uint64_t payload_bytes = 0;
    uint64_t tokens = 0;  // history tokens when it was written (0: unknown, an adopted file)
    // The process that wrote it, when not this one (adopted after a restart): the reader
    // expects its nonce.
    std::optional<snapshot::ProcessNonce> writer;
  };
  std::vector<Segment> chain SIESTA_GUARDED_BY(mu);
  // The chain's files on the directory's budget (report_chain() keeps it equal to disk_bytes).
  DiskBudget::Space disk_space SIESTA_GUARDED_BY(mu);
  // Retired files (renamed, their removal posted), by name: their room until each is unlinked.
  std::map<std::string, DiskBudget::Space> retired_space SIESTA_GUARDED_BY(mu);
  // The snapshot, when the last save kept it in the RAM tier (the chain is then empty): set by
  // that save; while the session is resident again, kept as the base of the next delta (as the
  // chain's files are) unless deltas are off; given back by a removal, a spill, a whole save
  // replacing it, or the tier taking a resident session's base for room. Immutable: a
  // restore or a spill reads it without the mutex while the phase keeps it there.
  std::shared_ptr<const RamCopy> ram SIESTA_GUARDED_BY(mu);
  // While the chain is kept: how many of the history's tokens are, in memory, what the chain
  // restores (lowered at each command's end by what it rewrote).
  uint64_t unchanged_tokens SIESTA_GUARDED_BY(mu) = 0;
  // Notified on every phase change and when an executor task ends.
  mutable std::condition_variable cv;
  offload::OffloadMachine machine SIESTA_GUARDED_BY(mu);
  // The destructor has begun: no timer is armed, no task starts, a running save is cancelled.
  bool closing SIESTA_GUARDED_BY(mu) = false;
  // Executor tasks inside the Offloader right now (a timer with its save or deletion, a
  // retired file's removal); the destructor waits until none is left.
  int tasks_running SIESTA_GUARDED_BY(mu) = 0;
  // When the next save and the expiry are due.
  Clock::Duration last_activity SIESTA_GUARDED_BY(mu){0};
  int64_t last_activity_unix SIESTA_GUARDED_BY(mu) = 0;
  Clock::Duration retry_at SIESTA_GUARDED_BY(mu){0};
  uint32_t failures_in_a_row SIESTA_GUARDED_BY(mu) = 0;
  // offload_now() asked for a save: it is due at once (or at retry_at after a failure),
  // whatever the idle deadline, until a save releases the memory or a command arrives.
  bool offload_requested SIESTA_GUARDED_BY(mu) = false;
  // save_ahead() asked for a save that keeps the memory: taken by the next timer while the
  // session is resident with no command; a command arriving first drops it.
  bool ahead_requested SIESTA_GUARDED_BY(mu) = false;
  std::string last_logged SIESTA_GUARDED_BY(mu);
  std::string lost_reason SIESTA_GUARDED_BY(mu);  // why the memory could not be mapped back
  OffloadStatus st SIESTA_GUARDED_BY(mu);         // the reported fields (state from the phase)
  // Log lines queued under mu, written by flush_log() without it.
  std::vector<std::string> outbox SIESTA_GUARDED_BY(mu);

  // The writer's cancel flag: cancels_save(phase) || closing, kept so by apply() and the
  // destructor. Atomic because the writer reads it without the mutex.
  std::atomic<bool> cancel_save{false};
  // Taken by flush_log() before mu (never under it), so lines reach the log in queue order.
  std::mutex log_writer;

  bool enabled() const { return options.config.enabled(); }
  // A snapshot stays after it was used, as the base of a delta save.
  bool keeps_snapshots() const { return options.config.delta_segments > 0; }
  // Sets the reported disk_bytes and segments from the chain.
  void report_chain() SIESTA_REQUIRES(mu);
  offload::Phase phase() const SIESTA_REQUIRES(mu) { return machine.phase(); }

  // The one place the phase changes: applies `event` (an illegal one is logged and the phase
  // kept; debug builds abort), mirrors the cancel flag, wakes every waiter.
  void apply(offload::Event event) SIESTA_REQUIRES(mu);

  void log(std::string line) SIESTA_REQUIRES(mu) { outbox.push_back(std::move(line)); }
  // The failure a request's refusing action answers (offload off, a command running, memory
  // lost); OK for every other action.
  Status refusal(offload::OnRequest action) const SIESTA_REQUIRES(mu);
  // evict()'s or forget()'s action in the current phase (`column` of the phase table), after
  // waiting out a save of this session that runs on the executor. Failure: Cancelled when the
  // Offloader closes meanwhile.
  Result<offload::OnRequest> decide_request(MutexLock& lock,
                                            offload::OnRequest offload::PhaseRules::*column)
      SIESTA_REQUIRES(mu);
  // Queues `line` unless the last logged event had the same `what` and status code: a failure
  // that keeps failing the same way is logged once, not once per retry (its message may still
  // differ in details such as a call count).
  void log_change(const std::string& what, const Status& status, std::string line)
      SIESTA_REQUIRES(mu);
  // Writes the queued lines, in order, with the log callback.
  void flush_log() SIESTA_EXCLUDES(mu);

  void arm_timer_at(Clock::Duration when) SIESTA_REQUIRES(mu);
  Clock::Duration save_due() const SIESTA_REQUIRES(mu);
  Clock::Duration expiry_due() const SIESTA_REQUIRES(mu);

  // An executor task's hold: false (and nothing to end) once closing.
  bool begin_task() SIESTA_EXCLUDES(mu);
  // Flushes the log, then lets the destructor go on. Touches nothing of deps afterwards.
  void end_task() SIESTA_EXCLUDES(mu);

  // ---- Executor thread ----
  void on_timer() SIESTA_EXCLUDES(mu);
  enum class TimerAction { kNone, kSave, kSaveAhead, kRelease, kDeleteExpired };
  // What a timer must do now, its phase change applied; for kSave, the file's expiry.
  // For kRelease, the size of the file written ahead.
  TimerAction decide_timer(int64_t* expiry_unix, uint64_t* file_bytes) SIESTA_REQUIRES(mu);
  // What a save writes: a whole snapshot (segment 0, replacing the chain) or a delta over it.
  struct SavePlan {
    uint32_t segment = 0;
    size_t chain_segments = 0;  // the chain's files when the save began
    std::vector<SnapshotRegion> regions;
    uint64_t payload_bytes = 0;
    uint64_t tokens = 0;
    // The delta (segment > 0) builds on the RAM copy, not on the chain's files: it goes to the
    // tier as one more segment of that copy.
    bool over_ram = false;
  };
  // The session's snapshot mode: sealed (AES-256-GCM) or with digests (config.encrypt).
  snapshot::SnapshotMode snapshot_mode() const {
    return options.config.encrypt ? snapshot::SnapshotMode::kSessionEncrypted
                                  : snapshot::SnapshotMode::kSessionDigest;
  }
  // What every file of this session is written with (a save's, a spill's): segment
  // `segment`'s name, the session's mode, fingerprint and owner, `generation`, its chunk size
  // (for `payload_bytes` of payload), this session's cancel flag, and its room claimed on the
  // directory's budget into `claimed`. The caller adds what is its own (record buffers,
  // callbacks, a second flag).
  SnapshotWriteOptions write_options(uint32_t segment, int64_t expiry_unix, uint64_t generation,
                                     DiskBudget::Space& claimed, uint64_t payload_bytes);
  // The largest chunk a file is cut in when OffloaderOptions::chunk_bytes leaves it to the
  // read threads.
  static constexpr uint32_t kLargestChunkBytes = 4u << 20;
  // REQUIRES: a save phase entered by this task (the target's memory is the save's to read).
  SavePlan plan_save() SIESTA_EXCLUDES(mu);
  // Copies the session into the RAM tier: a delta over the RAM copy when `plan` is one
  // (over_ram) and it fits, else a whole snapshot (an earlier RAM copy is given back first: the
  // memory holds every byte). Success: the new copy (not yet the session's). Failure: the tier's
  // OutOfMemory when it has no room (the caller writes the file instead; nothing was read),
  // Cancelled when a command stopped the room's making, else as copy_to_ram().
  Result<std::shared_ptr<const RamCopy>> save_to_ram(const SavePlan& plan) SIESTA_EXCLUDES(mu);
  // Copies `regions` into a fresh block of the tier, making room first when it is short:
  // `over_base`, as one more segment of the RAM copy; else as a whole copy replacing it.
  Result<std::shared_ptr<const RamCopy>> copy_into_tier(const std::vector<SnapshotRegion>& regions,
                                                        uint64_t tokens, bool over_base)
      SIESTA_EXCLUDES(mu);
  // REQUIRES: the phase is kSaveReading, entered by this task (or by evict()).
  // `keep_memory` (save_ahead()): once the file is durable the memory stays (kSaved).
  // Returns OK when the memory was released (or kept, as asked); the write's or release's
  // failure; Cancelled when the save was cancelled.
  Status run_save(int64_t expiry_unix, bool keep_memory) SIESTA_EXCLUDES(mu);
  // The file is durable (`file_bytes`): releases the memory and records the save, or, when
  // nothing could be released, retires the file and stays resident (retried on the backoff).
  // REQUIRES: the phase is kSaveReleasing, entered by this task.
  Status release_saved(uint64_t file_bytes) SIESTA_EXCLUDES(mu);
  struct ReleaseOutcome {
    Status failed;
    size_t released = 0;  // ranges given back
    uint64_t device_bytes = 0;
    uint64_t host_bytes = 0;
  };
  // The file is durable: gives the memory back. REQUIRES: the phase is kSaveReleasing.
  ReleaseOutcome release_memory() SIESTA_EXCLUDES(mu);
  // In `expiring`: deletes the snapshot, then `expired`; on failure the timer tries again.
  // Returns the deletion's outcome.
  Status delete_expired() SIESTA_EXCLUDES(mu);
  void remove_retired(const std::string& retired) SIESTA_EXCLUDES(mu);

  // ---- Command thread ----
  Result<Admission> admit() SIESTA_EXCLUDES(mu);
  void end_command() SIESTA_EXCLUDES(mu);
  // Maps the memory back and reads the snapshot (`fresh`: after expiry, nothing to read).
  // REQUIRES: the phase is kRestoring or kRestoringFresh, entered by this command.
  Result<Admission> restore(bool fresh, Admission admission) SIESTA_EXCLUDES(mu);
  Status commit_released_memory() SIESTA_EXCLUDES(mu);

  // What read_chain read: its bytes, whether a segment was out of the page cache (cold), and
  // whether every such segment was read around it.
  struct ChainRead {
    uint64_t bytes = 0;
    bool cold = false;
    bool around_cache = false;
  };
  // Reads the chain's segments, oldest first, each over the ones before (the expiry is the
  // newest one's). Returns what was read, or the first segment's failure.
  Result<ChainRead> read_chain(const std::vector<Segment>& segments,
                               const std::vector<SnapshotRegion>& regions) SIESTA_EXCLUDES(mu);

  // Removes the snapshot: its copy in the RAM tier and every file of it (remove_files()).
  Status remove_snapshot(const char* why) SIESTA_EXCLUDES(mu);
  // Removes every segment of the snapshot's file (the store's remove: slow on a large file)
  // and records a failure. The chain is forgotten either way; when the removal fails, the
  // chain's room and `unchained_bytes` (files written outside the chain, whose own room the
  // caller gives back) stay counted on the directory's budget.
  Status remove_files(const char* why, uint64_t unchained_bytes = 0) SIESTA_EXCLUDES(mu);
  // Gives the RAM copy back to the tier (outside the mutex) and takes this session off the
  // tier's list of spill candidates; nothing when there is none.
  void drop_ram() SIESTA_EXCLUDES(mu);

  // Lists the RAM copy with the tier: as the only copy (released) or a resident session's
  // base, last used at the last command.
  void enlist_ram(Holding holding) SIESTA_REQUIRES(mu);

  // ---- The disk budget's room (any thread: the one whose save needs it) ----
  // The Offloader as a holder of the directory's budget: a second identity, since the RAM
  // tier lists the Impl itself.
  struct DiskHolder final : RoomHolder {
    explicit DiskHolder(Impl* owner) : impl(owner) {}
    Result<Freed> give_room(const std::atomic<bool>* requester_cancel) override {
      (void)requester_cancel;  // a deletion is short: it runs to its end
      return impl->give_disk_room();
    }
    Impl* impl;
  };
  DiskHolder disk_holder{this};
  // Lists the session with the budget's holders (its snapshot may be deleted for room), last
  // used at its last command; nothing without a budget.
  void enlist_disk() SIESTA_REQUIRES(mu);
  void delist_disk();
  // Released to disk (`disk`, no command): the snapshot is deleted as at expiry (`expiring`,
  // then `expired`: the next request starts afresh), counted in disk_drops. Success: kDeleted.
  // NotFound: no files; FailedPrecondition: another phase; the deletion's failure (the
  // session stays `expiring`, retried by its timer).
  Result<Freed> give_disk_room() SIESTA_EXCLUDES(mu);
  // Reserves `file_bytes` on the directory's budget into `claimed` (OK without a budget).
  Status claim_disk(uint64_t file_bytes, DiskBudget::Space& claimed) SIESTA_EXCLUDES(mu);

  // ---- The RAM tier's room (any thread: the one whose save needs it) ----
  // RoomHolder: a resident session (no save of it running) gives its base up; a released one
  // writes its RAM copy to the store, segment by segment (sealed, synced, the owner and a
  // fresh generation each, as saves'), then gives the copy back: the session is on disk.
  // REQUIRES: called by the tier (make_room), never with mu held.
  Result<Freed> give_room(const std::atomic<bool>* requester_cancel) override SIESTA_EXCLUDES(mu);
  // The spill itself (give_room() and spill_to_disk()); `why` ends its log line.
  Status run_spill(const std::atomic<bool>* requester_cancel, std::string_view why)
      SIESTA_EXCLUDES(mu);
  // Writes `copy`'s segments as the chain's files (generations drawn for them into
  // `generations`). Failure: the first write's; what was written is left for the caller.
  Result<uint64_t> write_ram_copy(const RamCopy& copy, int64_t expiry_unix,
                                  const std::atomic<bool>* requester_cancel,
                                  std::vector<Segment>& written,
                                  std::vector<DiskBudget::Space>& claimed) SIESTA_EXCLUDES(mu);
  // After a restore (or a fallback) the file no longer describes the session. Unlinking a
  // large cached file frees its pages and extents, which costs ~0.2 s per GiB -- too much for
  // the command that is waiting for its first token -- so the file is renamed to a temporary
  // name of the store (cheap; the snapshot's name is free at once) and removed on the
  // executor; every segment alike. Falls back to remove_snapshot() when a rename fails.
  void retire_snapshot(const char* why) SIESTA_EXCLUDES(mu);
};

}  // namespace siesta
