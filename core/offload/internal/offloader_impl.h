// Offloader's internals, shared by offloader.cc (admission, deadlines, save) and
// offloader_restore.cc (restore). Not part of the interface: include only from those two.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/offload/offloader.h"
#include "core/snapshot/record_buffer_pool.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

// Everything lives here, owned through a shared_ptr: timer tasks hold a weak_ptr, so a timer
// that fires after the Offloader is gone finds nothing to run.
struct Offloader::Impl : std::enable_shared_from_this<Offloader::Impl> {
  Impl(Deps d, OffloaderOptions o) : deps(d), options(std::move(o)) {}

  Deps deps;
  OffloaderOptions options;
  std::string path;  // the snapshot file
  // The generation of the last save started (the executor's thread writes it before the save
  // can reach the disk state, under which alone a restore reads it): a restore accepts only
  // the file with this one, so an older snapshot put back in place is refused (Foreign).
  uint64_t generation = 0;
  // Every save's and restore's chunk record buffers (core/snapshot/record_buffer_pool.h): kept
  // between them, so that no restore pays to fault fresh pages in.
  RecordBufferPool record_buffers;

  mutable std::mutex mu;
  std::condition_variable cv;  // save_running or save_reading turned false
  OffloadState state = OffloadState::kDisabled;
  bool command_running = false;
  bool save_running = false;
  // The running save still reads the session's memory (until its last chunk is written); a
  // command waits only for this, not for the file to become durable.
  bool save_reading = false;
  // Retired snapshots being removed on the executor right now; the destructor waits for them
  // (a removal not yet started when shutting_down is set never starts; the store's shutdown
  // clean-up takes its file).
  int removals_running = 0;
  bool force_save = false;  // offload_now() asked for a save regardless of the deadline
  bool shutting_down = false;
  bool delete_pending = false;  // an expired snapshot whose deletion failed
  std::atomic<bool> cancel_save{false};
  // Which of target.device_memory() / host_memory() are released (a release may stop half
  // way; a restore commits exactly these).
  std::vector<bool> device_released;
  Clock::Duration last_activity{0};
  int64_t last_activity_unix = 0;
  Clock::Duration retry_at{0};
  uint32_t failures_in_a_row = 0;
  std::string last_logged;
  OffloadStatus st;  // the reported fields (state is copied from `state`)

  bool enabled() const { return options.idle_seconds != 0; }

  void log(const std::string& line) {
    if (options.log) {
      options.log(line);
    } else {
      std::fprintf(stderr, "siesta: %s\n", line.c_str());
    }
  }
  // Logs `line` unless the last logged event had the same `what` and status code: a failure
  // that keeps failing the same way is logged once, not once per retry (its message may still
  // differ in details such as a call count).
  void log_change_locked(const std::string& what, const Status& status, const std::string& line) {
    const std::string key = what + ":" + std::string(status_code_name(status.code()));
    if (key == last_logged) return;
    last_logged = key;
    log(line);
  }

  void arm_timer_at(Clock::Duration when) {
    std::weak_ptr<Impl> weak = weak_from_this();
    deps.executor.post_at(when, [weak] {
      if (std::shared_ptr<Impl> self = weak.lock()) self->on_timer();
    });
  }

  void on_timer();
  void run_save();
  void release_memory_locked(const SnapshotWriteResult& written);
  Result<Admission> restore(std::unique_lock<std::mutex>& lock, Admission admission);
  Status commit_released_memory();
  void expire_locked();
  void delete_snapshot(const char* why);
  // After a restore (or a fallback) the file no longer describes the session. Unlinking a
  // large cached file frees its pages and extents, which costs ~0.2 s per GiB -- too much for
  // the command that is waiting for its first token -- so the file is renamed to a temporary
  // name of the store (cheap; the snapshot's name is free at once) and removed on the
  // executor. Falls back to delete_snapshot() when the rename fails.
  void retire_snapshot(const char* why);
  void remove_retired(const std::string& retired);
};

}  // namespace siesta
