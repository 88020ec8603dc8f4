// Offloader: the idle-offload state machine of one session (docs/IDLE_SESSION.md for users,
// docs/ARCHITECTURE.md for the state table). The engine owns one per session; every command
// that needs the session's memory holds a Lease from acquire() while it runs.
//
//   resident --idle timer--> saving --written+synced--> (release memory) --> disk
//   resident --idle timer--> saving --copied to the RAM tier--> (release memory) --> ram
//                                (with Deps::ram_tier, when the snapshot fits; else disk)
//   ram --command--> restoring --ok--> resident    (the RAM copy is given back to the tier)
//   ram --expiry--> expired (the RAM copy given back)
//   ram --the tier needs room, least recently used first--> (spill: written to disk) --> disk
//   resident --save_ahead()--> saving --written+synced--> resident, snapshot kept ("saved")
//   saved --idle timer or evict()--> saving (release memory only) --> disk
//   saved --command--> resident                 (the file no longer holds the memory: retired,
//                                                or kept as the base of a delta save)
//   saving --command arrives--> resident        (save cancelled; memory was never released)
//   saving --write fails--> resident            (memory kept; retried with capped backoff)
//   disk --command--> restoring --ok--> resident
//   restoring --missing/corrupt/truncated/foreign/expired--> resident, history discarded
//   (a snapshot in segments -- config.delta_segments -- is read oldest first, each over the last)
//   restoring --out of memory--> disk           (the command fails, retryable; snapshot kept)
//   restoring --any other commit/map failure--> disk, lost (on_fatal; every command fails)
//   disk --expiry--> expired (file deleted)  --command--> restoring --> resident, fresh
//   restoring (after expiry) --out of memory--> expired
//
// The phases behind these states and the one table of their transitions are in
// core/offload/internal/offload_machine.h.
//
// How it stays correct:
//   - One mutex guards the phase, the deadlines and the counters, and is held only to read
//     or change them: slow work (synchronize, the file's writing and removal, decommit, the
//     log callback, on_fatal) runs without it, so status() never waits for any of it. Log
//     lines are queued under the mutex and written after it is released, in order.
//   - The idle decision is taken under the mutex, so a command and the timer never both win.
//     A command that arrives while a save reads the memory cancels it and waits only until
//     the writer stops reading (it checks before every chunk); once every byte is read, the
//     command runs at once and the save ends on its own (it abandons its file before
//     fdatasync, or deletes it once made); a command that arrives while the memory is being
//     released waits for the release to end, then restores. The Offloader's destructor waits
//     for every such tail.
//   - Before a save reads a byte it waits for the session's pending device work: up to the
//     mark its last command left (OffloadTarget::wait_for_marked_work(): the session's own
//     work, not another session's queued since), or without one MemoryBackend::synchronize().
//     The memory is released only after the file is durable (synced, renamed, directory
//     synced).
//   - The idle and expiry deadlines count from the end of the last command, however it ended.
//   - status() never wakes the session.
//   - Released bytes are what the backend and HostVmm report as given back (their stats
//     before and after), not what the code meant to release.
//
// Thread rule: acquire() and the Lease it returns on the thread that runs the session's
// commands (one command at a time: the Lease reads the session when it is given back);
// status() and offload_now() from any thread; timers and saves run on the Executor.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/file_system.h"
#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/disk_budget.h"
#include "core/offload/offload_config.h"
#include "core/offload/offload_state.h"
#include "core/offload/offload_target.h"
#include "core/offload/ram_tier.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/cold_read_choice.h"
#include "core/snapshot/record_buffer_pool.h"
#include "core/snapshot/snapshot_store.h"

namespace siesta {

// Why a restore gave up the history (the reader's typed outcome), as counters and
// /v1/status name them.
enum class FallbackReason : uint8_t {
  kNotFound,
  kTruncated,
  kCorrupt,
  kForeign,
  kExpired,
  kUnsupported,  // a file of another format version
  kIoError,      // the file could not be read
};
inline constexpr size_t kFallbackReasonCount = 7;
std::string_view fallback_reason_name(FallbackReason reason);

struct OffloaderOptions {
  // The times, seals and delta saves (core/offload/offload_config.h); enabled() says whether
  // offload is on (an idle time of 0: disabled). The durations lie in 0..kMaxOffloadSeconds,
  // delta_segments in 0..kMaxDeltaSegments. Delta saves: after a whole snapshot, up to that
  // many saves write only what changed since the save before (the rows a conversation added,
  // its recurrent state), each into a segment restored over the ones before it, and a
  // snapshot stays on disk, as the base of the next delta, after the restore that read it and
  // the command that used a snapshot written ahead. A save writes the whole session again
  // when the deltas would hold more than half of it, or when the history was rewritten from
  // its start. 0: every save writes the whole session and a used snapshot is retired at once.
  // (The Offloader builds no default of its own: delta_segments is OffloadConfig's default, 8,
  // as the server's.)
  OffloadConfig config;
  std::string session = "0";  // the store's session name: siesta-<nonce>-<session>.snap
  // The snapshot's chunk size: 0 (the default), cut to the read threads
  // (chunk_bytes_for_readers in core/snapshot/snapshot_threads.h: 256 KiB to 4 MiB by the
  // file's size), else this size for every file.
  uint32_t chunk_bytes = 0;
  // Threads a save seals and a restore reads and opens its chunks on (SnapshotWriteOptions::
  // threads, SnapshotReadOptions::threads); 0: each one's default
  // (core/snapshot/snapshot_threads.h).
  uint32_t snapshot_threads = 0;
  // Write failures are retried after backoff_initial, doubling up to backoff_max.
  Clock::Duration backoff_initial = std::chrono::seconds(1);
  Clock::Duration backoff_max = std::chrono::seconds(60);
  // Called once, on the command's thread and without the Offloader's mutex, with the reason
  // when the session's memory cannot be mapped back (a commit failure other than out of
  // memory during a restore). The session is lost from then on: that acquire() and every
  // later one answer DeviceError. Core never ends the process; whoever runs it decides (the
  // server logs one line and exits 70). May be empty.
  std::function<void(const Status&)> on_fatal;
  // One line per event worth a log (a save failing for a new reason, a fallback...), called
  // without the Offloader's mutex, one line at a time, in the order the events happened.
  // Default: stderr, prefixed "siesta: ".
  std::function<void(const std::string&)> log;
  // The route each snapshot file carries (SnapshotHeader::route: what finds the conversation
  // again after a restart), asked for as each file is written, on the writing thread and
  // without the Offloader's mutex; it must not call the Offloader. Empty: files carry none.
  std::function<std::vector<uint8_t>()> route{};
};

// Durations in the shape of a Prometheus histogram: counts per upper bound (seconds), their
// sum and count. Bounds span a small session's milliseconds to a multi-GiB session's seconds.
struct DurationHistogram {
  static constexpr double kBoundsSeconds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,  0.5,   1.0,  2.5,   5.0,  10.0};
  static constexpr size_t kBuckets = std::size(kBoundsSeconds);
  uint64_t cumulative[kBuckets] = {};  // observations <= kBoundsSeconds[i]
  uint64_t count = 0;                  // all observations (the +Inf bucket)
  double sum_seconds = 0;

  void observe(double seconds) {
    for (size_t i = 0; i < kBuckets; ++i) {
      if (seconds <= kBoundsSeconds[i]) ++cumulative[i];
    }
    ++count;
    sum_seconds += seconds;
  }
  // Adds `more`'s observations (a histogram over several sessions).
  DurationHistogram& operator+=(const DurationHistogram& more) {
    for (size_t i = 0; i < kBuckets; ++i) cumulative[i] += more.cumulative[i];
    count += more.count;
    sum_seconds += more.sum_seconds;
    return *this;
  }
};

struct OffloadCounters {
  uint64_t saves = 0;         // snapshots written and memory released
  uint64_t saves_ahead = 0;   // snapshots written ahead, the memory kept (save_ahead())
  uint64_t delta_saves = 0;   // of the saves (both kinds), those that wrote a delta segment
  uint64_t restores = 0;      // restores attempted (hits + fallbacks)
  uint64_t restore_hits = 0;  // history restored from the snapshot
  uint64_t fallbacks[kFallbackReasonCount] = {};
  uint64_t expirations = 0;  // snapshots deleted at expiry (fresh session at next command)
  uint64_t write_failures = 0;
  uint64_t cancelled_saves = 0;        // a command arrived during the save
  uint64_t out_of_memory_retries = 0;  // restores refused for lack of memory (command failed)
  uint64_t delete_failures = 0;
  uint64_t ram_saves = 0;     // of the saves (both kinds), those kept in the RAM tier
  uint64_t ram_restores = 0;  // of the restores, those from the RAM tier
  // Of the restores from disk, those that found a file of theirs out of the page cache, and of
  // those, the ones that read every such file around the cache (SnapshotReadOptions::cold_read).
  uint64_t cold_restores = 0;
  uint64_t cold_restores_around_cache = 0;
  uint64_t ram_full = 0;    // saves the RAM tier had no room for (written to disk instead)
  uint64_t ram_spills = 0;  // copies moved from the RAM tier to disk to make room
  uint64_t disk_drops = 0;  // snapshots deleted for room in the directory's budget (fresh next)
  DurationHistogram save_seconds;     // snapshots made durable, from synchronize to durable
  DurationHistogram restore_seconds;  // restores, hits and fallbacks, commit to copy-in

  // Adds every count of `more` (the counters of several sessions). offloader_test checks that
  // no field is left out.
  OffloadCounters& operator+=(const OffloadCounters& more);
};

struct OffloadStatus {
  OffloadState state = OffloadState::kDisabled;
  int64_t idle_seconds = 0;
  int64_t expire_seconds = 0;
  double seconds_since_activity = 0;  // since the end of the last command
  uint64_t disk_bytes = 0;            // size of the current snapshot's files (0 when none)
  uint32_t snapshot_segments = 0;     // its files: a whole one, then deltas (0 when none)
  uint64_t ram_bytes = 0;  // what its snapshot holds of the RAM tier (0 when it is not there)
  uint64_t released_vram_bytes = 0;  // device memory given back by the last save, per backend
  uint64_t released_host_bytes = 0;  // host memory given back by the last save, per HostVmm
  uint64_t tokens = 0;               // history tokens at the end of the last command
  double operation_ms = 0;           // duration of the last save or restore
  double last_save_ms = 0;
  double last_restore_ms = 0;
  bool command_waiting = false;  // a command is waiting for a save to stop or a release to end
  // The session's memory is committed, or being released by a save: it counts against the
  // device's sessions (the phase table's memory column, not the state's name).
  bool memory_committed = false;
  bool memory_lost = false;  // the memory could not be mapped back; every command fails
  OffloadCounters counters;
  std::string last_error;  // the last save, delete or restore error; empty when none
};

// Adds `one` session's sizes and counts into `total` (disk bytes, segments, released bytes,
// tokens, counters), ORs its flags (command waiting, memory committed or lost), and keeps
// `total`'s last error or takes `one`'s when it has none; the state and times stay `total`'s.
// The one place a status over several sessions is summed.
void add_totals(OffloadStatus& total, const OffloadStatus& one);

// What acquire() did before the command could run.
struct Admission {
  bool restored = false;                   // history read back from the snapshot
  std::optional<FallbackReason> fallback;  // history discarded (snapshot unusable)
  bool fresh_after_expiry = false;         // the snapshot had expired: fresh session
  bool cancelled_save = false;             // a save was running and was stopped
  double wait_ms = 0;                      // time spent before the command could run
};

class Offloader {
  struct Impl;  // core/offload/internal/offloader_impl.h

 public:
  struct Deps {
    OffloadTarget& target;
    MemoryBackend& backend;
    HostVmm& host;
    FileSystem& fs;
    const Clock& clock;
    Executor* executor = nullptr;     // required when enabled: timers, saves, removals
    SnapshotStore* store = nullptr;   // required when enabled
    const ProcessKey* key = nullptr;  // required when enabled
    // The RAM tier (core/offload/ram_tier.h), shared with the process's other sessions; null:
    // every snapshot goes to disk. A save keeps its snapshot there when it fits, else writes
    // the file as without it.
    RamTier* ram_tier = nullptr;
    // The snapshot directory's budget (core/offload/disk_budget.h), shared likewise; null: no
    // budget (a full filesystem is the only bound). Every file is reserved there before it is
    // written; a conversation released to disk may have its snapshot deleted for room.
    DiskBudget* disk_budget = nullptr;
    // The chunk record buffers of this session's saves (core/snapshot/record_buffer_pool.h),
    // shared with the process's other sessions: the memory they keep is then bounded by the
    // saves that run at once (each holds up to its write threads + 1 chunks), not by the number
    // of sessions, whose idle ones would each keep theirs. Null: the Offloader keeps its own.
    RecordBufferPool* record_buffers = nullptr;
    // Which way snapshot files out of the page cache are read (core/snapshot/cold_read_choice.h),
    // learned from the restores of every session that shares it. Null: around the cache.
    ColdReadChoice* cold_reads = nullptr;
  };

  // The session, held by one command: from acquire() until the Lease is destroyed (or
  // release() is called), the Offloader neither saves nor releases the session's memory.
  // Giving it back records the end of the command (the idle and expiry deadlines count from
  // there) and arms the idle timer. Move-only; a moved-from Lease holds nothing.
  // REQUIRES: destroyed (or released) before the Offloader that made it.
  class [[nodiscard]] Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }

    // What acquire() did before the command could run.
    const Admission& admission() const { return admission_; }
    bool held() const { return impl_ != nullptr; }
    // Gives the session back now; nothing when not held. On the command's thread.
    void release();

   private:
    friend class Offloader;
    Lease(Impl* impl, Admission admission) : impl_(impl), admission_(admission) {}

    Impl* impl_ = nullptr;
    Admission admission_;
  };

  // Failure: InvalidArgument for durations outside 0..kMaxOffloadSeconds, expire <= idle when
  // enabled, or a missing store, key or executor when enabled (validate_offload_times() words
  // the duration rules). The session starts resident (disabled when offload_enabled() is
  // false). Everything in `deps` must outlive the offloader.
  static Result<std::unique_ptr<Offloader>> create(Deps deps, OffloaderOptions options);
  // Stops a running save (it releases nothing), waits for it and for the Offloader's other
  // executor tasks, and leaves the memory as it is.
  // REQUIRES: no Lease held and no acquire() in progress.
  ~Offloader();
  Offloader(const Offloader&) = delete;
  Offloader& operator=(const Offloader&) = delete;

  // Before a command that needs the session: makes its memory resident and valid.
  // Success: a Lease; the memory is committed; the history is either intact (resident,
  // restored) or discarded (fallback, fresh after expiry) as its admission() says; no save
  // starts until the Lease is given back. A command that arrives while a save reads the
  // memory waits for the chunks already in flight at most (the writer checks the cancel flag
  // before each; one per sealing thread, plus one); one that arrives while the memory is being
  // released waits for the release, then restores.
  // Failure (nothing to give back): OutOfMemory when the memory cannot be committed now
  // (state stays disk, snapshot kept; the caller answers "retry later"); FailedPrecondition
  // when a Lease is already held; DeviceError when the history had to be discarded and
  // discarding failed (the session is unusable), or when the memory could not be mapped back
  // (on_fatal is called, once) or was lost before.
  Result<Lease> acquire();

  // Offload now, without waiting for the idle timer (POST /v1/cache/offload): posts a save.
  // A save that fails is retried with the idle save's backoff until one succeeds or a
  // command arrives.
  // Success: a save was started, or the memory is already released (disk / expired).
  // Failure: FailedPrecondition while a command runs, when offload is disabled, or when the
  // session's memory was lost.
  Status offload_now();

  // Writes the session's snapshot now, in the background, and keeps its memory ("write early,
  // release late": with more conversations than sessions on the device, the session that
  // went idle last is written while others run, so that an eviction later only releases it).
  // Posts the save to the executor; once the file is durable the session stays resident with
  // its snapshot kept, until the idle deadline or evict() releases the memory (no second
  // write) or a command uses it (the file is retired: it no longer holds the memory). A
  // command that arrives during the write cancels it as it cancels an idle save. A write that
  // fails is not retried ahead: the idle save or an eviction writes again.
  // Success: the save is posted, or there is nothing to write ahead (saving, saved, disk,
  // expired). Failure: FailedPrecondition while a command runs, when offload is disabled, or
  // when the session's memory was lost.
  // Thread rule: any thread.
  Status save_ahead();

  // Offloads the session now, on the calling thread, and returns once its memory is released
  // or the save failed (the session table's eviction: another session needs the room). A
  // save of its own already running on the executor (the idle timer's or a save ahead) is
  // waited for first; a session whose snapshot was written ahead is only released.
  // Same save-then-release as the idle save: the memory is released only once the file is
  // durable. Commands of this session are never admitted meanwhile (they run on the calling
  // thread), so the save is never cancelled by its own session's command.
  // Success: the memory is released (disk), also when it already was (disk, expired).
  // Failure: FailedPrecondition when offload is off, a command holds the session, or its
  // memory was lost; the writer's error (NoSpace, IoError...) when the save failed (the memory
  // is kept, state resident, retried on the idle save's backoff); Cancelled while the
  // Offloader is being destroyed.
  // Thread rule: the thread that runs the session's commands, with no Lease held.
  Status evict();

  // Moves the session's snapshot from the RAM tier to disk now, on the calling thread, as the
  // tier's own spill does (segment 0 whole, then each delta; sealed, synced; the copy stays in
  // RAM until the files are durable): what a server that keeps conversations across a restart
  // does before it stops, since the tier's memory does not outlive the process.
  // Success: the snapshot is on disk (state disk), or there was none in RAM (nothing done).
  // Failure: FailedPrecondition while the copy is in use (being restored or spilled already);
  // the writer's error (the copy stays in RAM); Cancelled while the Offloader is being
  // destroyed. Thread rule: as evict().
  Status spill_to_disk();

  // Forgets a released session's history without waking it (the session table reuses the
  // session for another conversation): a snapshot on disk is deleted as at expiry, so the
  // next acquire() maps fresh memory and discards the history (admission
  // fresh_after_expiry). A save running on the executor is waited for first.
  // Success: the state is expired (nothing to read back), or the session is resident or
  // disabled: its memory is committed, and the caller discards its history under a Lease (a
  // snapshot written ahead is retired when that Lease is taken).
  // Failure: FailedPrecondition while a command holds it or its memory was lost; the store's
  // error when the snapshot could not be deleted (the state stays expiring and the deletion
  // is retried; the next acquire() is fresh all the same).
  // Thread rule: as evict().
  Status forget();

  // One file of a snapshot a process before a restart wrote under the same key, as
  // SnapshotReader::read_header authenticated it (its generation and size) and the nonce of
  // the process that wrote it.
  struct AdoptedSegment {
    uint64_t generation = 0;
    uint64_t file_bytes = 0;
    uint64_t payload_bytes = 0;
    uint64_t tokens = 0;  // history tokens it holds (status), 0 when unknown
    snapshot::ProcessNonce writer{};
  };
  // Makes a fresh session the owner of that snapshot, whose files the store has already put
  // under this session's names (SnapshotStore::adopt): the state goes to disk as after a save
  // of its own, without writing a byte (the phase table's save path), the memory is released,
  // and the next command restores the chain (segments oldest first), whose history then meets
  // the prompt as any restored history does. `expiry_unix` is the newest segment's expiry.
  // Success: state disk, listed for deletion on the directory's budget. Failure, nothing
  // changed: InvalidArgument for no segment; FailedPrecondition unless offload is on and the
  // session is fresh (resident, no history, no snapshot); NoSpace when the directory's budget
  // has no room for the files without deleting another conversation's; the release's error
  // when nothing could be released (the session stays resident).
  // Thread rule: the thread that runs the session's commands, before its first command.
  Status adopt(const std::vector<AdoptedSegment>& segments, int64_t expiry_unix);

  // A copy of the reported fields, taken under the mutex; never waits for a save, a release,
  // a restore or a command. Any thread.
  OffloadStatus status() const;

 private:
  Offloader(Deps deps, OffloaderOptions options);

  // Shared: timer tasks on the Executor hold a weak_ptr to it, so one that fires after the
  // Offloader is gone does nothing.
  std::shared_ptr<Impl> impl_;
};

}  // namespace siesta
