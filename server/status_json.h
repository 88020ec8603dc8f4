// The body of GET /v1/status, built from a plain snapshot of numbers so that its shape is
// unit-testable without a server, a backend or a clock.
//
// Shape (every key always present, from the first request on; ANCHORS.md notes that the
// seed only reported `cache` once the first save had begun, which left clients guessing):
//   {"server":  {"version": str, "uptime_seconds": int},
//    "backend": {"name": str, "granularity": int, "reserved_bytes": int,
//                "committed_bytes": int, "device_total_bytes": int, "device_free_bytes": int},
//    "cache":   {"state": str, "idle_seconds": int, "expire_seconds": int, "disk_bytes": int,
//                "released_vram_bytes": int, "released_host_bytes": int, "tokens": int,
//                "operation_ms": number}}
// `state` is one of offload_state_name()'s names.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/memory_backend.h"
#include "core/offload_config.h"
#include "core/offload_state.h"

namespace siesta::server {

// What the offloader reports about the session's cache. Until the engine exists the server
// reports the initial state; the Offloader will fill the same struct.
struct CacheStatus {
  OffloadState state = OffloadState::kDisabled;
  int64_t idle_seconds = 0;
  int64_t expire_seconds = 0;
  uint64_t disk_bytes = 0;           // size of the snapshot file on disk, 0 when none
  uint64_t released_vram_bytes = 0;  // device memory released by the last offload
  uint64_t released_host_bytes = 0;  // host checkpoint memory released by the last offload
  uint64_t tokens = 0;               // tokens held by the session's cache
  double operation_ms = 0;           // duration of the last save or restore
};

// The cache status of a session nothing has happened to yet: "disabled" when offload is off,
// else "resident", with the configured times.
CacheStatus initial_cache_status(const OffloadConfig& config);

struct StatusSnapshot {
  std::string version;
  int64_t uptime_seconds = 0;
  std::string backend_name;
  uint64_t granularity = 0;
  MemoryStats memory;
  CacheStatus cache;
};

// The /v1/status body for `snapshot`. Never throws (only builds objects from numbers and
// strings). Thread rule: pure.
nlohmann::json status_json(const StatusSnapshot& snapshot);

}  // namespace siesta::server
