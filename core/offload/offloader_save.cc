// The save half of the Offloader (offloader.cc holds the admission, the deadlines and the
// commands; offloader_restore.cc the restore): what a save writes -- a whole snapshot or a
// delta over the chain --, the write, and the release of the memory once the file is durable.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/offload/internal/save_outcome.h"
#include "core/offload/offloader.h"
#include "core/offload/ram_snapshot.h"
#include "core/snapshot/snapshot_threads.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

using offload::Event;
using offload::Phase;

// ---- Save (executor thread; entered in kSaveReading) ----

SnapshotWriteOptions Offloader::Impl::write_options(uint32_t segment, int64_t expiry_unix,
                                                    uint64_t generation, DiskBudget::Space& claimed,
                                                    uint64_t payload_bytes) {
  SnapshotWriteOptions write;
  write.path = segment_paths[segment];
  write.mode = snapshot_mode();
  write.fingerprint = deps.target.fingerprint();
  write.expiry_unix = expiry_unix;
  write.chunk_bytes = options.chunk_bytes != 0
                          ? options.chunk_bytes
                          : chunk_bytes_for_readers(payload_bytes, kLargestChunkBytes);
  write.threads = options.snapshot_threads;
  write.generation = generation;
  write.owner = options.session;
  write.cancel = &cancel_save;
  write.claim_space = [this, &claimed](uint64_t file_bytes) {
    return claim_disk(file_bytes, claimed);
  };
  if (options.route) write.route = options.route();
  return write;
}

Offloader::Impl::SavePlan Offloader::Impl::plan_save() {
  SavePlan plan;
  plan.tokens = deps.target.history_tokens();
  plan.regions = deps.target.snapshot_regions();
  plan.payload_bytes = saved_payload_bytes(plan.regions);
  size_t segments = 0;
  uint64_t unchanged = 0;
  uint64_t deltas_payload = 0;
  {
    MutexLock lock(mu);
    plan.chain_segments = chain.size();
    // What the delta builds on: the RAM copy when there is one (the chain is then empty), else
    // the chain's files.
    plan.over_ram = ram != nullptr;
    if (plan.over_ram) {
      segments = ram->segments.size();
      unchanged = std::min(unchanged_tokens, ram->tokens());
      for (size_t i = 1; i < segments; ++i)
        deltas_payload += ram->segments[i].snapshot->payload_bytes;
    } else {
      segments = chain.size();
      if (segments > 0) unchanged = std::min(unchanged_tokens, chain.back().tokens);
      for (size_t i = 1; i < segments; ++i) deltas_payload += chain[i].payload_bytes;
    }
  }
  // A delta needs a base and room for one more segment, and must leave the restore reading
  // at most half as much again as a whole snapshot would hold.
  if (segments == 0 || segments > options.config.delta_segments || unchanged == 0) return plan;
  std::vector<SnapshotRegion> delta = deps.target.snapshot_regions_after(unchanged);
  const uint64_t delta_payload = saved_payload_bytes(delta);
  if (2 * (deltas_payload + delta_payload) > plan.payload_bytes) return plan;
  plan.segment = static_cast<uint32_t>(segments);
  plan.regions = std::move(delta);
  plan.payload_bytes = delta_payload;
  return plan;
}

Result<std::shared_ptr<const RamCopy>> Offloader::Impl::save_to_ram(const SavePlan& plan) {
  if (plan.over_ram && plan.segment > 0) {
    Result<std::shared_ptr<const RamCopy>> delta = copy_into_tier(plan.regions, plan.tokens, true);
    if (delta.ok() || delta.status().code() != StatusCode::kOutOfMemory) return delta;
    // No room for the delta beside its base: a whole copy in the base's place may still fit.
  }
  // A delta plan (over the RAM copy, or over the chain's files) lists only what changed: the
  // copy in RAM is whole.
  return copy_into_tier(plan.segment == 0 ? plan.regions : deps.target.snapshot_regions(),
                        plan.tokens, false);
}

Result<std::shared_ptr<const RamCopy>> Offloader::Impl::copy_into_tier(
    const std::vector<SnapshotRegion>& regions, uint64_t tokens, bool over_base) {
  // A whole copy replaces the RAM copy: that one's room comes back first (the memory holds
  // every byte).
  if (!over_base) drop_ram();
  // No room: resident sessions' bases are given up and the least recently used copies go to
  // disk first (on this thread; a command for this session arriving meanwhile stops the spill
  // at its next chunk). When they cannot make room, copy_to_ram() is refused.
  const uint64_t bytes = ram_block_bytes(regions);
  if (!deps.ram_tier->fits(bytes)) {
    (void)deps.ram_tier->make_room(bytes, &cancel_save);
    // A command for this session stopped the spill: this save ends here too.
    if (cancel_save.load(std::memory_order_acquire)) return Cancelled("the save was cancelled");
  }
  SIESTA_ASSIGN_OR_RETURN(RamSnapshot copied,
                          copy_to_ram(*deps.ram_tier, deps.backend, regions, &cancel_save, [this] {
                            MutexLock lock(mu);
                            apply(Event::kMemoryRead);
                          }));
  auto made = std::make_shared<RamCopy>();
  if (over_base) {
    // The save's phase keeps the base this plan read (nothing gives a base up during a save).
    MutexLock lock(mu);
    if (ram != nullptr) made->segments = ram->segments;
  }
  made->segments.push_back({std::make_shared<const RamSnapshot>(std::move(copied)), tokens});
  return std::shared_ptr<const RamCopy>(std::move(made));
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
  const uint64_t generation = deps.key->next_generation();
  // The RAM tier first, when there is one: the snapshot goes there when it fits (in_ram), and
  // to disk when the tier has no room (ram_full); any other failure of the copy is the save's.
  bool to_ram = false;
  bool ram_full = false;
  uint32_t ram_segment = 0;  // which segment of the RAM copy the save made
  std::shared_ptr<const RamCopy> in_ram;
  if (synced.ok()) {
    plan = plan_save();
    if (deps.ram_tier != nullptr) {
      Result<std::shared_ptr<const RamCopy>> copied = save_to_ram(plan);
      ram_full = !copied.ok() && copied.status().code() == StatusCode::kOutOfMemory;
      to_ram = !ram_full;
      if (copied.ok()) {
        in_ram = std::move(copied).value();
        written = SnapshotWriteResult{};  // no file
        ram_segment = static_cast<uint32_t>(in_ram->segments.size() - 1);
        plan.segment = 0;  // for the chain's files: the RAM copy supersedes them
        plan.payload_bytes = in_ram->segments.back().snapshot->payload_bytes;
      } else if (to_ram) {
        written = copied.status();
      }
    }
    if (ram_full && plan.over_ram && plan.segment > 0) {
      // No room for the delta: the file is whole (no chain of files is under it), and once it
      // is durable the RAM copy goes.
      plan.segment = 0;
      plan.regions = deps.target.snapshot_regions();
      plan.payload_bytes = saved_payload_bytes(plan.regions);
    }
  }
  DiskBudget::Space claimed;  // the file's room on the directory's budget, until the chain has it
  bool named = false;         // the file has its final name (a failure after leaves it there)
  if (synced.ok() && !to_ram) {
    SnapshotWriteOptions write =
        write_options(plan.segment, expiry_unix, generation, claimed, plan.payload_bytes);
    write.on_named = [&named] { named = true; };
    write.record_buffers = &record_buffers;
    write.on_memory_read = [this] {
      MutexLock lock(mu);
      apply(Event::kMemoryRead);
    };
    SnapshotWriter writer(deps.fs, deps.clock, *deps.key, &deps.backend);
    written = writer.write(write, plan.regions);
  }
  const Clock::Duration written_at = deps.clock.now();
  // A whole snapshot, durable, supersedes the chain's deltas: they go now, while the phase
  // still lets no other save begin (a command arriving meanwhile cancels this save, whose
  // outcome then removes the whole chain anyway). Small files: cheap to unlink here.
  Status superseded = Status::Ok();
  if (!to_ram && written.ok() && plan.segment == 0 && plan.chain_segments > 1) {
    superseded = deps.store->remove_deltas(options.session);
  }

  // ---- the outcome, decided and applied under the mutex ----
  using offload::SaveOutcome;
  MutexLock lock(mu);
  // The writer has returned: it reads nothing more (also when it failed before its first
  // chunk, without saying so).
  if (phase() == Phase::kSaveReading || phase() == Phase::kSaveCancelling) {
    apply(Event::kMemoryRead);
  }
  offload::SaveFacts facts;
  facts.phase = phase();
  facts.closing = closing;
  facts.written = written.status().code();
  facts.named = named;
  facts.segment = plan.segment;
  facts.chain_segments = chain.size();
  facts.keep_memory = keep_memory;
  facts.to_ram = to_ram;
  facts.failures_in_a_row = failures_in_a_row;
  facts.backoff_initial = options.backoff_initial;
  facts.backoff_max = options.backoff_max;
  const SaveOutcome outcome = offload::decide_save_outcome(facts);
  if (ram_full) ++st.counters.ram_full;
  if (!superseded.ok()) {
    ++st.counters.delete_failures;
    log_change("delete", superseded,
               "could not delete superseded deltas: " + superseded.to_string());
  }
  std::string what;                               // the file, for the log line
  std::shared_ptr<const RamCopy> superseded_ram;  // given back below, unlocked
  switch (outcome.end) {
    case SaveOutcome::End::kCancelled: ++st.counters.cancelled_saves; break;
    case SaveOutcome::End::kFailed:
      ++st.counters.write_failures;
      st.last_error = written.status().to_string();
      ++failures_in_a_row;
      retry_at = written_at + outcome.backoff;
      log_change("write", written.status(),
                 "snapshot write failed (memory kept, retrying): " + st.last_error);
      break;
    case SaveOutcome::End::kWrittenAhead:
    case SaveOutcome::End::kDurable:
      failures_in_a_row = 0;
      if (outcome.new_chain) chain.clear();
      if (in_ram) {
        // The snapshot is the RAM copy; the files of an earlier chain go below.
        ram = in_ram;
        unchanged_tokens = plan.tokens;
        ++st.counters.ram_saves;
        if (ram_segment > 0) ++st.counters.delta_saves;
        what = std::to_string(plan.payload_bytes) + " bytes to RAM" +
               (ram_segment > 0 ? " (delta " + std::to_string(ram_segment) + ")" : "");
      } else {
        // The file supersedes a RAM copy the plan found too large to add to.
        superseded_ram = std::move(ram);
        chain.push_back({generation, written->file_bytes, plan.payload_bytes, plan.tokens, {}});
        unchanged_tokens = plan.tokens;
        if (plan.segment > 0) ++st.counters.delta_saves;
        what = std::to_string(written->file_bytes) + " bytes" +
               (plan.segment > 0 ? " (delta " + std::to_string(plan.segment) + ")" : "");
      }
      report_chain();
      st.last_save_ms = st.operation_ms = milliseconds(written_at - start);
      st.counters.save_seconds.observe(st.last_save_ms / 1000.0);
      break;
  }
  // A cancelled save ends now (a command let in during its last steps may have ended already;
  // the timer its lease armed runs after this task: the executor runs one task at a time); a
  // failed one is retried; a durable one is released (a command that arrives meanwhile waits
  // for the release to end, then restores).
  if (outcome.end != SaveOutcome::End::kCancelled) apply(outcome.event);
  if (outcome.end == SaveOutcome::End::kFailed) arm_timer_at(retry_at);
  if (outcome.end == SaveOutcome::End::kWrittenAhead) {
    // Written ahead: the session stays usable at once, and releasing it later (the idle
    // deadline, an eviction) costs only the release.
    ++st.counters.saves_ahead;
    log("offload: wrote " + what + " ahead in " +
        std::to_string(static_cast<int64_t>(st.last_save_ms)) + " ms; memory kept; state resident");
    arm_timer_at(save_due());
  }
  const uint64_t disk_bytes = st.disk_bytes;
  lock.unlock();
  if (superseded_ram != nullptr) {
    superseded_ram.reset();
    deps.ram_tier->delist(this);
  }

  // ---- the files, without the mutex ----
  switch (outcome.remove) {
    case SaveOutcome::Remove::kNothing: break;
    case SaveOutcome::Remove::kThisDelta:
      if (!deps.store->remove_segment(options.session, plan.segment).ok()) {
        // The file may still be there: its room stays counted with the session's files.
        MutexLock relock(mu);
        disk_space.set(disk_space.bytes() + claimed.bytes());
      }
      break;
    case SaveOutcome::Remove::kChain:
      (void)remove_files(outcome.end == SaveOutcome::End::kCancelled ? "cancelled" : "superseded",
                         claimed.bytes());
      break;
  }
  switch (outcome.end) {
    case SaveOutcome::End::kCancelled: {
      // Ended only once its file is gone: from then on the Offloader (its store with it) may be
      // destroyed.
      MutexLock relock(mu);
      apply(Event::kSaveCancelled);
      return Cancelled("the save was cancelled");
    }
    case SaveOutcome::End::kFailed: return written.status();
    case SaveOutcome::End::kWrittenAhead: return Status::Ok();
    case SaveOutcome::End::kDurable: break;
  }
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
  const bool in_ram = ram != nullptr;
  apply(in_ram ? Event::kReleasedToRam : Event::kReleased);
  // A copy in RAM may be spilled to disk from now on, the least recently used first; a file
  // may be deleted for room in the directory's budget.
  if (in_ram) {
    enlist_ram(Holding::kOnlyCopy);
  } else {
    enlist_disk();
  }
  failures_in_a_row = 0;
  offload_requested = false;
  ++st.counters.saves;
  st.disk_bytes = file_bytes;
  log("offload: saved " +
      (in_ram ? std::to_string(ram->payload_bytes()) + " bytes to RAM"
              : std::to_string(st.disk_bytes) + " bytes") +
      " in " + std::to_string(static_cast<int64_t>(st.last_save_ms)) + " ms; released " +
      std::to_string(st.released_vram_bytes) + " device bytes, " +
      std::to_string(st.released_host_bytes) + " host bytes; state " + (in_ram ? "ram" : "disk"));
  arm_timer_at(expiry_due());
  return Status::Ok();
}

// Stops at the first failure. Released bytes are this session's own: the sizes of the ranges
// whose decommit (or host release) the backend (or HostVmm) reported done. The backend's
// committed total cannot say it: with several sessions another may commit or release between
// the two reads (that total is what a test with one session checks these sums against).
Offloader::Impl::ReleaseOutcome Offloader::Impl::release_memory() {
  ReleaseOutcome out;
  const std::vector<DeviceRange> device = deps.target.device_memory();
  for (size_t i = 0; i < device.size() && out.failed.ok(); ++i) {
    if (device_released[i]) continue;
    out.failed = deps.backend.decommit(device[i]);
    if (out.failed.ok()) {
      device_released[i] = true;
      ++out.released;
      out.device_bytes += device[i].size;
    }
  }
  if (out.failed.ok()) {
    for (HostRange* range : deps.target.host_memory()) {
      if (!range->committed()) continue;
      out.failed = range->release();
      if (!out.failed.ok()) break;
      ++out.released;
      out.host_bytes += range->size();
    }
  }
  return out;
}

}  // namespace siesta
