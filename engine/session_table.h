// SessionTable: the conversations an engine keeps (at most max_sessions), and the decisions
// about them, taken under one mutex: which conversation a command belongs to (routing), and
// which idle one gives way when room is needed (least recently used). It is bookkeeping only:
// it owns no Session and no Offloader (the engine does) and never touches device memory, so
// routing never wakes a session.
//
// Per conversation it keeps, in host memory: its token history as of the end of its last
// command (for prefix routing: the Session's own history lives in memory that an offload
// releases), the hash of its prompt_cache_key when it was opened with one (never the key
// itself), whether a command runs on it, when it was last used and how many commands it ran.
//
// Routing, in order (route()):
//   1. a key: the conversation opened with that key; a key not seen yet opens a fresh one;
//   2. a slot number: that conversation (created when it does not exist yet), unless it was
//      opened with a key: then only the key reaches it (FailedPrecondition), except for an
//      operator's route (SessionRoute::operator_tool: the server's /slots, behind its API key);
//   3. with max_sessions 1: the one conversation, whatever its history (the prompt keeps what
//      it shares with it, as a single-session engine does), unless it was opened with a key;
//   4. the keyless conversation whose history shares the longest prefix with the prompt,
//      when that prefix is at least `match` x its history's length (history not empty; ties:
//      the most recently used);
//   5. a fresh conversation: a keyless one with an empty history and no command, else a
//      conversation number not used yet, else the least recently used conversation without a
//      command, forgotten (its history and key dropped here; the engine deletes its snapshot
//      or discards its memory's history).
// So a conversation opened with a key is continued by that key alone: no id_slot, no prefix
// and no single-conversation rule reaches it, and how much of a prompt is reused
// (cached_tokens, the time to the first token) never tells a client whether its guess matches
// another user's keyed history.
//
// Thread rule: every method from any thread; each takes the mutex only to read or change the
// table, and calls nothing outside it while holding it but the `eligible` predicate.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/base/clock.h"
#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "engine/conversation_route.h"

namespace siesta::engine {

// The SHA-256 of a prompt_cache_key: what the table is given instead of the key (the engine
// turns it into an HMAC under the snapshot key when conversations persist).
SessionKey session_key_of(std::string_view key);

// Where a command asks to run; both empty: routed by its prompt.
struct SessionRoute {
  std::optional<SessionKey> key;
  std::optional<uint32_t> slot;
  // The slot is reached by an operator's tool (the server's /slots save, restore and erase),
  // which may reach a conversation opened with a key; a client's id_slot may not.
  bool operator_tool = false;
};

// The route of a prompt_cache_key (hashed here), of a client's slot number (id_slot), and of
// an operator's command on a slot.
SessionRoute route_by_key(std::string_view key);
SessionRoute route_by_slot(uint32_t slot);
SessionRoute operator_route_to_slot(uint32_t slot);

// The share of a kept history a prompt must repeat to continue that conversation, by default
// (--session-match).
inline constexpr double kDefaultSessionMatch = 0.5;

struct SessionTableOptions {
  uint32_t max_sessions = 1;            // 1..kMaxSessions
  double match = kDefaultSessionMatch;  // 0..1: share of a history a prompt must repeat
};

inline constexpr uint32_t kMaxSessions = 4096;

// Why a conversation was chosen (counted, and told to tests).
enum class RouteRule : uint8_t { kKey, kSlot, kSingle, kPrefix, kFresh };

struct RouteChoice {
  uint32_t id = 0;
  RouteRule rule = RouteRule::kFresh;
  bool create = false;  // the conversation number was never used: create its session first
  bool forget = false;  // it held another conversation, forgotten: drop its state first
  // The conversation runs a command now (or, for a fresh one, every conversation does):
  // nothing was taken; route the command again once a command ends.
  bool wait = false;
};

// One conversation, as status reports it (never the key, never the history's bytes).
struct TableEntry {
  uint32_t id = 0;
  uint64_t history_tokens = 0;
  bool busy = false;
  bool keyed = false;
  uint64_t commands = 0;
  Clock::Duration last_use{0};
};

struct TableCounters {
  uint64_t forgotten = 0;   // conversations dropped to make room for a fresh one (at N)
  uint64_t routed[5] = {};  // per RouteRule
};

class SessionTable {
 public:
  // REQUIRES: 1 <= options.max_sessions <= kMaxSessions, 0 <= match <= 1 (else clamped).
  explicit SessionTable(SessionTableOptions options);

  const SessionTableOptions& options() const { return options_; }

  // Chooses the conversation for a command with `prompt` (empty for commands without one)
  // by the rules above and marks it busy, used now. The caller must end() it. When the
  // conversation chosen runs a command already (or a fresh one is needed and every one runs a
  // command), nothing changes and the choice says `wait`: a conversation runs one command at
  // a time, in the order they were routed.
  // Failure (nothing changes): InvalidArgument for a slot >= max_sessions; FailedPrecondition
  // for a client's slot that holds a conversation opened with a key.
  Result<RouteChoice> route(const SessionRoute& route, std::span<const uint8_t> prompt,
                            Clock::Duration now);

  // The conversation `route` names, chosen for a command that needs an existing one
  // (Engine::forget()) and marked busy, used now, as route() does; the caller must end() it.
  // Never creates or forgets a conversation and never routes by prefix. The choice says
  // `wait` when the conversation runs a command (nothing changes).
  // Failure (nothing changes): NotFound when the route names no conversation (a key never
  // seen, or forgotten since; a slot never used); InvalidArgument for a route with neither a
  // key nor a slot, or a slot >= max_sessions; FailedPrecondition for a client's slot that
  // holds a conversation opened with a key (as route()).
  Result<RouteChoice> find(const SessionRoute& route, Clock::Duration now);

  // Forgets conversation `id` (a client asked: Engine::forget()): its history and its key are
  // dropped, so the key opens a fresh conversation next time and the number serves the next
  // fresh one (rule 5). Its busy mark, use count and last use stay (the caller's end() clears
  // busy). Not counted as `forgotten` (that counts those dropped to make room).
  void forget(uint32_t id);

  // The command on `id` ended: its history is now `history` (when known: its memory was
  // resident), it is idle, used now.
  void end(uint32_t id, std::optional<std::span<const uint8_t>> history, Clock::Duration now);

  // Forgets the history kept for `id` (an explicit reset or an unusable snapshot).
  void clear_history(uint32_t id);

  // The least recently used conversation without a command for which `eligible(id)` holds;
  // nullopt when there is none. A number never routed to counts as used longest ago (the pool
  // makes conversation 0's session at start, before any command: the first to give way). `eligible`
  // runs under the table's mutex: it must be quick and must not call the table.
  std::optional<uint32_t> least_recent_idle(const std::function<bool(uint32_t)>& eligible) const;

  // What conversation `id` keeps (its key and history: what its snapshot's route carries);
  // nullopt when the number holds no conversation. Any thread; copies the history.
  std::optional<ConversationRoute> kept(uint32_t id) const;

  // Takes back a conversation a server before a restart kept (conversation adoption, before
  // the first command): `route.slot` holds it, idle, with its key and history, last used at
  // `last_use`. Failure (nothing changes): InvalidArgument for a slot >= max_sessions;
  // FailedPrecondition when the slot holds a conversation already or the key opens another.
  Status adopt(const ConversationRoute& route, Clock::Duration last_use);

  // Every conversation created so far, by number; and how many there are.
  std::vector<TableEntry> entries() const;
  uint32_t conversations() const;
  TableCounters counters() const;

 private:
  struct Slot {
    bool used = false;
    bool busy = false;
    std::optional<SessionKey> key;
    std::vector<uint8_t> history;
    uint64_t commands = 0;
    Clock::Duration last_use{0};
  };
  // Rule 5. REQUIRES: mu_ held.
  std::optional<RouteChoice> fresh_locked(Clock::Duration now) SIESTA_REQUIRES(mu_);
  void take_locked(RouteChoice& choice, Clock::Duration now) SIESTA_REQUIRES(mu_);

  const SessionTableOptions options_;
  mutable Mutex mu_;
  std::vector<Slot> slots_ SIESTA_GUARDED_BY(mu_);
  TableCounters counters_ SIESTA_GUARDED_BY(mu_);
};

}  // namespace siesta::engine
