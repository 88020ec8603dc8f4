#include "core/offload/offloader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

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

Result<std::unique_ptr<Offloader>> Offloader::create(Deps deps, OffloaderOptions options) {
  if (options.idle_seconds < 0 || options.expire_seconds < 0) {
    return InvalidArgument("offload durations must not be negative");
  }
  const bool enabled = options.idle_seconds != 0;
  if (enabled && options.expire_seconds <= options.idle_seconds) {
    return InvalidArgument("the expiry (" + std::to_string(options.expire_seconds) +
                           " s) must be greater than the idle time (" +
                           std::to_string(options.idle_seconds) + " s)");
  }
  if (enabled && (deps.store == nullptr || deps.key == nullptr)) {
    return InvalidArgument("offload needs a snapshot store and a process key");
  }
  std::unique_ptr<Offloader> offloader(new Offloader(deps, std::move(options)));
  Impl& impl = *offloader->impl_;
  if (enabled) {
    SIESTA_ASSIGN_OR_RETURN(impl.path, deps.store->snapshot_path(impl.options.session));
  }
  impl.state = enabled ? OffloadState::kResident : OffloadState::kDisabled;
  impl.last_activity = deps.clock.now();
  impl.last_activity_unix = deps.clock.unix_seconds();
  impl.st.idle_seconds = impl.options.idle_seconds;
  impl.st.expire_seconds = impl.options.expire_seconds;
  impl.st.tokens = deps.target.history_tokens();
  impl.device_released.assign(deps.target.device_memory().size(), false);
  if (enabled) impl.arm_timer_at(impl.last_activity + seconds(impl.options.idle_seconds));
  return offloader;
}

Offloader::Offloader(Deps deps, OffloaderOptions options)
    : impl_(std::make_shared<Impl>(deps, std::move(options))) {}

Offloader::~Offloader() {
  std::unique_lock lock(impl_->mu);
  impl_->shutting_down = true;
  impl_->cancel_save = true;
  impl_->cv.wait(lock, [&] { return !impl_->save_running && impl_->removals_running == 0; });
}

// ---- Idle and expiry deadlines (executor thread) ----

void Offloader::Impl::on_timer() {
  std::unique_lock lock(mu);
  if (shutting_down || command_running || save_running) return;  // release() re-arms
  const Clock::Duration now = deps.clock.now();
  if (state == OffloadState::kResident) {
    const Clock::Duration due = std::max(last_activity + seconds(options.idle_seconds), retry_at);
    if (!force_save && now < due) return;  // a later timer for `due` is already armed
    force_save = false;
    state = OffloadState::kSaving;
    save_running = true;
    save_reading = true;
    cancel_save = false;
    lock.unlock();
    run_save();
    return;
  }
  if (state == OffloadState::kDisk || (state == OffloadState::kExpired && delete_pending)) {
    const Clock::Duration due = last_activity + seconds(options.expire_seconds);
    if (now < due) return;
    if (state == OffloadState::kDisk) expire_locked();
    lock.unlock();
    delete_snapshot("expired");
  }
}

void Offloader::Impl::expire_locked() {
  log("offload: snapshot expired " + std::to_string(options.expire_seconds) +
      " s after the last command; deleting it; state expired");
  state = OffloadState::kExpired;
  ++st.counters.expirations;
  delete_pending = true;
}

// Deletes the snapshot file outside the lock (a slow disk must not block status()). A failed
// delete of an expired snapshot is retried by a timer; other callers only log.
void Offloader::Impl::delete_snapshot(const char* why) {
  Status removed = deps.store->remove(options.session);
  std::lock_guard lock(mu);
  if (removed.ok()) {
    if (state == OffloadState::kExpired) delete_pending = false;
    st.disk_bytes = 0;
    return;
  }
  ++st.counters.delete_failures;
  st.last_error = removed.to_string();
  log_change_locked(
      "delete", removed,
      std::string("could not delete the ") + why + " snapshot: " + removed.to_string());
  if (state == OffloadState::kExpired && !shutting_down) {
    arm_timer_at(deps.clock.now() + options.backoff_initial);
  }
}

void Offloader::Impl::retire_snapshot(const char* why) {
  Result<std::string> retired = deps.store->retire(options.session);
  if (!retired.ok()) {
    delete_snapshot(why);  // NotFound included: it also clears temporaries and disk_bytes
    return;
  }
  {
    std::lock_guard lock(mu);
    st.disk_bytes = 0;
  }
  std::weak_ptr<Impl> weak = weak_from_this();
  deps.executor.post([weak, name = *retired] {
    if (std::shared_ptr<Impl> self = weak.lock()) self->remove_retired(name);
  });
}

void Offloader::Impl::remove_retired(const std::string& retired) {
  {
    std::lock_guard lock(mu);
    if (shutting_down) return;
    ++removals_running;
  }
  Status removed = deps.store->remove_retired(retired);
  std::lock_guard lock(mu);
  --removals_running;
  cv.notify_all();
  if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
    ++st.counters.delete_failures;
    st.last_error = removed.to_string();
    log_change_locked("delete", removed, "could not delete a restored snapshot: " + st.last_error);
  }
}

// ---- Save (executor thread; state kSaving, save_running) ----

void Offloader::Impl::run_save() {
  const Clock::Duration start = deps.clock.now();
  // Kernels and copies still queued would change the bytes under the writer.
  const Status synced = deps.backend.synchronize();
  Result<SnapshotWriteResult> written = synced;
  if (synced.ok()) {
    SnapshotWriteOptions write;
    write.path = path;
    write.mode = options.encrypt ? snapshot::SnapshotMode::kSessionEncrypted
                                 : snapshot::SnapshotMode::kSessionDigest;
    write.fingerprint = deps.target.fingerprint();
    write.expiry_unix = last_activity_unix + options.expire_seconds;
    write.generation = ++generation;
    write.chunk_bytes = options.chunk_bytes;
    write.cancel = &cancel_save;
    write.record_buffers = &record_buffers;
    write.on_memory_read = [this] {
      std::lock_guard lock(mu);
      save_reading = false;
      cv.notify_all();
    };
    SnapshotWriter writer(deps.fs, deps.clock, *deps.key, &deps.backend);
    written = writer.write(write, deps.target.snapshot_regions());
  }

  std::unique_lock lock(mu);
  const Clock::Duration now = deps.clock.now();
  bool remove_file = false;
  if (written.ok() && !cancel_save) {
    release_memory_locked(*written);
  } else if (cancel_save || written.status().code() == StatusCode::kCancelled) {
    state = OffloadState::kResident;
    ++st.counters.cancelled_saves;
    remove_file = written.ok();  // complete but stale: the command changes the session
    // A command let in during the save's last steps may have ended already; the timer its
    // release() armed runs after this task (the executor runs one task at a time), so the
    // next save needs nothing from here.
  } else {
    state = OffloadState::kResident;
    ++st.counters.write_failures;
    st.last_error = written.status().to_string();
    const Clock::Duration backoff = std::min(
        options.backoff_max, options.backoff_initial * (1u << std::min(failures_in_a_row, 20u)));
    ++failures_in_a_row;
    retry_at = now + backoff;
    log_change_locked("write", written.status(),
                      "snapshot write failed (memory kept, retrying): " + st.last_error);
    if (!shutting_down) arm_timer_at(retry_at);
  }
  if (state == OffloadState::kDisk) {
    st.last_save_ms = st.operation_ms = milliseconds(now - start);
    st.counters.save_seconds.observe(st.last_save_ms / 1000.0);
    log("offload: saved " + std::to_string(st.disk_bytes) + " bytes in " +
        std::to_string(static_cast<int64_t>(st.last_save_ms)) + " ms; released " +
        std::to_string(st.released_vram_bytes) + " device bytes, " +
        std::to_string(st.released_host_bytes) + " host bytes; state disk");
    if (!shutting_down) arm_timer_at(last_activity + seconds(options.expire_seconds));
  }
  if (remove_file) {
    // Before save_running clears: from then on the command runs and the Offloader (its store
    // with it) may be destroyed, so nothing of this save may still be to come. An unlink
    // adds little to the command's wait.
    lock.unlock();
    delete_snapshot("cancelled");
    lock.lock();
  }
  save_reading = false;
  save_running = false;
  cv.notify_all();
}

// The file is durable: give the memory back. Stops at the first failure; what was released
// stays released (the snapshot holds it) and a restore commits exactly that.
void Offloader::Impl::release_memory_locked(const SnapshotWriteResult& written) {
  const MemoryStats device_before = deps.backend.stats();
  const HostVmmStats host_before = deps.host.stats();
  const std::vector<DeviceRange> device = deps.target.device_memory();
  Status failed;
  size_t released = 0;
  for (size_t i = 0; i < device.size() && failed.ok(); ++i) {
    if (device_released[i]) continue;
    failed = deps.backend.decommit(device[i]);
    if (failed.ok()) {
      device_released[i] = true;
      ++released;
    }
  }
  if (failed.ok()) {
    for (HostRange* range : deps.target.host_memory()) {
      if (!range->committed()) continue;
      failed = range->release();
      if (!failed.ok()) break;
      ++released;
    }
  }
  const MemoryStats device_after = deps.backend.stats();
  const HostVmmStats host_after = deps.host.stats();
  st.released_vram_bytes = device_before.committed_bytes - device_after.committed_bytes;
  st.released_host_bytes = host_before.committed_bytes - host_after.committed_bytes;
  if (!failed.ok()) {
    ++st.counters.write_failures;
    st.last_error = failed.to_string();
    log_change_locked("release", failed, "releasing the session's memory failed: " + st.last_error);
  }
  if (!failed.ok() && released == 0) {
    // Nothing was released: the session simply stays resident and tries again later.
    state = OffloadState::kResident;
    retry_at = deps.clock.now() + options.backoff_initial;
    if (!shutting_down) arm_timer_at(retry_at);
    return;
  }
  state = OffloadState::kDisk;
  failures_in_a_row = 0;
  ++st.counters.saves;
  st.disk_bytes = written.file_bytes;
}

// ---- Commands (engine thread) ----

Result<Admission> Offloader::acquire() {
  Impl& impl = *impl_;
  const Clock::Duration start = impl.deps.clock.now();
  std::unique_lock lock(impl.mu);
  if (impl.command_running) return FailedPrecondition("a command is already running");
  impl.command_running = true;
  Admission admission;
  if (impl.save_running) {
    // The save stops at its next chunk, or, when it has read its last one, abandons the file
    // instead of making it durable; either way it releases nothing. The command waits only
    // while the save still reads the memory, never for the disk.
    impl.cancel_save = true;
    admission.cancelled_save = true;
    impl.st.command_waiting = true;
    impl.cv.wait(lock, [&] { return !impl.save_reading; });
    impl.st.command_waiting = false;
    if (impl.save_running) impl.state = OffloadState::kResident;  // its tail ends on its own
  }
  if (!impl.save_running) impl.cancel_save = false;  // the next save clears it anyway
  if (impl.state == OffloadState::kDisk || impl.state == OffloadState::kExpired) {
    Result<Admission> restored = impl.restore(lock, admission);
    if (!restored.ok()) {
      impl.command_running = false;
      return restored.status();
    }
    admission = *restored;
  }
  admission.wait_ms = milliseconds(impl.deps.clock.now() - start);
  return admission;
}

void Offloader::release() {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.mu);
  impl.command_running = false;
  impl.last_activity = impl.deps.clock.now();
  impl.last_activity_unix = impl.deps.clock.unix_seconds();
  impl.retry_at = Clock::Duration{0};
  impl.failures_in_a_row = 0;
  impl.st.tokens = impl.deps.target.history_tokens();
  if (impl.enabled() && !impl.shutting_down) {
    impl.arm_timer_at(impl.last_activity + seconds(impl.options.idle_seconds));
  }
}

Status Offloader::offload_now() {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.mu);
  if (!impl.enabled()) return FailedPrecondition("idle offload is disabled");
  if (impl.command_running) return FailedPrecondition("a command is running");
  if (impl.state != OffloadState::kResident) return Status::Ok();  // saving, disk or expired
  impl.force_save = true;
  impl.arm_timer_at(Clock::Duration::min());
  return Status::Ok();
}

OffloadStatus Offloader::status() const {
  const Impl& impl = *impl_;
  std::lock_guard lock(impl.mu);
  OffloadStatus out = impl.st;
  out.state = impl.state;
  out.seconds_since_activity =
      std::chrono::duration<double>(impl.deps.clock.now() - impl.last_activity).count();
  return out;
}

}  // namespace siesta
