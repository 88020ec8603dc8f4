#include "core/offload/offloader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "core/offload/internal/offloader_impl.h"

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

Clock::Duration seconds(int64_t s) { return std::chrono::seconds(s); }

}  // namespace

OffloadCounters& OffloadCounters::operator+=(const OffloadCounters& more) {
  saves += more.saves;
  saves_ahead += more.saves_ahead;
  delta_saves += more.delta_saves;
  restores += more.restores;
  restore_hits += more.restore_hits;
  for (size_t i = 0; i < kFallbackReasonCount; ++i) fallbacks[i] += more.fallbacks[i];
  expirations += more.expirations;
  write_failures += more.write_failures;
  cancelled_saves += more.cancelled_saves;
  out_of_memory_retries += more.out_of_memory_retries;
  delete_failures += more.delete_failures;
  ram_saves += more.ram_saves;
  ram_restores += more.ram_restores;
  cold_restores += more.cold_restores;
  cold_restores_around_cache += more.cold_restores_around_cache;
  ram_full += more.ram_full;
  ram_spills += more.ram_spills;
  disk_drops += more.disk_drops;
  save_seconds += more.save_seconds;
  restore_seconds += more.restore_seconds;
  return *this;
}

void add_totals(OffloadStatus& total, const OffloadStatus& one) {
  total.disk_bytes += one.disk_bytes;
  total.snapshot_segments += one.snapshot_segments;
  total.ram_bytes += one.ram_bytes;
  total.released_vram_bytes += one.released_vram_bytes;
  total.released_host_bytes += one.released_host_bytes;
  total.tokens += one.tokens;
  total.counters += one.counters;
  total.command_waiting = total.command_waiting || one.command_waiting;
  total.memory_committed = total.memory_committed || one.memory_committed;
  total.memory_lost = total.memory_lost || one.memory_lost;
  if (total.last_error.empty()) total.last_error = one.last_error;
}

// ---- Creation and destruction ----

Result<std::unique_ptr<Offloader>> Offloader::create(Deps deps, OffloaderOptions options) {
  SIESTA_RETURN_IF_ERROR(
      validate_offload_times(options.config.idle_seconds, options.config.expire_seconds));
  if (options.config.delta_segments > kMaxDeltaSegments) {
    return InvalidArgument("at most " + std::to_string(kMaxDeltaSegments) +
                           " delta segments, got " + std::to_string(options.config.delta_segments));
  }
  const bool enabled = options.config.enabled();
  if (enabled && (deps.store == nullptr || deps.key == nullptr || deps.executor == nullptr)) {
    return InvalidArgument("offload needs a snapshot store, a process key and an executor");
  }
  std::unique_ptr<Offloader> offloader(new Offloader(deps, std::move(options)));
  Impl& impl = *offloader->impl_;
  if (enabled) {
    for (uint32_t segment = 0; segment <= impl.options.config.delta_segments; ++segment) {
      SIESTA_ASSIGN_OR_RETURN(std::string path,
                              deps.store->snapshot_path(impl.options.session, segment));
      impl.segment_paths.push_back(std::move(path));
    }
  }
  impl.device_released.assign(deps.target.device_memory().size(), false);
  MutexLock lock(impl.mu);
  impl.last_activity = deps.clock.now();
  impl.last_activity_unix = deps.clock.unix_seconds();
  impl.st.idle_seconds = impl.options.config.idle_seconds;
  impl.st.expire_seconds = impl.options.config.expire_seconds;
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
  // No spill starts from here on (begin_task refuses); the tier forgets this tenant.
  if (impl.deps.ram_tier != nullptr) impl.deps.ram_tier->delist(&impl);
  impl.flush_log();
}

// ---- The phase, the log and the deadlines ----

void Offloader::Impl::apply(Event event) {
  std::string rejected;
  if (!machine.apply(event, &rejected)) log(std::move(rejected));
  cancel_save = offload::cancels_save(machine.phase()) || closing;
  cv.notify_all();
}

void Offloader::Impl::report_chain() {
  st.disk_bytes = 0;
  for (const Segment& segment : chain) st.disk_bytes += segment.file_bytes;
  st.snapshot_segments = static_cast<uint32_t>(chain.size());
  disk_space.set(st.disk_bytes);
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
  return std::max(last_activity + seconds(options.config.idle_seconds), retry_at);
}

Clock::Duration Offloader::Impl::expiry_due() const {
  return last_activity + seconds(options.config.expire_seconds);
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
    case TimerAction::kDeleteExpired: delete_expired().ignore(); break;
    case TimerAction::kNone: break;
  }
  end_task();
}

Offloader::Impl::TimerAction Offloader::Impl::decide_timer(int64_t* expiry_unix,
                                                           uint64_t* file_bytes) {
  const Clock::Duration now = deps.clock.now();
  switch (offload::rules(phase()).timer) {
    case offload::OnTimer::kSave: {
      const bool due = now >= save_due();
      // Not due yet: a timer for that moment is armed, unless a save ahead was asked for.
      if (!due && !ahead_requested) return TimerAction::kNone;
      ahead_requested = false;
      apply(Event::kSaveDue);
      *expiry_unix = last_activity_unix + options.config.expire_seconds;
      return due ? TimerAction::kSave : TimerAction::kSaveAhead;
    }
    case offload::OnTimer::kRelease:
      if (now < save_due()) return TimerAction::kNone;
      apply(Event::kSaveDue);  // the file holds the memory already: release it
      *file_bytes = st.disk_bytes;
      return TimerAction::kRelease;
    case offload::OnTimer::kExpire:
      if (now < expiry_due()) return TimerAction::kNone;
      apply(Event::kExpiryDue);
      ++st.counters.expirations;
      log("offload: snapshot expired " + std::to_string(options.config.expire_seconds) +
          " s after the last command; deleting it; state expired");
      return TimerAction::kDeleteExpired;
    case offload::OnTimer::kRetryDelete:
      // In `expiring` the deletion is due (the expiry passed, or the snapshot was deleted for
      // room): the timer armed after a failed one is its backoff.
      apply(Event::kExpiryDue);  // the deletion, once more
      return TimerAction::kDeleteExpired;
    case offload::OnTimer::kNothing: break;
  }
  return TimerAction::kNone;
}

Status Offloader::Impl::remove_snapshot(const char* why) {
  drop_ram();
  return remove_files(why);
}

void Offloader::Impl::enlist_ram(Holding holding) {
  deps.ram_tier->enlist(shared_from_this(), last_activity.count(), holding);
}

void Offloader::Impl::drop_ram() {
  std::shared_ptr<const RamCopy> dropped;  // given back to the tier outside the mutex
  {
    MutexLock lock(mu);
    dropped = std::move(ram);
  }
  if (dropped != nullptr) deps.ram_tier->delist(this);
}

Status Offloader::Impl::remove_files(const char* why, uint64_t unchained_bytes) {
  Status removed = deps.store->remove(options.session);
  MutexLock lock(mu);
  const uint64_t had = st.disk_bytes + unchained_bytes;
  chain.clear();
  report_chain();
  // Files that may still be there keep their room on the budget until a removal succeeds.
  if (!removed.ok()) disk_space.set(had);
  if (removed.ok()) return removed;
  ++st.counters.delete_failures;
  st.last_error = removed.to_string();
  log_change("delete", removed,
             std::string("could not delete the ") + why + " snapshot: " + removed.to_string());
  return removed;
}

// A failed deletion of an expired snapshot is tried again by a timer.
Status Offloader::Impl::delete_expired() {
  Status removed = remove_snapshot("expired");
  MutexLock lock(mu);
  if (phase() != Phase::kExpiring) return removed;  // a command came meanwhile; it deletes it
  if (removed.ok()) {
    apply(Event::kSnapshotDeleted);
  } else {
    arm_timer_at(deps.clock.now() + options.backoff_initial);
  }
  return removed;
}

void Offloader::Impl::enlist_disk() {
  if (deps.disk_budget == nullptr) return;
  deps.disk_budget->holders().enlist(std::shared_ptr<RoomHolder>(shared_from_this(), &disk_holder),
                                     last_activity.count());
}

void Offloader::Impl::delist_disk() {
  if (deps.disk_budget != nullptr) deps.disk_budget->holders().delist(&disk_holder);
}

Status Offloader::Impl::claim_disk(uint64_t file_bytes, DiskBudget::Space& claimed) {
  if (deps.disk_budget == nullptr) return Status::Ok();
  SIESTA_ASSIGN_OR_RETURN(claimed, deps.disk_budget->reserve(file_bytes, &cancel_save));
  return Status::Ok();
}

Result<RoomHolder::Freed> Offloader::Impl::give_disk_room() {
  if (!begin_task()) return Cancelled("the offloader is closing");
  {
    MutexLock lock(mu);
    if (chain.empty() || phase() != Phase::kDisk) {
      const bool none = chain.empty();
      lock.unlock();
      end_task();
      if (none) return NotFound("no snapshot on disk");
      return FailedPrecondition("the snapshot is in use or its session resident");
    }
    // As at expiry: a command arriving from here on starts afresh.
    apply(Event::kExpiryDue);
    ++st.counters.disk_drops;
    log("offload: snapshot deleted to make room in the snapshot directory's budget "
        "(--cache-disk-max-mib); the next request reads its prompt again; state expired");
  }
  const Status removed = delete_expired();
  end_task();
  if (!removed.ok()) return removed;
  return Freed::kDeleted;
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
    // Each renamed file keeps its room on the directory's budget until it is unlinked (held
    // here, not by the posted task: a lent executor may outlive the budget).
    for (size_t segment = 0; segment < retired.size(); ++segment) {
      const uint64_t bytes = segment < chain.size() ? chain[segment].file_bytes : 0;
      retired_space[retired[segment]] = disk_space.split(bytes);
    }
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
  {
    MutexLock lock(mu);
    if (removed.ok() || removed.code() == StatusCode::kNotFound) {
      retired_space.erase(retired);  // its room is the budget's again
    } else {
      // The file stays (the store's shutdown clean-up takes it), and so does its room.
      ++st.counters.delete_failures;
      st.last_error = removed.to_string();
      log_change("delete", removed, "could not delete a restored snapshot: " + st.last_error);
    }
  }
  end_task();
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
  bool drop_ahead = false;
  {
    MutexLock lock(mu);
    // What the phase does with an arriving command (offload_machine.h's phase table).
    for (bool decided = false; !decided;) {
      const offload::OnCommand action = offload::rules(phase()).command;
      switch (action) {
        case offload::OnCommand::kRefuseBusy:
          return FailedPrecondition("a command is already running");
        case offload::OnCommand::kRefuseLost:
          return DeviceError("the session's memory was lost earlier: " + lost_reason);
        case offload::OnCommand::kWaitForRelease: {
          // Never half-released memory: the release ends on its own, then the phase decides.
          const Phase releasing = phase();
          st.command_waiting = true;
          lock.wait(cv, [&]() SIESTA_REQUIRES(mu) { return phase() != releasing; });
          st.command_waiting = false;
          continue;
        }
        default: break;
      }
      decided = true;
      offload_requested = false;  // the command is newer than any offload request
      ahead_requested = false;
      apply(Event::kCommandArrives);
      switch (action) {
        case offload::OnCommand::kCancelSaveAndWait: {
          // The save stops at its next chunk and releases nothing; the command waits only
          // until the writer stops reading the memory, never for the disk.
          admission.cancelled_save = true;
          const Phase cancelling = phase();
          st.command_waiting = true;
          lock.wait(cv, [&]() SIESTA_REQUIRES(mu) { return phase() != cancelling; });
          st.command_waiting = false;
          break;
        }
        case offload::OnCommand::kCancelSaveAndRun:
          // Every byte is read: the save abandons or removes its file on its own.
          admission.cancelled_save = true;
          break;
        case offload::OnCommand::kRunOverSavedFile:
          // The command is about to change the memory the snapshot holds: the snapshot (a
          // copy in the RAM tier, or a file) stays only as the base of a delta.
          if (keeps_snapshots()) {
            if (ram != nullptr) enlist_ram(Holding::kBaseOfResidentCopy);
          } else {
            drop_ahead = ram != nullptr;
            retire_ahead = !drop_ahead;
          }
          break;
        case offload::OnCommand::kCancelSpillAndRestore: {
          // The spill stops at its next chunk and removes what it wrote; the RAM copy stayed,
          // so the command restores from it as soon as the spill has ended.
          const Phase cancelling = phase();
          st.command_waiting = true;
          lock.wait(cv, [&]() SIESTA_REQUIRES(mu) { return phase() != cancelling; });
          st.command_waiting = false;
          restore_fresh = false;
          break;
        }
        case offload::OnCommand::kRestore: restore_fresh = false; break;
        case offload::OnCommand::kStartFresh: restore_fresh = true; break;
        default: break;  // kRun
      }
    }
  }
  if (retire_ahead) retire_snapshot("written-ahead");
  if (drop_ahead) drop_ram();
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
  if (enabled()) deps.target.mark_device_work();  // only a save waits for it
  // The tier prepares room for this session's next save (a whole copy) while it is idle: a
  // save never waits for pages to be pinned, and without the notice the first save of a
  // session larger than what the pool had ready went to disk.
  if (enabled() && deps.ram_tier != nullptr) {
    deps.ram_tier->expect(ram_block_bytes(deps.target.snapshot_regions()));
  }
  const Clock::Duration now = deps.clock.now();
  const int64_t now_unix = deps.clock.unix_seconds();
  bool chain_useless = false;
  bool ram_useless = false;
  {
    MutexLock lock(mu);
    unchanged_tokens = std::min(unchanged_tokens, unchanged);
    // Rewritten from its start (a discarded history, another conversation): no delta can
    // build on the snapshot, and it must not outlive the history it holds.
    chain_useless = keeps_snapshots() && !chain.empty() && unchanged_tokens == 0;
    ram_useless = ram != nullptr && unchanged_tokens == 0;
  }
  if (chain_useless) retire_snapshot("rewritten");
  if (ram_useless) drop_ram();
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

Status Offloader::Impl::refusal(offload::OnRequest action) const {
  switch (action) {
    case offload::OnRequest::kRefuseDisabled: return FailedPrecondition("idle offload is disabled");
    case offload::OnRequest::kRefuseBusy: return FailedPrecondition("a command is running");
    case offload::OnRequest::kRefuseLost:
      return FailedPrecondition("the session's memory was lost: " + lost_reason);
    default: return Status::Ok();
  }
}

Status Offloader::offload_now() {
  Impl& impl = *impl_;
  MutexLock lock(impl.mu);
  const offload::OnRequest action = offload::rules(impl.phase()).offload_now;
  if (action != offload::OnRequest::kSave) return impl.refusal(action);
  impl.offload_requested = true;  // due at once; a save ahead's file is released only
  impl.arm_timer_at(impl.save_due());
  return Status::Ok();
}

Status Offloader::save_ahead() {
  Impl& impl = *impl_;
  MutexLock lock(impl.mu);
  const offload::OnRequest action = offload::rules(impl.phase()).save_ahead;
  if (action != offload::OnRequest::kSave) return impl.refusal(action);
  impl.ahead_requested = true;
  impl.arm_timer_at(impl.deps.clock.now());
  return Status::Ok();
}

Result<offload::OnRequest> Offloader::Impl::decide_request(
    MutexLock& lock, offload::OnRequest offload::PhaseRules::*column) {
  for (;;) {
    const offload::OnRequest action = offload::rules(phase()).*column;
    if (action != offload::OnRequest::kWaitForSave) return action;
    // A save of this session runs on the executor: it ends on its own (or stops, closing).
    if (closing) return Cancelled("the offloader is closing");
    const Phase saving = phase();
    lock.wait(cv, [&]() SIESTA_REQUIRES(mu) { return phase() != saving || closing; });
  }
}

Status Offloader::evict() {
  Impl& impl = *impl_;
  if (!impl.begin_task()) return Cancelled("the offloader is closing");
  Status outcome;
  int64_t expiry_unix = 0;
  offload::OnRequest action = offload::OnRequest::kNothing;
  uint64_t file_bytes = 0;
  {
    MutexLock lock(impl.mu);
    Result<offload::OnRequest> decided = impl.decide_request(lock, &offload::PhaseRules::evict);
    if (!decided.ok()) {
      outcome = decided.status();
    } else if (impl.closing) {
      outcome = Cancelled("the offloader is closing");
    } else {
      action = *decided;
      outcome = impl.refusal(action);
    }
    if (outcome.ok() && action == offload::OnRequest::kSave) {
      impl.ahead_requested = false;  // saved here, and released
      impl.apply(Event::kSaveDue);
      expiry_unix = impl.last_activity_unix + impl.options.config.expire_seconds;
    } else if (outcome.ok() && action == offload::OnRequest::kRelease) {
      impl.apply(Event::kSaveDue);  // written ahead: the file holds the memory
      file_bytes = impl.st.disk_bytes;
    }
  }
  if (outcome.ok() && action == offload::OnRequest::kSave) {
    outcome = impl.run_save(expiry_unix, /*keep_memory=*/false);
  } else if (outcome.ok() && action == offload::OnRequest::kRelease) {
    outcome = impl.release_saved(file_bytes);
  }
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
    Result<offload::OnRequest> decided = impl.decide_request(lock, &offload::PhaseRules::forget);
    outcome = decided.ok() ? impl.refusal(*decided) : decided.status();
    if (outcome.ok() && *decided == offload::OnRequest::kDelete) {
      impl.apply(Event::kExpiryDue);
      impl.log("offload: the snapshot's conversation was forgotten; deleting it");
      remove = true;
    } else if (outcome.ok() && *decided == offload::OnRequest::kRetryDelete) {
      remove = true;  // a deletion that failed before
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
  const offload::PhaseRules& rules = offload::rules(impl.phase());
  out.state = rules.state;
  out.memory_committed = rules.memory != offload::Memory::kReleased;
  out.memory_lost = rules.command == offload::OnCommand::kRefuseLost;
  out.seconds_since_activity =
      std::chrono::duration<double>(impl.deps.clock.now() - impl.last_activity).count();
  out.ram_bytes = impl.ram != nullptr ? impl.ram->charged_bytes() : 0;  // the copy's blocks
  return out;
}

}  // namespace siesta
