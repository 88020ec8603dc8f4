// The body of GET /v1/status, built from a plain snapshot of numbers so that its shape is
// unit-testable without a server, a backend or a clock. /metrics reads the same snapshot
// (metrics_text.h), so the two can never disagree.
//
// Shape (every key always present, from the first request on; the server this grew
// from only reported `cache` once the first save had begun, which left clients guessing):
//   {"server":  {"version": str, "uptime_seconds": int},
//    "backend": {"name": str, "kernels": str, "granularity": int, "reserved_bytes": int,
//                "committed_bytes": int, "device_total_bytes": int, "device_free_bytes": int},
//    "model":   {"name": str, "context": int, "kv_type": str, "layers": int, "dim": int},
//    "engine":  {"busy": bool, "queued": int, "commands_run": int, "history_tokens": int},
//    "cache":   {"state": str, "idle_seconds": int, "expire_seconds": int, "disk_bytes": int,
//                "released_vram_bytes": int, "released_host_bytes": int, "tokens": int,
//                "operation_ms": number, "last_error": str,
//                "counters": {"saves": int, "restores": int, "restore_hits": int,
//                             "fallbacks": {"not_found": int, "truncated": int, ...},
//                             "expirations": int, "write_failures": int,
//                             "cancelled_saves": int, "out_of_memory_retries": int,
//                             "delete_failures": int}}}
// `state` is one of offload_state_name()'s names; `fallbacks` has one key per
// fallback_reason_name(); `last_error` is "" when none.
// With more than one conversation kept (--parallel or --max-sessions above 1) the cache
// fields are totals over them (state, times and last error: of the conversation used last)
// and `cache` gains
//   "sessions": [{"id": int, "state": str, "tokens": int, "disk_bytes": int,
//                 "seconds_idle": number, "restores": int, "fallbacks": int}, ...]
// one entry per conversation created so far -- never a prompt or a key. With one
// conversation the shape is exactly the one above.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compute/kernels.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offloader.h"
#include "engine/engine.h"

namespace siesta::server {

struct ModelSummary {
  std::string name;  // "synthetic:small"
  uint32_t context = 0;
  KvType kv_type = KvType::kF32;
  uint32_t layers = 0;
  uint32_t dim = 0;
};

struct EngineSummary {
  bool busy = false;
  uint64_t queued = 0;
  uint64_t commands_run = 0;
  uint64_t history_tokens = 0;
};

struct StatusSnapshot {
  std::string version;
  int64_t uptime_seconds = 0;
  std::string backend_name;
  std::string kernels_name;
  uint64_t granularity = 0;
  MemoryStats memory;
  ModelSummary model;
  EngineSummary engine;
  OffloadStatus cache;        // Engine::cache_status(): never wakes the session
  uint64_t clients_gone = 0;  // requests whose client left before the answer (cancelled)
  // Engine::sessions() when the server keeps more than one conversation; else empty.
  std::optional<std::vector<engine::SessionStatus>> sessions;
  // The engine's queue and eviction counters (EngineStatus).
  uint64_t refused_busy = 0;
  uint64_t evictions = 0;
  uint64_t forgotten = 0;
  DurationHistogram wait_seconds;
  // Conversations kept across a restart (--cache-persist), and what the start took back.
  bool persist = false;
  engine::AdoptionReport adoption;
  // Which way snapshot files out of the page cache are read, as learned (EngineStatus).
  ColdReadChoice::Stats cold_reads;
  // The RAM tier's budget and use (runtime::EngineStack::ram_tier()); nullopt without a tier.
  std::optional<RamTierStats> ram_tier;
  // The snapshot directory's budget and use (runtime::EngineStack::disk_budget()); nullopt
  // without one.
  std::optional<DiskBudgetStats> disk_budget;
};

// One conversation as /v1/status and GET /slots show it.
nlohmann::json session_json(const engine::SessionStatus& session);

// The /v1/status body for `snapshot`. Throws nothing but std::bad_alloc (only builds objects
// from numbers and strings). Thread rule: pure.
nlohmann::json status_json(const StatusSnapshot& snapshot);

}  // namespace siesta::server
