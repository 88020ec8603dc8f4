#include "engine/session_pool.h"

#include <string>
#include <utility>

namespace siesta::engine {

Result<std::unique_ptr<SessionPool>> SessionPool::create(Deps deps, EngineOffload offload,
                                                         uint32_t max_sessions, uint32_t parallel,
                                                         RouteSource route_of) {
  std::unique_ptr<SessionPool> pool(
      new SessionPool(deps, std::move(offload), parallel, std::move(route_of)));
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<Slot> first, pool->make_slot(0));
  MutexLock lock(pool->mu_);
  pool->slots_.resize(max_sessions);
  pool->slots_[0] = std::move(first);
  return pool;
}

SessionPool::SessionPool(Deps deps, EngineOffload offload, uint32_t parallel, RouteSource route_of)
    : deps_(deps),
      offload_(std::move(offload)),
      parallel_(parallel),
      route_of_(std::move(route_of)) {}

std::string SessionPool::store_name(uint32_t id) { return std::to_string(id); }

SessionPool::~SessionPool() {
  MutexLock lock(mu_);
  slots_.clear();  // each Slot destroys its Offloader before its Session
}

Result<std::unique_ptr<SessionPool::Slot>> SessionPool::make_slot(uint32_t id) const {
  auto slot = std::make_unique<Slot>();
  SIESTA_ASSIGN_OR_RETURN(slot->session,
                          Session::create(deps_.model, deps_.backend, deps_.kernels, deps_.host));
  // Always an Offloader: with offload off it reports "disabled" and admits every command at
  // once, so that there is one way to be disabled (offload_enabled()).
  OffloaderOptions options = offload_.options;
  options.session = store_name(id);
  if (offload_.persist && route_of_) {
    options.route = [route_of = route_of_, id] { return route_of(id); };
  }
  SIESTA_ASSIGN_OR_RETURN(
      slot->offloader,
      Offloader::create({*slot->session, deps_.backend, deps_.host, deps_.fs, deps_.clock,
                         offload_.executor, offload_.store, offload_.key, offload_.ram_tier,
                         offload_.disk_budget, &record_buffers_, &cold_reads_},
                        std::move(options)));
  return slot;
}

SessionPool::Slot* SessionPool::slot(uint32_t id) const {
  MutexLock lock(mu_);
  return id < slots_.size() ? slots_[id].get() : nullptr;
}

Session& SessionPool::session(uint32_t id) const { return *slot(id)->session; }
Offloader& SessionPool::offloader(uint32_t id) const { return *slot(id)->offloader; }

bool SessionPool::holds_memory(uint32_t id) const {
  const Slot* made = slot(id);
  return made != nullptr && made->offloader->status().memory_committed;
}

Status SessionPool::make_room(uint32_t id, const SessionTable& table) {
  const uint32_t numbers = [&] {
    MutexLock lock(mu_);
    return static_cast<uint32_t>(slots_.size());
  }();
  for (;;) {
    uint32_t committed = 0;
    for (uint32_t other = 0; other < numbers; ++other) {
      if (other != id && holds_memory(other)) ++committed;
    }
    if (committed < parallel_) return Status::Ok();
    std::optional<uint32_t> victim =
        table.least_recent_idle([&](uint32_t other) { return other != id && holds_memory(other); });
    if (!victim) {
      return Unavailable("all " + std::to_string(parallel_) +
                         " sessions on the device are busy; retry later");
    }
    Status evicted = offloader(*victim).evict();
    if (!evicted.ok()) {
      return Unavailable("no device room for this conversation now: offloading session " +
                         std::to_string(*victim) + " failed: " + evicted.to_string());
    }
    evictions_.fetch_add(1);
  }
}

Status SessionPool::prepare(const RouteChoice& choice, const SessionTable& table) {
  const uint32_t id = choice.id;
  if (slot(id) == nullptr) {
    SIESTA_RETURN_IF_ERROR(make_room(id, table));
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<Slot> made, make_slot(id));
    MutexLock lock(mu_);
    slots_[id] = std::move(made);
    return Status::Ok();
  }
  if (choice.forget) {
    // A snapshot on disk is deleted now; a resident history is discarded under the lease. A
    // failed deletion is retried by the offloader, and the next restore is fresh anyway.
    (void)offloader(id).forget();
  }
  if (!holds_memory(id)) SIESTA_RETURN_IF_ERROR(make_room(id, table));
  return Status::Ok();
}

Status SessionPool::adopt(uint32_t id, const std::vector<Offloader::AdoptedSegment>& segments,
                          int64_t expiry_unix) {
  if (Slot* made = slot(id)) return made->offloader->adopt(segments, expiry_unix);
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<Slot> made, make_slot(id));
  SIESTA_RETURN_IF_ERROR(made->offloader->adopt(segments, expiry_unix));
  MutexLock lock(mu_);
  slots_[id] = std::move(made);
  return Status::Ok();
}

Status SessionPool::forget(uint32_t id) {
  Slot* made = slot(id);
  if (made == nullptr) return Status::Ok();
  Offloader& offloader = *made->offloader;
  // Released: its snapshot is deleted (expired), so its next acquire maps fresh memory.
  // Resident (or offload off): nothing happens here, the history is discarded below.
  Status forgot = offloader.forget();
  if (!forgot.ok() && forgot.code() == StatusCode::kFailedPrecondition) return forgot;
  if (!offloader.status().memory_committed) return Status::Ok();
  SIESTA_ASSIGN_OR_RETURN(Offloader::Lease lease, offloader.acquire());
  Session& session = *made->session;
  Status discarded = session.history_tokens() != 0 ? session.discard_history() : Status::Ok();
  lease.release();
  return discarded;
}

ExitSaveReport SessionPool::save_for_exit(const std::vector<uint32_t>& order) {
  const Clock::Duration start = deps_.clock.now();
  const Clock::Duration deadline = start + offload_.exit_save_limit;
  std::vector<uint32_t> ids = order;
  {
    MutexLock lock(mu_);
    std::vector<bool> listed(slots_.size(), false);
    for (uint32_t id : order) {
      if (id < listed.size()) listed[id] = true;
    }
    for (uint32_t id = 0; id < slots_.size(); ++id) {
      if (!listed[id] && slots_[id] != nullptr) ids.push_back(id);
    }
  }
  ExitSaveReport report;
  for (uint32_t id : ids) {
    Slot* made = slot(id);
    if (made == nullptr) continue;
    Offloader& offloader = *made->offloader;
    const OffloadStatus before = offloader.status();
    const bool resident_history = before.memory_committed && made->session->history_tokens() != 0;
    if (!resident_history && before.state != OffloadState::kRam) {
      if (before.state == OffloadState::kDisk) ++report.kept;
      continue;  // nothing to keep, or on disk already
    }
    if (deps_.clock.now() >= deadline) {
      ++report.lost;
      continue;
    }
    Status saved = resident_history ? offloader.evict() : Status::Ok();
    if (saved.ok()) saved = offloader.spill_to_disk();
    if (saved.ok() && offloader.status().state == OffloadState::kDisk) {
      ++report.saved;
    } else {
      ++report.lost;
    }
  }
  report.seconds = std::chrono::duration<double>(deps_.clock.now() - start).count();
  if (offload_.options.log) {
    offload_.options.log("exit: " + std::to_string(report.saved) + " conversations saved in " +
                         std::to_string(report.seconds) + " s, " + std::to_string(report.kept) +
                         " on disk already, " + std::to_string(report.lost) +
                         " not saved (the exit save limit or a failed save)");
  }
  return report;
}

OffloadStatus SessionPool::cache_status(uint32_t last_used) const {
  MutexLock lock(mu_);
  if (slots_.size() == 1) return slots_[0]->offloader->status();
  // The state and times of the conversation used last (or the first), the totals of all.
  uint32_t shown = last_used < slots_.size() && slots_[last_used] != nullptr ? last_used : 0;
  OffloadStatus total = slots_[shown]->offloader->status();
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    if (id != shown && slots_[id] != nullptr) add_totals(total, slots_[id]->offloader->status());
  }
  return total;
}

std::vector<SessionStatus> SessionPool::sessions(const std::vector<TableEntry>& entries) const {
  MutexLock lock(mu_);
  std::vector<const TableEntry*> entry_of(slots_.size(), nullptr);
  for (const TableEntry& entry : entries) {
    if (entry.id < entry_of.size()) entry_of[entry.id] = &entry;
  }
  std::vector<SessionStatus> out;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    if (slots_[id] == nullptr) continue;
    const OffloadStatus one = slots_[id]->offloader->status();
    SessionStatus s;
    s.id = id;
    s.state = one.state;
    s.tokens = one.tokens;
    s.disk_bytes = one.disk_bytes;
    s.ram_bytes = one.ram_bytes;
    s.seconds_idle = one.seconds_since_activity;
    s.restores = one.counters.restores;
    s.operation_ms = one.operation_ms;
    for (uint64_t n : one.counters.fallbacks) s.fallbacks += n;
    if (const TableEntry* entry = entry_of[id]) {
      s.tokens = entry->history_tokens;
      s.busy = entry->busy;
      s.keyed = entry->keyed;
      s.commands = entry->commands;
    }
    out.push_back(s);
  }
  return out;
}

Status SessionPool::offload_now() {
  std::vector<Offloader*> offloaders;
  {
    MutexLock lock(mu_);
    if (slots_.size() == 1) return slots_[0]->offloader->offload_now();
    for (const std::unique_ptr<Slot>& made : slots_) {
      if (made != nullptr) offloaders.push_back(made->offloader.get());
    }
  }
  if (!offload_.options.config.enabled()) {
    return FailedPrecondition("idle offload is disabled");
  }
  for (Offloader* one : offloaders) one->offload_now().ignore();
  return Status::Ok();
}

}  // namespace siesta::engine
