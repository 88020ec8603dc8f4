// Conversation adoption: at start, a server with persistence on takes back the conversations a
// stopped server left in the snapshot directory under the same key (SnapshotStore's adoption
// candidates: a dead owner's chains). For each, every file's header is authenticated under the
// key with the writer's nonce and this engine's fingerprint (model, weights, context, KV type,
// layout, kernels' contract, format), the newest one's expiry checked and its route decoded;
// then, the most recently used first, each goes back to its own conversation number (the
// writer's session name, which its files name as their owner) within max_sessions and the disk
// budget: the store renames its files to this process's names, the session adopts them (state
// disk, nothing read), and the table routes to it again (its key's HMAC, its slot, its
// history's prefix). A snapshot of a session that held nothing (no key, no history: saved by
// its idle timer before any command) is not kept. Whatever else is not adopted is refused, counted
// by reason, and removed with its owner's lock (SnapshotStore::finish_adoption()): a directory
// serves one key and one model, and another process's leftovers would otherwise grow outside the
// disk budget.
//
// The tokens a snapshot holds are authenticated with it, and a restored history meets the
// prompt through Session::reuse_prefix(), so only the prefix the request shares is reused.
//
// Thread rule: the engine's start, before the engine thread runs any command.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/base/clock.h"
#include "core/base/file_system.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/session_pool.h"
#include "engine/session_table.h"

namespace siesta::engine {

// What adoption did, for the start-up log and /v1/status (counts only: never a path, another
// user's file names are nobody's business).
struct AdoptionReport {
  uint64_t offered = 0;  // stopped servers' conversations found in the directory
  uint64_t adopted = 0;  // kept again, routable as before
  uint64_t adopted_bytes = 0;
  uint64_t empty = 0;  // held no history and no key (an idle, never used session)
  // Refused, by reason (each counts once):
  uint64_t foreign = 0;     // another model, weights, context, KV type, layout or kernels
  uint64_t unreadable = 0;  // damaged, truncated, or sealed under another key
  uint64_t expired = 0;     // past --cache-expire-seconds
  uint64_t no_room = 0;     // beyond max_sessions or the disk budget
  uint64_t failed = 0;      // an I/O error while reading or renaming
  uint64_t refused() const { return foreign + unreadable + expired + no_room + failed; }
};

struct AdoptionDeps {
  SessionPool& pool;
  SessionTable& table;
  SnapshotStore& store;
  const ProcessKey& key;
  FileSystem& fs;
  const Clock& clock;
  std::function<void(const std::string&)> log;  // one line per refusal reason and a summary
};

// Adopts what the store offers (above), then finishes the store's adoption. Never fails the
// start: a conversation that cannot be adopted is refused and counted; a failure to remove
// what was refused is logged and left for the next start.
AdoptionReport adopt_conversations(const AdoptionDeps& deps);

}  // namespace siesta::engine
