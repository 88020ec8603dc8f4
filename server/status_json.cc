#include "server/status_json.h"

#include <string>

#include "core/offload/offload_state.h"

namespace siesta::server {
namespace {

nlohmann::json counters_json(const OffloadCounters& counters) {
  nlohmann::json fallbacks = nlohmann::json::object();
  for (size_t i = 0; i < kFallbackReasonCount; ++i) {
    fallbacks[std::string(fallback_reason_name(static_cast<FallbackReason>(i)))] =
        counters.fallbacks[i];
  }
  return {
      {"saves", counters.saves},
      {"restores", counters.restores},
      {"restore_hits", counters.restore_hits},
      {"fallbacks", std::move(fallbacks)},
      {"expirations", counters.expirations},
      {"write_failures", counters.write_failures},
      {"cancelled_saves", counters.cancelled_saves},
      {"out_of_memory_retries", counters.out_of_memory_retries},
      {"delete_failures", counters.delete_failures},
      {"ram_saves", counters.ram_saves},
      {"ram_restores", counters.ram_restores},
      {"cold_restores", counters.cold_restores},
      {"cold_restores_around_cache", counters.cold_restores_around_cache},
      {"ram_full", counters.ram_full},
      {"ram_spills", counters.ram_spills},
      {"delta_saves", counters.delta_saves},
      {"disk_drops", counters.disk_drops},
  };
}

}  // namespace

nlohmann::json session_json(const engine::SessionStatus& session) {
  return {
      {"id", session.id},
      {"state", std::string(offload_state_name(session.state))},
      {"tokens", session.tokens},
      {"disk_bytes", session.disk_bytes},
      {"ram_bytes", session.ram_bytes},
      {"seconds_idle", session.seconds_idle},
      {"restores", session.restores},
      {"fallbacks", session.fallbacks},
      {"operation_ms", session.operation_ms},
  };
}

nlohmann::json status_json(const StatusSnapshot& snapshot) {
  const OffloadStatus& cache = snapshot.cache;
  const MemoryStats& memory = snapshot.memory;
  nlohmann::json body = {
      {"server",
       {
           {"version", snapshot.version},
           {"uptime_seconds", snapshot.uptime_seconds},
       }},
      {"backend",
       {
           {"name", snapshot.backend_name},
           {"kernels", snapshot.kernels_name},
           {"granularity", snapshot.granularity},
           {"reserved_bytes", memory.reserved_bytes},
           {"committed_bytes", memory.committed_bytes},
           {"device_total_bytes", memory.device_total_bytes},
           {"device_free_bytes", memory.device_free_bytes},
       }},
      {"model",
       {
           {"name", snapshot.model.name},
           {"context", snapshot.model.context},
           {"kv_type", std::string(kv_type_name(snapshot.model.kv_type))},
           {"layers", snapshot.model.layers},
           {"dim", snapshot.model.dim},
       }},
      {"engine",
       {
           {"busy", snapshot.engine.busy},
           {"queued", snapshot.engine.queued},
           {"commands_run", snapshot.engine.commands_run},
           {"history_tokens", snapshot.engine.history_tokens},
       }},
      {"cache",
       {
           {"state", std::string(offload_state_name(cache.state))},
           {"idle_seconds", cache.idle_seconds},
           {"expire_seconds", cache.expire_seconds},
           {"disk_bytes", cache.disk_bytes},
           {"ram_bytes", cache.ram_bytes},
           {"released_vram_bytes", cache.released_vram_bytes},
           {"released_host_bytes", cache.released_host_bytes},
           {"tokens", cache.tokens},
           {"operation_ms", cache.operation_ms},
           {"counters", counters_json(cache.counters)},
           {"last_error", cache.last_error},
       }},
  };
  // Cold restores: which way a file out of the page cache is read now ("learning" while the
  // two ways take turns), and what each way has measured (GB/s, the median of its last reads;
  // 0 before any) over how many counted reads (of 16 MiB or more).
  const ColdReadChoice::Stats& cold = snapshot.cold_reads;
  nlohmann::json& cold_reads = body["cache"]["cold_reads"];
  cold_reads["way"] = cold.learning ? "learning" : std::string(cold_read_way_name(cold.preferred));
  for (const ColdReadChoice::Way way : ColdReadChoice::kWays) {
    const std::string name(cold_read_way_name(way));
    cold_reads[name + "_gb_s"] = cold.of(way).bytes_per_second / 1e9;
    cold_reads[name + "_reads"] = cold.of(way).reads;
  }
  // The tier: its budget, what its blocks hold (the sessions' ram_bytes summed), the
  // allocations it refused for lack of room or the system refused it, whether the device
  // copies to its blocks directly (pinned) or through the staging ring, how much of the budget
  // is ready to hand out now (pinned ahead in the background), and the copies it moved to disk
  // to make room (and the moves that failed).
  if (snapshot.ram_tier) {
    const RamTierStats& tier = *snapshot.ram_tier;
    body["cache"]["ram_tier"] = {
        {"budget_bytes", tier.budget_bytes},
        {"used_bytes", tier.used_bytes},
        {"snapshots", tier.blocks},
        {"refused_full", tier.refused_full},
        {"allocation_failures", tier.allocation_failures},
        {"direct_copies", tier.direct_copies},
        {"ready_bytes", tier.ready_bytes},
        {"spills", tier.spills},
        {"spill_failures", tier.spill_failures},
        {"bases_dropped", tier.bases_dropped},
    };
  }
  // The snapshot directory's budget: what this process's files hold of it (and the files being
  // written), and the conversations whose snapshots were deleted to keep within it.
  if (snapshot.disk_budget) {
    const DiskBudgetStats& disk = *snapshot.disk_budget;
    body["cache"]["disk_tier"] = {
        {"budget_bytes", disk.budget_bytes},
        {"used_bytes", disk.used_bytes},
        {"deleted_for_room", disk.deleted_for_room},
        {"delete_failures", disk.delete_failures},
        {"refused", disk.refused},
    };
  }
  // Persistence: whether conversations outlive this process, and what its start took back from
  // the one before (counts by reason; never a path or a name: the files were another
  // process's).
  const engine::AdoptionReport& adoption = snapshot.adoption;
  body["cache"]["persistence"] = {
      {"enabled", snapshot.persist},
      {"offered", adoption.offered},
      {"adopted", adoption.adopted},
      {"adopted_bytes", adoption.adopted_bytes},
      {"empty", adoption.empty},
      {"refused",
       {
           {"foreign", adoption.foreign},
           {"unreadable", adoption.unreadable},
           {"expired", adoption.expired},
           {"no_room", adoption.no_room},
           {"failed", adoption.failed},
       }},
  };
  if (snapshot.sessions) {
    nlohmann::json list = nlohmann::json::array();
    for (const engine::SessionStatus& session : *snapshot.sessions) {
      list.push_back(session_json(session));
    }
    body["cache"]["sessions"] = std::move(list);
  }
  return body;
}

}  // namespace siesta::server
