// The save half of the Offloader (offloader.cc holds the admission, the deadlines and the
// commands; offloader_restore.cc the restore): what a save writes -- a whole snapshot or a
// delta over the chain --, the write, and the release of the memory once the file is durable.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/offload/offloader.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

using offload::Event;
using offload::Phase;

// ---- Save (executor thread; entered in kSaveReading) ----

namespace {

uint64_t payload_of(const std::vector<SnapshotRegion>& regions) {
  uint64_t total = 0;
  for (const SnapshotRegion& region : regions) {
    for (const snapshot::Extent& extent : region.layout.extents) total += extent.length;
  }
  return total;
}

}  // namespace

Offloader::Impl::SavePlan Offloader::Impl::plan_save() {
  SavePlan plan;
  plan.tokens = deps.target.history_tokens();
  plan.regions = deps.target.snapshot_regions();
  plan.payload_bytes = payload_of(plan.regions);
  size_t segments = 0;
  uint64_t unchanged = 0;
  uint64_t deltas_payload = 0;
  {
    MutexLock lock(mu);
    segments = chain.size();
    if (segments > 0) unchanged = std::min(unchanged_tokens, chain.back().tokens);
    for (size_t i = 1; i < segments; ++i) deltas_payload += chain[i].payload_bytes;
  }
  // A delta needs a base and room for one more segment, and must leave the restore reading
  // at most half as much again as a whole snapshot would hold.
  if (segments == 0 || segments > options.max_delta_segments || unchanged == 0) return plan;
  std::vector<SnapshotRegion> delta = deps.target.snapshot_regions_after(unchanged);
  const uint64_t delta_payload = payload_of(delta);
  if (2 * (deltas_payload + delta_payload) > plan.payload_bytes) return plan;
  plan.segment = static_cast<uint32_t>(segments);
  plan.regions = std::move(delta);
  plan.payload_bytes = delta_payload;
  return plan;
}

Status Offloader::Impl::run_save(int64_t expiry_unix, bool keep_memory) {
  const Clock::Duration start = deps.clock.now();
  // Kernels still queued would change the bytes under the writer: wait for the session's own
  // (up to the mark its last command left), or, without a mark, for the whole device.
  Result<bool> waited = deps.target.wait_for_marked_work();
  const Status synced = !waited.ok() ? waited.status()
                        : *waited    ? Status::Ok()
                                     : deps.backend.synchronize();
  Result<SnapshotWriteResult> written = synced;
  SavePlan plan;
  if (synced.ok()) {
    plan = plan_save();
    SnapshotWriteOptions write;
    write.path = segment_paths[plan.segment];
    write.mode = options.encrypt ? snapshot::SnapshotMode::kSessionEncrypted
                                 : snapshot::SnapshotMode::kSessionDigest;
    write.fingerprint = deps.target.fingerprint();
    write.expiry_unix = expiry_unix;
    write.chunk_bytes = options.chunk_bytes;
    write.generation = ++generation;
    write.cancel = &cancel_save;
    write.record_buffers = &record_buffers;
    write.on_memory_read = [this] {
      MutexLock lock(mu);
      apply(Event::kMemoryRead);
    };
    SnapshotWriter writer(deps.fs, deps.clock, *deps.key, &deps.backend);
    written = writer.write(write, plan.regions);
  }
  const Clock::Duration written_at = deps.clock.now();

  MutexLock lock(mu);
  // The writer has returned: it reads nothing more (also when it failed before its first
  // chunk, without saying so).
  if (phase() == Phase::kSaveReading || phase() == Phase::kSaveCancelling) {
    apply(Event::kMemoryRead);
  }
  const bool cancelled = phase() != Phase::kSaveFinishing || closing ||
                         written.status().code() == StatusCode::kCancelled;
  if (cancelled) {
    ++st.counters.cancelled_saves;
    if (written.ok()) {
      // Complete but stale: the command changes the session. Removed before the save ends:
      // from then on the Offloader (its store with it) may be destroyed. A delta goes alone
      // (the chain below it still holds what it held); a whole save replaced the chain's base.
      lock.unlock();
      if (plan.segment > 0) {
        (void)deps.store->remove_segment(options.session, plan.segment);
      } else {
        (void)remove_snapshot("cancelled");
      }
      lock.lock();
    }
    // A command let in during the save's last steps may have ended already; the timer its
    // lease armed runs after this task (the executor runs one task at a time).
    apply(Event::kSaveCancelled);
    return Cancelled("the save was cancelled");
  }
  if (!written.ok()) {
    ++st.counters.write_failures;
    st.last_error = written.status().to_string();
    const Clock::Duration backoff = std::min(
        options.backoff_max, options.backoff_initial * (1u << std::min(failures_in_a_row, 20u)));
    ++failures_in_a_row;
    retry_at = written_at + backoff;
    log_change("write", written.status(),
               "snapshot write failed (memory kept, retrying): " + st.last_error);
    apply(Event::kSaveFailed);
    arm_timer_at(retry_at);
    if (synced.ok() && plan.segment == 0 && !chain.empty()) {
      // The writer leaves the final name alone on failure, except when only the directory's
      // sync failed after the rename: then the base may be the new one. No chain is trusted
      // over a base in doubt; the memory, kept, holds everything. (A failed wait for the
      // device wrote nothing: the chain stands.)
      lock.unlock();
      (void)remove_snapshot("superseded");
      lock.lock();
    }
    return written.status();
  }

  failures_in_a_row = 0;
  const size_t superseded = plan.segment == 0 ? chain.size() : 0;
  if (plan.segment == 0) chain.clear();
  chain.push_back({generation, written->file_bytes, plan.payload_bytes, plan.tokens});
  unchanged_tokens = plan.tokens;
  report_chain();
  if (plan.segment > 0) ++st.counters.delta_saves;
  st.last_save_ms = st.operation_ms = milliseconds(written_at - start);
  st.counters.save_seconds.observe(st.last_save_ms / 1000.0);
  const std::string what =
      std::to_string(written->file_bytes) + " bytes" +
      (plan.segment > 0 ? " (delta " + std::to_string(plan.segment) + ")" : "");
  if (superseded > 1) {
    // The deltas of the chain this whole save replaced (small: cheap to unlink here).
    lock.unlock();
    Status removed = deps.store->remove_deltas(options.session);
    lock.lock();
    if (!removed.ok()) {
      ++st.counters.delete_failures;
      log_change("delete", removed, "could not delete superseded deltas: " + removed.to_string());
    }
  }
  if (keep_memory) {
    // Written ahead: the session stays usable at once, and releasing it later (the idle
    // deadline, an eviction) costs only the release.
    apply(Event::kFileKept);
    ++st.counters.saves_ahead;
    log("offload: wrote " + what + " ahead in " +
        std::to_string(static_cast<int64_t>(st.last_save_ms)) + " ms; memory kept; state resident");
    arm_timer_at(save_due());
    return Status::Ok();
  }
  // Durable: give the memory back, without the mutex. A command that arrives now waits for
  // the release to end (the phase says so) and then restores.
  apply(Event::kFileDurable);
  const uint64_t disk_bytes = st.disk_bytes;
  lock.unlock();
  return release_saved(disk_bytes);
}

Status Offloader::Impl::release_saved(uint64_t file_bytes) {
  const ReleaseOutcome released = release_memory();
  MutexLock lock(mu);
  st.released_vram_bytes = released.device_bytes;
  st.released_host_bytes = released.host_bytes;
  if (!released.failed.ok()) {
    ++st.counters.write_failures;
    st.last_error = released.failed.to_string();
    log_change("release", released.failed,
               "releasing the session's memory failed: " + st.last_error);
  }
  if (!released.failed.ok() && released.released == 0) {
    // Nothing was released: the session simply stays resident and tries again later (the
    // file stays until the next save replaces it; no restore reads it, none being due).
    apply(Event::kReleaseFailed);
    retry_at = deps.clock.now() + options.backoff_initial;
    arm_timer_at(retry_at);
    return released.failed;
  }
  // What was released stays released (the snapshot holds it) and a restore commits exactly
  // that.
  apply(Event::kReleased);
  failures_in_a_row = 0;
  offload_requested = false;
  ++st.counters.saves;
  st.disk_bytes = file_bytes;
  log("offload: saved " + std::to_string(st.disk_bytes) + " bytes in " +
      std::to_string(static_cast<int64_t>(st.last_save_ms)) + " ms; released " +
      std::to_string(st.released_vram_bytes) + " device bytes, " +
      std::to_string(st.released_host_bytes) + " host bytes; state disk");
  arm_timer_at(expiry_due());
  return Status::Ok();
}

// Stops at the first failure. Released bytes are the backend's and HostVmm's committed bytes
// before minus after.
Offloader::Impl::ReleaseOutcome Offloader::Impl::release_memory() {
  ReleaseOutcome out;
  const MemoryStats device_before = deps.backend.stats();
  const HostVmmStats host_before = deps.host.stats();
  const std::vector<DeviceRange> device = deps.target.device_memory();
  for (size_t i = 0; i < device.size() && out.failed.ok(); ++i) {
    if (device_released[i]) continue;
    out.failed = deps.backend.decommit(device[i]);
    if (out.failed.ok()) {
      device_released[i] = true;
      ++out.released;
    }
  }
  if (out.failed.ok()) {
    for (HostRange* range : deps.target.host_memory()) {
      if (!range->committed()) continue;
      out.failed = range->release();
      if (!out.failed.ok()) break;
      ++out.released;
    }
  }
  out.device_bytes = device_before.committed_bytes - deps.backend.stats().committed_bytes;
  out.host_bytes = host_before.committed_bytes - deps.host.stats().committed_bytes;
  return out;
}

}  // namespace siesta
