// Offloader: the idle-offload state machine of one session (DESIGN.md, "Offloader state
// machine"; docs/IDLE_SESSION.md for users). The engine owns one per session and brackets
// every command that needs the session's memory with acquire() and release().
//
//   resident --idle timer--> saving --written+synced--> (release memory) --> disk
//   saving --command arrives--> resident        (save cancelled; memory was never released)
//   saving --write fails--> resident            (memory kept; retried with capped backoff)
//   disk --command--> restoring --ok--> resident
//   restoring --missing/corrupt/truncated/foreign/expired--> resident, history discarded
//   restoring --out of memory--> disk           (the command fails, retryable; snapshot kept)
//   restoring --any other commit/map failure--> fatal (FatalHandler; exit status below)
//   disk --expiry--> expired (file deleted)  --command--> resident, fresh session
//
// How it stays correct:
//   - One mutex guards the state, the "command running" flag and the counters. The idle
//     decision is taken under it, so a command and the timer never both win: a command that
//     arrives while a save runs raises the save's cancel flag and waits only while the save
//     still reads the session's memory (the writer checks the flag before every chunk, so the
//     wait is bounded by one chunk); a save that has read everything ends on its own while
//     the command runs -- it abandons its file before fdatasync, or deletes it once made --
//     so the command never waits for the disk, and the Offloader's destructor waits for that
//     tail;
//     a save that completed before the command arrived has already released the memory
//     under the same mutex, and the command restores.
//   - Before a save reads a byte, MemoryBackend::synchronize() waits for pending device work
//     (kernels included). The memory is released only after the file is durable (synced,
//     renamed, directory synced).
//   - The idle and expiry deadlines count from the end of the last command, however it ended.
//   - status() only copies fields under the mutex: it never waits for a save, a restore or a
//     command, and never wakes the session.
//   - Released bytes are what the backend and HostVmm report as given back (their stats
//     before and after), not what the code meant to release.
//
// Thread rule: acquire() and release() on the thread that runs the session's commands (one
// command at a time); status() and offload_now() from any thread; timers and saves run on the
// Executor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/file_system.h"
#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offload_state.h"
#include "core/offload/offload_target.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"

namespace siesta {

// The exit status of a process whose session memory could not be mapped back (a commit or map
// failure other than out-of-memory during a restore): the session's addresses may be gone, so
// no later command could run safely. docs/IDLE_SESSION.md documents it.
inline constexpr int kExitSessionMemoryLost = 70;

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
  int64_t idle_seconds = 0;  // 0: disabled
  int64_t expire_seconds = 3600;
  bool encrypt = true;        // AES-256-GCM seals; false: digests (--cache-encrypt off)
  std::string session = "0";  // the store's session name: siesta-<nonce>-<session>.snap
  uint32_t chunk_bytes = 4u << 20;
  // Write failures are retried after backoff_initial, doubling up to backoff_max.
  Clock::Duration backoff_initial = std::chrono::seconds(1);
  Clock::Duration backoff_max = std::chrono::seconds(60);
  // Called once with the reason when the session's memory cannot be mapped back. The default
  // writes one line to stderr and exits with kExitSessionMemoryLost. Tests replace it.
  std::function<void(const Status&)> on_fatal;
  // One line per event worth a log (a save failing for a new reason, a fallback...). Default:
  // stderr, prefixed "siesta: ".
  std::function<void(const std::string&)> log;
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
};

struct OffloadCounters {
  uint64_t saves = 0;         // snapshots written and memory released
  uint64_t restores = 0;      // restores attempted (hits + fallbacks)
  uint64_t restore_hits = 0;  // history restored from the snapshot
  uint64_t fallbacks[kFallbackReasonCount] = {};
  uint64_t expirations = 0;  // snapshots deleted at expiry (fresh session at next command)
  uint64_t write_failures = 0;
  uint64_t cancelled_saves = 0;        // a command arrived during the save
  uint64_t out_of_memory_retries = 0;  // restores refused for lack of memory (command failed)
  uint64_t delete_failures = 0;
  DurationHistogram save_seconds;     // successful saves, from synchronize to release
  DurationHistogram restore_seconds;  // restores, hits and fallbacks, commit to copy-in
};

struct OffloadStatus {
  OffloadState state = OffloadState::kDisabled;
  int64_t idle_seconds = 0;
  int64_t expire_seconds = 0;
  double seconds_since_activity = 0;  // since the end of the last command
  uint64_t disk_bytes = 0;            // size of the current snapshot file (0 when none)
  uint64_t released_vram_bytes = 0;   // device memory given back by the last save, per backend
  uint64_t released_host_bytes = 0;   // host memory given back by the last save, per HostVmm
  uint64_t tokens = 0;                // history tokens at the end of the last command
  double operation_ms = 0;            // duration of the last save or restore
  double last_save_ms = 0;
  double last_restore_ms = 0;
  bool command_waiting = false;  // a command is waiting for a save to stop
  OffloadCounters counters;
  std::string last_error;  // the last save, delete or restore error; empty when none
};

// What acquire() did before the command may run.
struct Admission {
  bool restored = false;                   // history read back from the snapshot
  std::optional<FallbackReason> fallback;  // history discarded (snapshot unusable)
  bool fresh_after_expiry = false;         // the snapshot had expired: fresh session
  bool cancelled_save = false;             // a save was running and was stopped
  double wait_ms = 0;                      // time spent before the command could run
};

class Offloader {
 public:
  struct Deps {
    OffloadTarget& target;
    MemoryBackend& backend;
    HostVmm& host;
    FileSystem& fs;
    const Clock& clock;
    Executor& executor;
    SnapshotStore* store = nullptr;   // required when enabled
    const ProcessKey* key = nullptr;  // required when enabled
  };

  // Failure: InvalidArgument for negative durations, expire <= idle when enabled, or a
  // missing store/key when enabled. The session starts resident (disabled when idle is 0).
  // Everything in `deps` must outlive the offloader.
  static Result<std::unique_ptr<Offloader>> create(Deps deps, OffloaderOptions options);
  // Waits for a running save (its cancel flag raised) and leaves the memory as it is.
  // REQUIRES: no command between acquire() and release().
  ~Offloader();
  Offloader(const Offloader&) = delete;
  Offloader& operator=(const Offloader&) = delete;

  // Before a command that needs the session: makes its memory resident and valid.
  // Success: the memory is committed; the history is either intact (resident, restored) or
  // discarded (fallback, fresh after expiry) as the Admission says; the idle timer is stopped
  // until release().
  // Failure: OutOfMemory when the memory cannot be committed now (state stays disk, snapshot
  // kept; the caller answers "retry later"; nothing to release()); FailedPrecondition when a
  // command is already between acquire() and release(); DeviceError when the history had to
  // be discarded and discarding failed (the session is unusable). A commit or map failure
  // other than OutOfMemory calls on_fatal and, if that returns, answers DeviceError.
  Result<Admission> acquire();

  // After the command, however it ended: records the end time, arms the idle timer.
  // REQUIRES: a successful acquire() not yet released.
  void release();

  // Offload now, without waiting for the idle timer (POST /v1/cache/offload): posts a save.
  // Success: a save was started, or the memory is already released (disk / expired).
  // Failure: FailedPrecondition while a command runs or when offload is disabled.
  Status offload_now();

  OffloadStatus status() const;

 private:
  Offloader(Deps deps, OffloaderOptions options);

  struct Impl;
  // Shared: timer tasks on the Executor hold a weak_ptr to it, so one that fires after the
  // Offloader is gone does nothing.
  std::shared_ptr<Impl> impl_;
};

}  // namespace siesta
