#include "server/status_json.h"

#include <string>

namespace siesta::server {

CacheStatus initial_cache_status(const OffloadConfig& config) {
  CacheStatus cache;
  cache.state = config.enabled() ? OffloadState::kResident : OffloadState::kDisabled;
  cache.idle_seconds = config.idle_seconds;
  cache.expire_seconds = config.expire_seconds;
  return cache;
}

nlohmann::json status_json(const StatusSnapshot& snapshot) {
  const CacheStatus& cache = snapshot.cache;
  const MemoryStats& memory = snapshot.memory;
  return {
      {"server",
       {
           {"version", snapshot.version},
           {"uptime_seconds", snapshot.uptime_seconds},
       }},
      {"backend",
       {
           {"name", snapshot.backend_name},
           {"granularity", snapshot.granularity},
           {"reserved_bytes", memory.reserved_bytes},
           {"committed_bytes", memory.committed_bytes},
           {"device_total_bytes", memory.device_total_bytes},
           {"device_free_bytes", memory.device_free_bytes},
       }},
      {"cache",
       {
           {"state", std::string(offload_state_name(cache.state))},
           {"idle_seconds", cache.idle_seconds},
           {"expire_seconds", cache.expire_seconds},
           {"disk_bytes", cache.disk_bytes},
           {"released_vram_bytes", cache.released_vram_bytes},
           {"released_host_bytes", cache.released_host_bytes},
           {"tokens", cache.tokens},
           {"operation_ms", cache.operation_ms},
       }},
  };
}

}  // namespace siesta::server
