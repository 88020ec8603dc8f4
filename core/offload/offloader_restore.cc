// The restore half of the Offloader (offloader.cc holds the save half and the admission):
// map the released memory back at the same addresses, read and verify the snapshot, or give
// the history up for a typed reason.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/offload/internal/offloader_impl.h"
#include "core/offload/offloader.h"
#include "core/snapshot/snapshot_reader.h"

namespace siesta {

namespace {

FallbackReason fallback_reason_of(StatusCode code) {
  switch (code) {
    case StatusCode::kNotFound: return FallbackReason::kNotFound;
    case StatusCode::kTruncated: return FallbackReason::kTruncated;
    case StatusCode::kCorrupt: return FallbackReason::kCorrupt;
    case StatusCode::kForeign: return FallbackReason::kForeign;
    case StatusCode::kExpired: return FallbackReason::kExpired;
    case StatusCode::kUnsupported: return FallbackReason::kUnsupported;
    default: return FallbackReason::kIoError;
  }
}

void default_fatal(const Status& status) {
  std::fprintf(stderr,
               "siesta: fatal: the session's memory could not be mapped back at its addresses "
               "(%s); exiting with status %d\n",
               status.to_string().c_str(), kExitSessionMemoryLost);
  std::_Exit(kExitSessionMemoryLost);
}

// "commit 1.2 ms, read 240.5 ms at 4.47 GB/s, retire 0.1 ms"
std::string restore_breakdown(double commit_ms, double read_ms, uint64_t read_bytes,
                              double retire_ms) {
  char text[160];
  const double gb_s = read_ms > 0 ? static_cast<double>(read_bytes) / read_ms / 1e6 : 0;
  std::snprintf(text, sizeof text, "commit %.1f ms, read %.1f ms at %.2f GB/s, retire %.1f ms",
                commit_ms, read_ms, gb_s, retire_ms);
  return text;
}

}  // namespace

// Commits exactly what the last save released. On failure nothing this call committed stays
// committed, so the state is as before and a later command may try again.
Status Offloader::Impl::commit_released_memory() {
  const std::vector<DeviceRange> device = deps.target.device_memory();
  std::vector<size_t> committed_device;
  auto roll_back_device = [&] {
    for (size_t i : committed_device) {
      if (deps.backend.decommit(device[i]).ok()) device_released[i] = true;
    }
  };
  for (size_t i = 0; i < device.size(); ++i) {
    if (!device_released[i]) continue;
    Status committed = deps.backend.commit(device[i]);
    if (!committed.ok()) {
      roll_back_device();
      return committed;
    }
    device_released[i] = false;
    committed_device.push_back(i);
  }
  std::vector<HostRange*> committed_host;
  for (HostRange* range : deps.target.host_memory()) {
    if (range->committed()) continue;
    Status committed = range->commit();
    if (!committed.ok()) {
      for (HostRange* done : committed_host) (void)done->release();
      roll_back_device();
      return committed;
    }
    committed_host.push_back(range);
  }
  return Status::Ok();
}

Result<Admission> Offloader::Impl::restore(std::unique_lock<std::mutex>& lock,
                                           Admission admission) {
  const bool expired = state == OffloadState::kExpired;
  const OffloadState resting = state;
  state = OffloadState::kRestoring;
  lock.unlock();
  const Clock::Duration start = deps.clock.now();
  // Where the time went, for the log line: commit, read (and verify and copy in), retire.
  auto ms_since = [&](Clock::Duration from) {
    return std::chrono::duration<double, std::milli>(deps.clock.now() - from).count();
  };

  Status committed = commit_released_memory();
  const double commit_ms = ms_since(start);
  if (!committed.ok()) {
    lock.lock();
    state = resting;
    st.last_error = committed.to_string();
    if (committed.code() == StatusCode::kOutOfMemory) {
      ++st.counters.out_of_memory_retries;
      log_change_locked("restore", committed,
                        "restore postponed, not enough memory (snapshot kept): " + st.last_error);
      return committed;
    }
    lock.unlock();
    (options.on_fatal ? options.on_fatal : default_fatal)(committed);
    lock.lock();
    return DeviceError("the session's memory could not be mapped back: " + committed.to_string());
  }

  std::optional<FallbackReason> fallback;
  Status given_up;
  const Clock::Duration read_start = deps.clock.now();
  uint64_t read_bytes = 0;
  if (expired) {
    admission.fresh_after_expiry = true;
    given_up = deps.target.discard_history();
  } else {
    SnapshotReadOptions read;
    read.path = path;
    read.mode = options.encrypt ? snapshot::SnapshotMode::kSessionEncrypted
                                : snapshot::SnapshotMode::kSessionDigest;
    read.fingerprint = deps.target.fingerprint();
    read.generation = generation;
    read.record_buffers = &record_buffers;
    SnapshotReader reader(deps.fs, deps.clock, *deps.key, &deps.backend);
    const std::vector<SnapshotRegion> regions = deps.target.snapshot_regions();
    Result<SnapshotReadResult> restored = reader.read(read, regions);
    if (!restored.ok() && restored.status().code() == StatusCode::kIoError) {
      // A transient read error must not cost an intact history: read once more (every saved
      // extent is written again, so a half-done first attempt leaves nothing behind).
      restored = reader.read(read, regions);
    }
    if (restored.ok()) read_bytes = restored->file_bytes;
    Status adopted = restored.ok() ? deps.target.adopt_restored_state() : restored.status();
    if (adopted.ok()) {
      admission.restored = true;
    } else {
      fallback = fallback_reason_of(adopted.code());
      admission.fallback = fallback;
      given_up = deps.target.discard_history();
      std::lock_guard relock(mu);
      st.last_error = adopted.to_string();
      log_change_locked("fallback", adopted,
                        "snapshot not usable, history discarded (" +
                            std::string(fallback_reason_name(*fallback)) + "): " + st.last_error);
    }
  }
  const double read_ms = ms_since(read_start);
  const Clock::Duration retire_start = deps.clock.now();
  // Whatever happened, the file no longer describes the session: it changes from here on.
  if (expired) {
    delete_snapshot("expired");
  } else {
    retire_snapshot("restored");
  }

  const double retire_ms = ms_since(retire_start);

  lock.lock();
  state = OffloadState::kResident;
  if (expired) delete_pending = false;
  if (!expired) ++st.counters.restores;
  if (admission.restored) ++st.counters.restore_hits;
  if (fallback) ++st.counters.fallbacks[static_cast<size_t>(*fallback)];
  st.last_restore_ms = st.operation_ms =
      std::chrono::duration<double, std::milli>(deps.clock.now() - start).count();
  st.counters.restore_seconds.observe(st.last_restore_ms / 1000.0);
  const std::string ms = std::to_string(static_cast<int64_t>(st.last_restore_ms));
  if (admission.restored) {
    log("offload: restored " + std::to_string(deps.target.history_tokens()) + " tokens in " + ms +
        " ms (" + restore_breakdown(commit_ms, read_ms, read_bytes, retire_ms) +
        "); state resident");
  } else if (fallback) {
    log("offload: snapshot " + std::string(fallback_reason_name(*fallback)) +
        ", history discarded in " + ms + " ms; state resident");
  } else {
    log("offload: snapshot expired earlier, fresh session in " + ms + " ms; state resident");
  }
  if (!given_up.ok()) {
    st.last_error = given_up.to_string();
    return DeviceError("discarding the session's history failed: " + given_up.to_string());
  }
  return admission;
}

}  // namespace siesta
