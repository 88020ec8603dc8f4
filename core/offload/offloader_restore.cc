// The restore half of the Offloader (offloader.cc holds the save half and the admission):
// map the released memory back at the same addresses, read and verify the snapshot, or give
// the history up for a typed reason.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/offload/offloader.h"
#include "core/offload/ram_snapshot.h"
#include "core/snapshot/snapshot_reader.h"

namespace siesta {

using offload::Event;

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

// Milliseconds with one decimal, truncated rather than rounded: truncated parts never add up
// to more than their truncated total, so the restore line's parts never exceed its total.
std::string ms_text(Clock::Duration d) {
  const int64_t tenths = std::chrono::duration_cast<std::chrono::microseconds>(d).count() / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

// "commit 1.2 ms, read 240.5 ms at 4.47 GB/s, retire 0.1 ms"
std::string restore_breakdown(Clock::Duration commit, Clock::Duration read, uint64_t read_bytes,
                              Clock::Duration retire) {
  const double read_s = std::chrono::duration<double>(read).count();
  char rate[32];
  (void)std::snprintf(rate, sizeof rate, "%.2f",
                      read_s > 0 ? static_cast<double>(read_bytes) / read_s / 1e9 : 0.0);
  return "commit " + ms_text(commit) + " ms, read " + ms_text(read) + " ms at " + rate +
         " GB/s, retire " + ms_text(retire) + " ms";
}

}  // namespace

Result<Offloader::Impl::ChainRead> Offloader::Impl::read_chain(
    const std::vector<Segment>& segments, const std::vector<SnapshotRegion>& regions) {
  if (segments.empty()) return NotFound("no snapshot was written");
  SnapshotReader reader(deps.fs, deps.clock, *deps.key, &deps.backend);
  ChainRead read_all;
  bool cold_through_cache = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    SnapshotReadOptions read;
    read.path = segment_paths[i];
    read.mode = snapshot_mode();
    read.fingerprint = deps.target.fingerprint();
    read.generation = segments[i].generation;
    read.owner = options.session;
    read.process_nonce = segments[i].writer;
    read.check_expiry = i + 1 == segments.size();
    read.threads = options.snapshot_threads;
    read.cold_read_choice = deps.cold_reads;
    SIESTA_ASSIGN_OR_RETURN(const SnapshotReadResult result, reader.read(read, regions));
    read_all.bytes += result.file_bytes;
    read_all.cold |= result.cold;
    cold_through_cache |= result.cold && !result.read_around_cache;
  }
  read_all.around_cache = read_all.cold && !cold_through_cache;
  return read_all;
}

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

Result<Admission> Offloader::Impl::restore(bool fresh, Admission admission) {
  // One clock read per boundary (start, committed, read, retired): the log line's total is
  // the last minus the first, its parts the differences between neighbours.
  const Clock::Duration started = deps.clock.now();
  Status committed = commit_released_memory();
  const Clock::Duration committed_at = deps.clock.now();
  if (!committed.ok()) {
    if (committed.code() == StatusCode::kOutOfMemory) {
      MutexLock lock(mu);
      apply(Event::kRestoreOutOfMemory);
      ++st.counters.out_of_memory_retries;
      st.last_error = committed.to_string();
      log_change("restore", committed,
                 "restore postponed, not enough memory (snapshot kept): " + st.last_error);
      // Back in kExpiring: the expired file's deletion is tried again.
      if (fresh) arm_timer_at(committed_at + options.backoff_initial);
      return committed;
    }
    // The addresses may be gone: no later command could run safely on this session.
    const std::string reason = committed.to_string();
    {
      MutexLock lock(mu);
      apply(Event::kMemoryLost);
      lost_reason = reason;
      st.last_error = reason;
      if (!options.on_fatal) {
        log("offload: the session's memory could not be mapped back at its addresses (" + reason +
            "); every later command fails");
      }
    }
    flush_log();
    if (options.on_fatal) options.on_fatal(committed);
    return DeviceError("the session's memory could not be mapped back: " + reason);
  }

  std::optional<FallbackReason> fallback;
  Status given_up;
  ChainRead chain_read;
  std::shared_ptr<const RamCopy> from_ram;  // the snapshot, when it is in the RAM tier
  if (fresh) {
    admission.fresh_after_expiry = true;
    given_up = deps.target.discard_history();
  } else {
    std::vector<Segment> segments;
    {
      MutexLock lock(mu);
      segments = chain;
      from_ram = ram;
    }
    const std::vector<SnapshotRegion> regions = deps.target.snapshot_regions();
    Result<ChainRead> restored = NotFound("no snapshot was written");
    if (from_ram) {
      const Status copied = copy_from_ram(*from_ram, deps.backend, regions);
      restored = copied.ok() ? Result<ChainRead>(ChainRead{from_ram->payload_bytes()}) : copied;
    } else {
      restored = read_chain(segments, regions);
    }
    if (!from_ram && !restored.ok() && restored.status().code() == StatusCode::kIoError) {
      // A transient read error must not cost an intact history: read once more (every saved
      // extent is written again, so a half-done first attempt leaves nothing behind).
      restored = read_chain(segments, regions);
    }
    if (restored.ok()) chain_read = *restored;
    Status adopted = restored.ok() ? deps.target.adopt_restored_state() : restored.status();
    if (adopted.ok()) {
      admission.restored = true;
    } else {
      fallback = fallback_reason_of(adopted.code());
      admission.fallback = fallback;
      given_up = deps.target.discard_history();
      MutexLock lock(mu);
      st.last_error = adopted.to_string();
      log_change("fallback", adopted,
                 "snapshot not usable, history discarded (" +
                     std::string(fallback_reason_name(*fallback)) + "): " + st.last_error);
    }
  }
  const Clock::Duration read_at = deps.clock.now();
  // Unless it stays as the base of the next delta, the file no longer describes the session:
  // it changes from here on.
  if (fresh) {
    (void)remove_snapshot("expired");
  } else if (admission.restored && keeps_snapshots()) {
    // The memory is the snapshot's: the target's count of unchanged tokens starts here (an
    // import or reset later in this command still lowers it to 0). A RAM copy stays as the
    // base of the next delta, the first room the tier takes back when it needs some.
    const uint64_t restored_tokens = deps.target.history_tokens();
    (void)deps.target.take_unchanged_tokens();
    MutexLock lock(mu);
    unchanged_tokens = restored_tokens;
    if (from_ram) enlist_ram(Holding::kBaseOfResidentCopy);
  } else if (from_ram) {
    // The memory holds it again: the tier gets its room back at once.
    drop_ram();
  } else {
    retire_snapshot(admission.restored ? "restored" : "refused");
  }
  const Clock::Duration retired_at = deps.clock.now();
  const uint64_t tokens = deps.target.history_tokens();

  delist_disk();  // resident: its files are no longer the budget's to delete
  MutexLock lock(mu);
  apply(Event::kRestored);
  if (!fresh) ++st.counters.restores;
  if (admission.restored) ++st.counters.restore_hits;
  if (from_ram) ++st.counters.ram_restores;
  if (chain_read.cold) ++st.counters.cold_restores;
  if (chain_read.around_cache) ++st.counters.cold_restores_around_cache;
  if (fallback) ++st.counters.fallbacks[static_cast<size_t>(*fallback)];
  st.last_restore_ms = st.operation_ms =
      std::chrono::duration<double, std::milli>(retired_at - started).count();
  st.counters.restore_seconds.observe(st.last_restore_ms / 1000.0);
  const std::string total = ms_text(retired_at - started);
  if (admission.restored) {
    log("offload: restored " + std::to_string(tokens) + " tokens" + (from_ram ? " from RAM" : "") +
        " in " + total + " ms (" +
        restore_breakdown(committed_at - started, read_at - committed_at, chain_read.bytes,
                          retired_at - read_at) +
        (chain_read.around_cache ? ", out of the page cache, read around it"
         : chain_read.cold       ? ", out of the page cache"
                                 : "") +
        "); state resident");
  } else if (fallback) {
    log("offload: snapshot " + std::string(fallback_reason_name(*fallback)) +
        ", history discarded in " + total + " ms; state resident");
  } else {
    log("offload: snapshot expired earlier, fresh session in " + total + " ms; state resident");
  }
  if (!given_up.ok()) {
    // No lease is handed out: the command ends here (the deadlines stay as they were).
    apply(Event::kCommandEnds);
    st.last_error = given_up.to_string();
    return DeviceError("discarding the session's history failed: " + given_up.to_string());
  }
  return admission;
}

}  // namespace siesta
