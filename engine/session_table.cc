#include "engine/session_table.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/snapshot/chunk_sealer.h"

namespace siesta::engine {

SessionKey session_key_of(std::string_view key) {
  SessionKey out{};
  Result<snapshot::HeaderDigest> digest =
      sha256(std::span(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
  // SHA-256 of bytes in memory fails only if OpenSSL cannot allocate; the key then maps to
  // the all-zero digest, which no other key can reach on purpose either.
  if (digest.ok()) std::memcpy(out.data(), digest->data(), std::min(out.size(), digest->size()));
  return out;
}

SessionRoute route_by_key(std::string_view key) {
  SessionRoute route;
  route.key = session_key_of(key);
  return route;
}

SessionRoute route_by_slot(uint32_t slot) {
  SessionRoute route;
  route.slot = slot;
  return route;
}

SessionRoute operator_route_to_slot(uint32_t slot) {
  SessionRoute route = route_by_slot(slot);
  route.operator_tool = true;
  return route;
}

SessionTable::SessionTable(SessionTableOptions options)
    : options_{std::clamp<uint32_t>(options.max_sessions, 1, kMaxSessions),
               std::clamp(options.match, 0.0, 1.0)} {
  MutexLock lock(mu_);
  slots_.resize(options_.max_sessions);
}

void SessionTable::take_locked(RouteChoice& choice, Clock::Duration now) {
  Slot& slot = slots_[choice.id];
  if (slot.busy) {
    choice.wait = true;  // its command ends first; nothing is taken
    return;
  }
  choice.create = !slot.used;
  slot.used = true;
  slot.busy = true;
  slot.last_use = now;
  ++slot.commands;
  ++counters_.routed[static_cast<size_t>(choice.rule)];
}

namespace {
// A fresh conversation is needed and every one runs a command: the command waits for one.
RouteChoice every_one_busy() {
  RouteChoice choice;
  choice.wait = true;
  return choice;
}
}  // namespace

std::optional<RouteChoice> SessionTable::fresh_locked(Clock::Duration) {
  RouteChoice choice;
  choice.rule = RouteRule::kFresh;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& slot = slots_[id];
    if (slot.used && !slot.busy && !slot.key && slot.history.empty()) {
      choice.id = id;
      return choice;
    }
  }
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    if (!slots_[id].used) {
      choice.id = id;
      return choice;
    }
  }
  std::optional<uint32_t> victim;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& slot = slots_[id];
    if (slot.busy) continue;
    if (!victim || slot.last_use < slots_[*victim].last_use) victim = id;
  }
  if (!victim) return std::nullopt;
  Slot& slot = slots_[*victim];
  slot.key.reset();
  slot.history.clear();
  ++counters_.forgotten;
  choice.id = *victim;
  choice.forget = true;
  return choice;
}

Result<RouteChoice> SessionTable::route(const SessionRoute& route, std::span<const uint8_t> prompt,
                                        Clock::Duration now) {
  MutexLock lock(mu_);
  RouteChoice choice;
  if (route.key) {
    for (uint32_t id = 0; id < slots_.size(); ++id) {
      if (slots_[id].used && slots_[id].key == route.key) {
        choice.id = id;
        choice.rule = RouteRule::kKey;
        take_locked(choice, now);
        return choice;
      }
    }
    std::optional<RouteChoice> fresh = fresh_locked(now);
    if (!fresh) return every_one_busy();
    choice = *fresh;
    choice.rule = RouteRule::kKey;  // a new key: a fresh conversation, opened by that key
    slots_[choice.id].key = route.key;
    take_locked(choice, now);
    return choice;
  }
  if (route.slot) {
    if (*route.slot >= slots_.size()) {
      return InvalidArgument("id_slot " + std::to_string(*route.slot) +
                             " is out of range: this server keeps " +
                             std::to_string(slots_.size()) + " conversations (0.." +
                             std::to_string(slots_.size() - 1) + ")");
    }
    if (slots_[*route.slot].key && !route.operator_tool) {
      return FailedPrecondition("id_slot " + std::to_string(*route.slot) +
                                " holds a conversation opened with a prompt_cache_key: only "
                                "that key continues it");
    }
    choice.id = *route.slot;
    choice.rule = RouteRule::kSlot;
    take_locked(choice, now);
    return choice;
  }
  if (slots_.size() == 1 && !slots_[0].key) {
    choice.id = 0;
    choice.rule = RouteRule::kSingle;
    take_locked(choice, now);
    return choice;
  }
  std::optional<uint32_t> best;
  size_t best_shared = 0;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& slot = slots_[id];
    if (!slot.used || slot.key || slot.history.empty()) continue;
    const size_t n = std::min(slot.history.size(), prompt.size());
    const size_t shared = static_cast<size_t>(
        std::mismatch(slot.history.begin(), slot.history.begin() + static_cast<ptrdiff_t>(n),
                      prompt.begin())
            .first -
        slot.history.begin());
    if (static_cast<double>(shared) < options_.match * static_cast<double>(slot.history.size())) {
      continue;
    }
    if (!best || shared > best_shared ||
        (shared == best_shared && slot.last_use > slots_[*best].last_use)) {
      best = id;
      best_shared = shared;
    }
  }
  if (best) {
    choice.id = *best;
    choice.rule = RouteRule::kPrefix;
    take_locked(choice, now);
    return choice;
  }
  std::optional<RouteChoice> fresh = fresh_locked(now);
  if (!fresh) return every_one_busy();
  choice = *fresh;
  take_locked(choice, now);
  return choice;
}

Result<RouteChoice> SessionTable::find(const SessionRoute& route, Clock::Duration now) {
  MutexLock lock(mu_);
  RouteChoice choice;
  if (route.key) {
    for (uint32_t id = 0; id < slots_.size(); ++id) {
      if (slots_[id].used && slots_[id].key == route.key) {
        choice.id = id;
        choice.rule = RouteRule::kKey;
        take_locked(choice, now);
        return choice;
      }
    }
    return NotFound("no conversation was opened with this prompt_cache_key");
  }
  if (!route.slot) {
    return InvalidArgument("a conversation is named by a prompt_cache_key or a slot");
  }
  if (*route.slot >= slots_.size()) {
    return InvalidArgument("id_slot " + std::to_string(*route.slot) +
                           " is out of range: this server keeps " + std::to_string(slots_.size()) +
                           " conversations (0.." + std::to_string(slots_.size() - 1) + ")");
  }
  const Slot& slot = slots_[*route.slot];
  if (!slot.used) {
    return NotFound("id_slot " + std::to_string(*route.slot) + " holds no conversation");
  }
  if (slot.key && !route.operator_tool) {
    return FailedPrecondition("id_slot " + std::to_string(*route.slot) +
                              " holds a conversation opened with a prompt_cache_key: only "
                              "that key reaches it");
  }
  choice.id = *route.slot;
  choice.rule = RouteRule::kSlot;
  take_locked(choice, now);
  return choice;
}

void SessionTable::forget(uint32_t id) {
  MutexLock lock(mu_);
  if (id >= slots_.size()) return;
  slots_[id].key.reset();
  slots_[id].history.clear();
}

void SessionTable::end(uint32_t id, std::optional<std::span<const uint8_t>> history,
                       Clock::Duration now) {
  MutexLock lock(mu_);
  if (id >= slots_.size()) return;
  Slot& slot = slots_[id];
  slot.busy = false;
  slot.last_use = now;
  if (history) slot.history.assign(history->begin(), history->end());
}

void SessionTable::clear_history(uint32_t id) {
  MutexLock lock(mu_);
  if (id < slots_.size()) slots_[id].history.clear();
}

std::optional<uint32_t> SessionTable::least_recent_idle(
    const std::function<bool(uint32_t)>& eligible) const {
  MutexLock lock(mu_);
  std::optional<uint32_t> victim;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& slot = slots_[id];
    if (slot.busy || !eligible(id)) continue;
    const Clock::Duration last_use = slot.used ? slot.last_use : Clock::Duration::min();
    const Clock::Duration victim_use = !victim                ? Clock::Duration::max()
                                       : slots_[*victim].used ? slots_[*victim].last_use
                                                              : Clock::Duration::min();
    if (!victim || last_use < victim_use) victim = id;
  }
  return victim;
}

std::optional<ConversationRoute> SessionTable::kept(uint32_t id) const {
  MutexLock lock(mu_);
  if (id >= slots_.size() || !slots_[id].used) return std::nullopt;
  return ConversationRoute{id, slots_[id].key, slots_[id].history};
}

Status SessionTable::adopt(const ConversationRoute& route, Clock::Duration last_use) {
  MutexLock lock(mu_);
  if (route.slot >= slots_.size()) {
    return InvalidArgument("conversation " + std::to_string(route.slot) +
                           " is out of range: this server keeps " + std::to_string(slots_.size()) +
                           " conversations");
  }
  Slot& slot = slots_[route.slot];
  if (slot.used && (slot.key || !slot.history.empty() || slot.busy)) {
    return FailedPrecondition("conversation " + std::to_string(route.slot) +
                              " holds a conversation already");
  }
  if (route.key) {
    for (const Slot& other : slots_) {
      if (other.used && other.key == route.key) {
        return FailedPrecondition("another conversation was opened with this key");
      }
    }
  }
  slot.used = true;
  slot.key = route.key;
  slot.history = route.history;
  slot.last_use = last_use;
  return Status::Ok();
}

std::vector<TableEntry> SessionTable::entries() const {
  MutexLock lock(mu_);
  std::vector<TableEntry> out;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& slot = slots_[id];
    if (!slot.used) continue;
    out.push_back(
        {id, slot.history.size(), slot.busy, slot.key.has_value(), slot.commands, slot.last_use});
  }
  return out;
}

uint32_t SessionTable::conversations() const {
  MutexLock lock(mu_);
  uint32_t used = 0;
  for (const Slot& slot : slots_) used += slot.used ? 1 : 0;
  return used;
}

TableCounters SessionTable::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

}  // namespace siesta::engine
