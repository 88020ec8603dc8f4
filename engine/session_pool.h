// SessionPool: the sessions of one engine's conversations -- a Session and its Offloader per
// conversation number, created when the number is first routed to and kept for the engine's
// life (its addresses never move) -- and the device budget over them: at most `parallel`
// sessions hold committed memory, and room is made by evicting the least recently used idle
// one (the SessionTable says which). It also makes the totals status reports. The engine keeps
// the command loop; the table keeps the routing; this keeps the memory.
//
// Thread rule: create(), prepare(), session() and offloader() on the engine thread (which alone
// creates sessions); cache_status(), sessions(), offload_now(), evictions() and cold_reads() on
// any thread.
// The slots are guarded by one mutex, held only to read or set a slot's pointers (a slot,
// once made, lives as long as the pool, so a reference taken under it stays valid); never
// across an Offloader's slow calls (evict, forget, acquire).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/file_system.h"
#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offloader.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/cold_read_choice.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/model.h"
#include "engine/session.h"
#include "engine/session_table.h"

namespace siesta::engine {

// Idle offload of the engine's sessions. The store, key and executor must outlive the engine;
// they are needed only when offload is on (options.config.enabled()).
struct EngineOffload {
  OffloaderOptions options;  // idle time 0 (the default): the offloaders report "disabled"
  SnapshotStore* store = nullptr;
  const ProcessKey* key = nullptr;
  Executor* executor = nullptr;
  RamTier* ram_tier = nullptr;        // the RAM tier every session shares; null: none
  DiskBudget* disk_budget = nullptr;  // the snapshot directory's budget; null: none
  // Conversations survive a restart (--cache-persist on): the key is the one of the key file,
  // every snapshot file carries its conversation's route (engine/conversation_route.h), and
  // the engine adopts at start the conversations a stopped server left under that key. Needs
  // offload on, AES seals and a store that keeps dead owners' snapshots.
  bool persist = false;
  // With persist: how long the engine's close may spend saving conversations that are not on
  // disk yet (resident ones, and those whose snapshot is only in the RAM tier); what does not
  // fit is lost, and counted in the close's last log line.
  std::chrono::seconds exit_save_limit{30};
};

// What the close of a persisting engine saved (SessionPool::save_for_exit()).
struct ExitSaveReport {
  uint64_t saved = 0;  // written to disk now (resident, or from the RAM tier)
  uint64_t kept = 0;   // on disk already
  uint64_t lost = 0;   // not saved: the time limit, or a save that failed
  double seconds = 0;
};

// The route a conversation's snapshot files carry (OffloaderOptions::route), by number; asked
// for on the writing thread.
using RouteSource = std::function<std::vector<uint8_t>(uint32_t id)>;

// One conversation, as /v1/status and GET /slots show it: never a prompt or a key.
struct SessionStatus {
  uint32_t id = 0;
  OffloadState state = OffloadState::kDisabled;
  uint64_t tokens = 0;  // history tokens, as kept for routing
  uint64_t disk_bytes = 0;
  uint64_t ram_bytes = 0;  // its snapshot's copy in the RAM tier
  double seconds_idle = 0;
  uint64_t restores = 0;
  uint64_t fallbacks = 0;   // all reasons
  double operation_ms = 0;  // its last save or restore
  bool busy = false;
  bool keyed = false;  // opened with a prompt_cache_key
  uint64_t commands = 0;
};

class SessionPool {
 public:
  struct Deps {
    MemoryBackend& backend;
    HostVmm& host;
    FileSystem& fs;
    const Clock& clock;
    const Model& model;
    Kernels& kernels;
  };

  // A pool of `max_sessions` conversation numbers, at most `parallel` committed at once, with
  // conversation 0's session made now (an engine always has one).
  // Failure: Session::create()'s and Offloader::create()'s errors. `deps` and `offload`'s
  // store, key and executor must outlive the pool.
  // With offload.persist, `route_of` gives each snapshot file its route (it must outlive the
  // pool); otherwise it is not used and may be empty.
  static Result<std::unique_ptr<SessionPool>> create(Deps deps, EngineOffload offload,
                                                     uint32_t max_sessions, uint32_t parallel,
                                                     RouteSource route_of = {});
  // Each Offloader goes before its Session.
  ~SessionPool();
  SessionPool(const SessionPool&) = delete;
  SessionPool& operator=(const SessionPool&) = delete;

  // Before a command on `choice.id`: its session exists, a forgotten conversation's snapshot
  // is deleted (its resident history is the caller's to discard under the lease), and its
  // memory fits in the budget of `parallel` committed sessions, the least recently used idle
  // ones (by `table`) offloaded first.
  // Failure: Unavailable when no room can be made now (every committed session busy, or an
  // eviction's save failed); the errors of creating a session. Engine thread.
  Status prepare(const RouteChoice& choice, const SessionTable& table);

  // Forgets conversation `id`'s memory (Engine::forget()) without restoring it: a snapshot on
  // disk is deleted (Offloader::forget(); a deletion the store refuses is retried by the
  // Offloader, and the next acquire is fresh all the same), and a resident history is
  // discarded under a lease taken for that. Nothing to do for a number whose session was
  // never made. Engine thread, with no lease held on `id`.
  // Failure: a lost session's FailedPrecondition / DeviceError; discard_history()'s errors.
  Status forget(uint32_t id);

  // Makes conversation `id`'s session (when not made yet) the owner of a snapshot a server
  // before a restart left (Offloader::adopt(): state disk, its memory released). Made outside
  // the device budget: it is released at once. A session made here but whose adoption failed
  // is dropped again (slot 0's stays, fresh). Engine thread, before the first command.
  // Failure: making the session's errors; Offloader::adopt()'s.
  Status adopt(uint32_t id, const std::vector<Offloader::AdoptedSegment>& segments,
               int64_t expiry_unix);

  // The offload configuration every conversation's Offloader runs with (its times, seals, tiers).
  const OffloadConfig& offload_config() const { return offload_.options.config; }

  // What the shared pool of save record buffers keeps now, in bytes. Any thread.
  uint64_t record_buffer_bytes() const { return record_buffers_.kept_bytes(); }

  // Puts every conversation's snapshot on disk, those in `order` first (the most recently used
  // first), within offload.exit_save_limit: a resident one with a history is saved and
  // released (evict()), one in the RAM tier spilled (Offloader::spill_to_disk()). Each step
  // is checked against the limit before it starts, so a save under way finishes. Logs one
  // line with the report. Any thread, once no command runs and none will (the engine thread
  // has stopped).
  ExitSaveReport save_for_exit(const std::vector<uint32_t>& order) SIESTA_EXCLUDES(mu_);

  // The session's name in the snapshot store (its files: siesta-<nonce>-<name>.snap).
  static std::string store_name(uint32_t id);

  // Whether conversation `id`'s session was made. Any thread.
  bool made(uint32_t id) const SIESTA_EXCLUDES(mu_) { return slot(id) != nullptr; }

  // REQUIRES: the session was made (prepare() succeeded for `id`). Engine thread.
  Session& session(uint32_t id) const SIESTA_EXCLUDES(mu_);
  Offloader& offloader(uint32_t id) const SIESTA_EXCLUDES(mu_);

  // The offload status of the one conversation (with one), or the totals over all of them
  // with the state and times of `last_used` (add_totals()). Any thread.
  OffloadStatus cache_status(uint32_t last_used) const SIESTA_EXCLUDES(mu_);
  // Every conversation made so far, by number, joined with the table's `entries`. Any thread.
  std::vector<SessionStatus> sessions(const std::vector<TableEntry>& entries) const
      SIESTA_EXCLUDES(mu_);
  // Offloads every idle session now (POST /v1/cache/offload); one running a command is left to
  // its idle timer. With one conversation, that one's answer. Failure: FailedPrecondition when
  // offload is off (or, with one, while it runs a command). Any thread.
  Status offload_now() SIESTA_EXCLUDES(mu_);
  // Sessions offloaded to make room for another.
  uint64_t evictions() const { return evictions_.load(); }
  // What the sessions' cold restores have learned of the disk (ColdReadChoice::stats).
  ColdReadChoice::Stats cold_reads() const { return cold_reads_.stats(); }

 private:
  // One conversation's session and its offloader.
  struct Slot {
    std::unique_ptr<Session> session;
    std::unique_ptr<Offloader> offloader;  // declared after session: destroyed first
  };
  SessionPool(Deps deps, EngineOffload offload, uint32_t parallel, RouteSource route_of);

  Result<std::unique_ptr<Slot>> make_slot(uint32_t id) const;
  // The slot `id`, or null when not made yet.
  Slot* slot(uint32_t id) const SIESTA_EXCLUDES(mu_);
  // The session's memory counts against the budget (committed, or being released).
  bool holds_memory(uint32_t id) const SIESTA_EXCLUDES(mu_);
  Status make_room(uint32_t id, const SessionTable& table) SIESTA_EXCLUDES(mu_);

  const Deps deps_;
  const EngineOffload offload_;
  const uint32_t parallel_;
  const RouteSource route_of_;
  // Every conversation's saves take their chunk record buffers from here: what it keeps is
  // bounded by the saves running at once, not by the conversations kept (each would otherwise
  // keep up to 20 MiB after its first save). Declared before slots_: outlives the Offloaders.
  // Mutable: make_slot() (const) lends it to each Offloader; the pool locks its own state.
  mutable RecordBufferPool record_buffers_;
  // Which way the sessions' snapshot files out of the page cache are read, learned from all
  // their restores. Declared before slots_ and mutable, as record_buffers_ is.
  mutable ColdReadChoice cold_reads_;
  mutable Mutex mu_;
  // By conversation number; null until made. Set only by the engine thread.
  std::vector<std::unique_ptr<Slot>> slots_ SIESTA_GUARDED_BY(mu_);
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace siesta::engine
