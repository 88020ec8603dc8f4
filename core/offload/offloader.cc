#include "core/offload/offloader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

using offload::Event;
using offload::Phase;

std::string_view fallback_reason_name(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kNotFound: return "not_found";
    case FallbackReason::kTruncated: return "truncated";
    case FallbackReason::kCorrupt: return "corrupt";
    case FallbackReason::kForeign: return "foreign";
    case FallbackReason::kExpired: return "expired";
    case FallbackReason::kUnsupported: return "unsupported";
    case FallbackReason::kIoError: return "io_error";
  }
  return "unknown";
}

namespace {

double milliseconds(Clock::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

Clock::Duration seconds(int64_t s) { return std::chrono::seconds(s); }

}  // namespace

// ---- Creation and destruction ----

Result<std::unique_ptr<Offloader>> Offloader::create(Deps deps, OffloaderOptions options) {
  SIESTA_RETURN_IF_ERROR(validate_offload_times(options.idle_seconds, options.expire_seconds));
  if (options.max_delta_segments > kMaxDeltaSegments) {
    return InvalidArgument("at most " + std::to_string(kMaxDeltaSegments) +
                           " delta segments, got " + std::to_string(options.max_delta_segments));
  }
  const bool enabled = offload_enabled(options.idle_seconds);
  if (enabled && (deps.store == nullptr || deps.key == nullptr || deps.executor == nullptr)) {
    return InvalidArgument("offload needs a snapshot store, a process key and an executor");
  }
  std::unique_ptr<Offloader> offloader(new Offloader(deps, std::move(options)));
  Impl& impl = *offloader->impl_;
  if (enabled) {
    for (uint32_t segment = 0; segment <= impl.options.max_delta_segments; ++segment) {
      SIESTA_ASSIGN_OR_RETURN(std::string path,
                              deps.store->snapshot_path(impl.options.session, segment));
      impl.segment_paths.push_back(std::move(path));
    }
  }
  impl.device_released.assign(deps.target.device_memory().size(), false);
  MutexLock lock(impl.mu);
  impl.last_activity = deps.clock.now();
  impl.last_activity_unix = deps.clock.unix_seconds();
  impl.st.idle_seconds = impl.options.idle_seconds;
  impl.st.expire_seconds = impl.options.expire_seconds;
  impl.st.tokens = deps.target.history_tokens();
  if (enabled) impl.arm_timer_at(impl.save_due());
  return offloader;
}

Offloader::Offloader(Deps deps, OffloaderOptions options)
    : impl_(std::make_shared<Impl>(deps, std::move(options))) {}

Offloader::~Offloader() {
  Impl& impl = *impl_;
  {
    MutexLock lock(impl.mu);
    if (offload::holds_command(impl.phase())) {
      // A Lease outlives its Offloader: a bug of the caller, like an illegal event.
      const char* line = "internal error: the Offloader is destroyed while a Lease is held";
#ifndef NDEBUG
      std::fprintf(stderr, "siesta: %s\n", line);
      std::abort();
#else
      impl.log(line);
#endif
    }
    impl.closing = true;
    impl.cancel_save = true;
    lock.wait(impl.cv, [&]() SIESTA_REQUIRES(impl.mu) { return impl.tasks_running == 0; });
  }
  impl.flush_log();
}

// ---- The phase, the log and the deadlines ----

void Offloader::Impl::apply(Event event) {
  std::string rejected;
  if (!machine.apply(event, &rejected)) log(std::move(rejected));
  cancel_save = offload::cancels_save(machine.phase()) || closing;
  cv.notify_all();
}

uint64_t Offloader::Impl::chain_file_bytes() const {
  uint64_t total = 0;
  for (const Segment& segment : chain) total += segment.file_bytes;
  return total;
}

void Offloader::Impl::report_chain() {
  st.disk_bytes = chain_file_bytes();
  st.snapshot_segments = static_cast<uint32_t>(chain.size());
}

void Offloader::Impl::log_change(const std::string& what, const Status& status, std::string line) {
  std::string key = what + ":" + std::string(status_code_name(status.code()));
  if (key == last_logged) return;
  last_logged = std::move(key);
  log(std::move(line));
}

void Offloader::Impl::flush_log() {
  std::lock_guard writer(log_writer);
  std::vector<std::string> lines;
  {
    MutexLock lock(mu);
    lines.swap(outbox);
  }
  for (const std::string& line : lines) {
    if (options.log) {
      options.log(line);
    } else {
      (void)std::fprintf(stderr, "siesta: %s\n", line.c_str());  // a log line: best effort
    }
  }
}

void Offloader::Impl::arm_timer_at(Clock::Duration when) {
  if (closing) return;
  std::weak_ptr<Impl> weak = weak_from_this();
  deps.executor->post_at(when, [weak] {
    if (std::shared_ptr<Impl> self = weak.lock()) self->on_timer();
  });
}

Clock::Duration Offloader::Impl::save_due() const {
  if (offload_requested) return retry_at;
  return std::max(last_activity + seconds(options.idle_seconds), retry_at);
}

Clock::Duration Offloader::Impl::expiry_due() const {
  return last_activity + seconds(options.expire_seconds);
}

bool Offloader::Impl::begin_task() {
  MutexLock lock(mu);
  if (closing) return false;
  ++tasks_running;
  return true;
}

void Offloader::Impl::end_task() {
  flush_log();
  MutexLock lock(mu);
  --tasks_running;
  cv.notify_all();
}

// ---- Idle and expiry deadlines (executor thread) ----

void Offloader::Impl::on_timer() {
  if (!begin_task()) return;
  int64_t expiry_unix = 0;
  uint64_t file_bytes = 0;
  TimerAction action = TimerAction::kNone;
  {
    MutexLock lock(mu);
    action = decide_timer(&expiry_unix, &file_bytes);
  }
  // Each outcome is logged.
  switch (action) {
    case TimerAction::kSave: run_save(expiry_unix, /*keep_memory=*/false).ignore(); break;
    case TimerAction::kSaveAhead: run_save(expiry_unix, /*keep_memory=*/true).ignore(); break;
    case TimerAction::kRelease: release_saved(file_bytes).ignore(); break;
    case TimerAction::kDeleteExpired: delete_expired(); break;
    case TimerAction::kNone: break;
  }
  end_task();
}

Offloader::Impl::TimerAction Offloader::Impl::decide_timer(int64_t* expiry_unix,
                                                           uint64_t* file_bytes) {
  const Clock::Duration now = deps.clock.now();
  switch (phase()) {
    case Phase::kResident: {
      const bool due = now >= save_due();
      // Not due yet: a timer for that moment is armed, unless a save ahead was asked for.
      if (!due && !ahead_requested) return TimerAction::kNone;
      ahead_requested = false;
      apply(Event::kSaveDue);
      *expiry_unix = last_activity_unix + options.expire_seconds;
      return due ? TimerAction::kSave : TimerAction::kSaveAhead;
    }
    case Phase::kSaved:
      if (now < save_due()) return TimerAction::kNone;
      apply(Event::kSaveDue);  // the file holds the memory already: release it
      *file_bytes = st.disk_bytes;
      return TimerAction::kRelease;
    case Phase::kDisk:
      if (now < expiry_due()) return TimerAction::kNone;
      apply(Event::kExpiryDue);
      ++st.counters.expirations;
      log("offload: snapshot expired " + std::to_string(options.expire_seconds) +
          " s after the last command; deleting it; state expired");
      return TimerAction::kDeleteExpired;
    case Phase::kExpiring:
      if (now < expiry_due()) return TimerAction::kNone;
      apply(Event::kExpiryDue);  // the deletion, once more
      return TimerAction::kDeleteExpired;
    default:
      // A command, a save or a restore runs (its end arms what is due next), or nothing is
      // due in this phase.
      return TimerAction::kNone;
  }
}

Status Offloader::Impl::remove_snapshot(const char* why) {
  Status removed = deps.store->remove(options.session);
  MutexLock lock(mu);
  chain.clear();
  report_chain();
  if (removed.ok()) return removed;
  ++st.counters.delete_failures;
  st.last_error = removed.to_string();
  log_change("delete", removed,
             std::string("could not delete the ") + why + " snapshot: " + removed.to_string());
  return removed;
}

// A failed deletion of an expired snapshot is tried again by a timer.
void Offloader::Impl::delete_expired() {
  Status removed = remove_snapshot("expired");
  MutexLock lock(mu);
  if (phase() != Phase::kExpiring) return;  // a command came meanwhile; it deletes the file
  if (removed.ok()) {
    apply(Event::kSnapshotDeleted);
  } else {
    arm_timer_at(deps.clock.now() + options.backoff_initial);
  }
}

void Offloader::Impl::retire_snapshot(const char* why) {
  size_t segments = 1;  // segment 0 also when no save is known: a file may still be there
  {
    MutexLock lock(mu);
    segments = std::max<size_t>(chain.size(), 1);
  }
  std::vector<std::string> retired;
  for (size_t segment = 0; segment < segments; ++segment) {
    Result<std::string> name = deps.store->retire(options.session, static_cast<uint32_t>(segment));
    if (!name.ok()) {
      // NotFound included: remove() also clears the other segments, temporaries and disk_bytes.
      // The renamed ones are removed with the rest of this session's temporaries.
      (void)remove_snapshot(why);
      return;
    }
    retired.push_back(std::move(name).value());
  }
  {
    MutexLock lock(mu);
    chain.clear();
    report_chain();
  }
  std::weak_ptr<Impl> weak = weak_from_this();
  for (std::string& name : retired) {
    deps.executor->post([weak, name = std::move(name)] {
      if (std::shared_ptr<Impl> self = weak.lock()) self->remove_retired(name);
    });
  }
}

void Offloader::Impl::remove_retired(const std::string& retired) {
  // A removal not started before closing never starts: the store's shutdown clean-up takes
  // the file.
  if (!begin_task()) return;
  Status removed = deps.store->remove_retired(retired);
  if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
    MutexLock lock(mu);
    ++st.counters.delete_failures;
    st.last_error = removed.to_string();
    log_change("delete", removed, "could not delete a restored snapshot: " + st.last_error);
  }
  end_task();
}

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
  // Kernels and copies still queued would change the bytes under the writer.
  const Status synced = deps.backend.synchronize();
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
    if (plan.segment == 0 && !chain.empty()) {
      // The writer leaves the final name alone on failure, except when only the directory's
      // sync failed after the rename: then the base may be the new one. No chain is trusted
      // over a base in doubt; the memory, kept, holds everything.
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

// ---- Commands (engine thread) ----

Result<Offloader::Lease> Offloader::acquire() {
  Result<Admission> admitted = impl_->admit();
  impl_->flush_log();
  if (!admitted.ok()) return admitted.status();
  return Lease(impl_.get(), *admitted);
}

Result<Admission> Offloader::Impl::admit() {
  const Clock::Duration start = deps.clock.now();
  Admission admission;
  std::optional<bool> restore_fresh;  // set when the memory must be mapped back
  bool retire_ahead = false;
  {
    MutexLock lock(mu);
    if (phase() == Phase::kSaveReleasing) {
      // Never half-released memory: the release ends on its own, then the command restores.
      st.command_waiting = true;
      lock.wait(cv, [&]() SIESTA_REQUIRES(mu) { return phase() != Phase::kSaveReleasing; });
      st.command_waiting = false;
    }
    if (offload::holds_command(phase())) {
      return FailedPrecondition("a command is already running");
    }
    if (phase() == Phase::kLost) {
      return DeviceError("the session's memory was lost earlier: " + lost_reason);
    }
    offload_requested = false;  // the command is newer than any offload request
    ahead_requested = false;
    switch (phase()) {
      case Phase::kSaveReading:
        // The save stops at its next chunk and releases nothing; the command waits only
        // until the writer stops reading the memory, never for the disk.
        admission.cancelled_save = true;
        apply(Event::kCommandArrives);
        st.command_waiting = true;
        lock.wait(cv, [&]() SIESTA_REQUIRES(mu) { return phase() != Phase::kSaveCancelling; });
        st.command_waiting = false;
        break;
      case Phase::kSaveFinishing:
      case Phase::kSaveTail:
        // Every byte is read: the save abandons or removes its file on its own.
        admission.cancelled_save = true;
        apply(Event::kCommandArrives);
        break;
      case Phase::kDisk:
      case Phase::kExpiring:
      case Phase::kExpired:
        restore_fresh = phase() != Phase::kDisk;
        apply(Event::kCommandArrives);
        break;
      case Phase::kSaved:
        retire_ahead = !keeps_snapshots();
        apply(Event::kCommandArrives);
        break;
      default: apply(Event::kCommandArrives); break;
    }
  }
  // Written ahead, and the command is about to change the memory: the file no longer holds it
  // (unless it stays as the base of a delta).
  if (retire_ahead) retire_snapshot("written-ahead");
  if (restore_fresh) {
    SIESTA_ASSIGN_OR_RETURN(admission, restore(*restore_fresh, admission));
  }
  admission.wait_ms = milliseconds(deps.clock.now() - start);
  return admission;
}

void Offloader::Impl::end_command() {
  // Read outside the mutex: the session is still this command's.
  const uint64_t tokens = deps.target.history_tokens();
  const uint64_t unchanged = deps.target.take_unchanged_tokens();
  const Clock::Duration now = deps.clock.now();
  const int64_t now_unix = deps.clock.unix_seconds();
  bool chain_useless = false;
  {
    MutexLock lock(mu);
    unchanged_tokens = std::min(unchanged_tokens, unchanged);
    // Rewritten from its start (a discarded history, another conversation): no delta can
    // build on the snapshot, and it must not outlive the history it holds.
    chain_useless = keeps_snapshots() && !chain.empty() && unchanged_tokens == 0;
  }
  if (chain_useless) retire_snapshot("rewritten");
  {
    MutexLock lock(mu);
    apply(Event::kCommandEnds);
    last_activity = now;
    last_activity_unix = now_unix;
    retry_at = Clock::Duration{0};
    failures_in_a_row = 0;
    st.tokens = tokens;
    if (enabled()) arm_timer_at(save_due());
  }
  flush_log();
}

Offloader::Lease::Lease(Lease&& other) noexcept
    : impl_(std::exchange(other.impl_, nullptr)), admission_(other.admission_) {}

Offloader::Lease& Offloader::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    impl_ = std::exchange(other.impl_, nullptr);
    admission_ = other.admission_;
  }
  return *this;
}

void Offloader::Lease::release() {
  if (Impl* impl = std::exchange(impl_, nullptr)) impl->end_command();
}

Status Offloader::Impl::refuse_unless_idle() const {
  if (!enabled()) return FailedPrecondition("idle offload is disabled");
  if (offload::holds_command(phase())) return FailedPrecondition("a command is running");
  if (phase() == Phase::kLost) {
    return FailedPrecondition("the session's memory was lost: " + lost_reason);
  }
  return Status::Ok();
}

Status Offloader::offload_now() {
  Impl& impl = *impl_;
  MutexLock lock(impl.mu);
  SIESTA_RETURN_IF_ERROR(impl.refuse_unless_idle());
  // Saving, disk or expired: nothing to do.
  if (impl.phase() != Phase::kResident && impl.phase() != Phase::kSaveTail &&
      impl.phase() != Phase::kSaved) {
    return Status::Ok();
  }
  impl.offload_requested = true;
  impl.arm_timer_at(impl.save_due());
  return Status::Ok();
}

Status Offloader::save_ahead() {
  Impl& impl = *impl_;
  MutexLock lock(impl.mu);
  SIESTA_RETURN_IF_ERROR(impl.refuse_unless_idle());
  // Saving, saved, disk or expired: there is nothing to write ahead.
  if (impl.phase() != Phase::kResident) return Status::Ok();
  impl.ahead_requested = true;
  impl.arm_timer_at(impl.deps.clock.now());
  return Status::Ok();
}

void Offloader::Impl::wait_out_save(MutexLock& lock) {
  lock.wait(cv, [&]() SIESTA_REQUIRES(mu) {
    switch (phase()) {
      case Phase::kSaveReading:
      case Phase::kSaveCancelling:
      case Phase::kSaveFinishing:
      case Phase::kSaveReleasing:
      case Phase::kSaveTail: return closing;
      default: return true;
    }
  });
}

Status Offloader::evict() {
  Impl& impl = *impl_;
  if (!impl.begin_task()) return Cancelled("the offloader is closing");
  Status outcome;
  int64_t expiry_unix = 0;
  bool save = false;
  std::optional<uint64_t> release_file_bytes;  // written ahead: release only
  {
    MutexLock lock(impl.mu);
    impl.wait_out_save(lock);
    if (!impl.enabled()) {
      outcome = FailedPrecondition("idle offload is disabled");
    } else if (offload::holds_command(impl.phase())) {
      outcome = FailedPrecondition("a command is running");
    } else if (impl.phase() == Phase::kLost) {
      outcome = FailedPrecondition("the session's memory was lost: " + impl.lost_reason);
    } else if (impl.closing) {
      outcome = Cancelled("the offloader is closing");
    } else if (impl.phase() == Phase::kResident) {
      impl.ahead_requested = false;  // saved here, and released
      impl.apply(Event::kSaveDue);
      expiry_unix = impl.last_activity_unix + impl.options.expire_seconds;
      save = true;
    } else if (impl.phase() == Phase::kSaved) {
      impl.apply(Event::kSaveDue);
      release_file_bytes = impl.st.disk_bytes;
    }  // disk, expiring, expired: released already
  }
  if (save) outcome = impl.run_save(expiry_unix, /*keep_memory=*/false);
  if (release_file_bytes) outcome = impl.release_saved(*release_file_bytes);
  impl.end_task();
  return outcome;
}

Status Offloader::forget() {
  Impl& impl = *impl_;
  if (!impl.begin_task()) return Cancelled("the offloader is closing");
  Status outcome;
  bool remove = false;
  {
    MutexLock lock(impl.mu);
    impl.wait_out_save(lock);
    if (offload::holds_command(impl.phase())) {
      outcome = FailedPrecondition("a command is running");
    } else if (impl.phase() == Phase::kLost) {
      outcome = FailedPrecondition("the session's memory was lost: " + impl.lost_reason);
    } else if (impl.phase() == Phase::kDisk) {
      impl.apply(Event::kExpiryDue);
      impl.log("offload: the snapshot's conversation was forgotten to make room; deleting it");
      remove = true;
    } else if (impl.phase() == Phase::kExpiring) {
      remove = true;  // a deletion to retry
    }
  }
  if (remove) {
    outcome = impl.remove_snapshot("forgotten");
    MutexLock lock(impl.mu);
    if (impl.phase() == Phase::kExpiring) {
      if (outcome.ok()) {
        impl.apply(Event::kSnapshotDeleted);
      } else {
        impl.arm_timer_at(impl.deps.clock.now() + impl.options.backoff_initial);
      }
    }
  }
  impl.end_task();
  return outcome;
}

OffloadStatus Offloader::status() const {
  const Impl& impl = *impl_;
  MutexLock lock(impl.mu);
  OffloadStatus out = impl.st;
  out.state = offload::state_of(impl.phase());
  out.seconds_since_activity =
      std::chrono::duration<double>(impl.deps.clock.now() - impl.last_activity).count();
  return out;
}

}  // namespace siesta
