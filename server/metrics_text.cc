#include "server/metrics_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/offload/offload_state.h"

namespace siesta::server {
namespace {

constexpr OffloadState kStates[] = {
    OffloadState::kDisabled, OffloadState::kResident,  OffloadState::kSaving, OffloadState::kDisk,
    OffloadState::kRam,      OffloadState::kRestoring, OffloadState::kExpired};

// A float as Prometheus parses it: the shortest text that reads back as the same double
// ("0.005", "10", not "0.0050000000000000001" or "1e+01"), and "+Inf"/"-Inf"/"NaN" spelled
// as the format wants.
std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const std::to_chars_result written = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, written.ptr);
}

// The label of one way of reading cold files: way="around_cache".
std::string way_label(ColdReadChoice::Way way) {
  return "way=\"" + std::string(cold_read_way_name(way)) + "\"";
}

class Writer {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    text_.append("# HELP siesta_").append(name).append(" ").append(help).append("\n");
    text_.append("# TYPE siesta_").append(name).append(" ").append(type).append("\n");
  }
  void sample(std::string_view name, std::string_view labels, const std::string& value) {
    text_.append("siesta_").append(name);
    if (!labels.empty()) text_.append("{").append(labels).append("}");
    text_.append(" ").append(value).append("\n");
  }
  void sample(std::string_view name, std::string_view labels, uint64_t value) {
    sample(name, labels, std::to_string(value));
  }
  // A family of one unlabelled series.
  void single(std::string_view name, std::string_view type, std::string_view help, uint64_t value) {
    family(name, type, help);
    sample(name, "", value);
  }
  void histogram(std::string_view name, std::string_view help, const DurationHistogram& h) {
    family(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i < DurationHistogram::kBuckets; ++i) {
      sample(bucket, "le=\"" + number(DurationHistogram::kBoundsSeconds[i]) + "\"",
             h.cumulative[i]);
    }
    sample(bucket, "le=\"+Inf\"", h.count);
    sample(std::string(name) + "_sum", "", number(h.sum_seconds));
    sample(std::string(name) + "_count", "", h.count);
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace

std::string metrics_text(const StatusSnapshot& snapshot) {
  const OffloadStatus& cache = snapshot.cache;
  const OffloadCounters& counters = cache.counters;
  Writer out;

  out.family("cache_state", "gauge", "1 for the session's current idle-offload state, else 0.");
  for (OffloadState state : kStates) {
    out.sample("cache_state", "state=\"" + std::string(offload_state_name(state)) + "\"",
               uint64_t{state == cache.state ? 1u : 0u});
  }
  out.single("cache_disk_bytes", "gauge", "Bytes of the session's snapshot files on disk.",
             cache.disk_bytes);
  out.single("cache_ram_bytes", "gauge",
             "Bytes of host memory the sessions' snapshots hold in the RAM tier.", cache.ram_bytes);
  out.single("cache_released_vram_bytes", "gauge",
             "Device memory the last offload gave back, as the backend reports it.",
             cache.released_vram_bytes);
  out.single("cache_released_host_bytes", "gauge",
             "Host checkpoint memory the last offload gave back.", cache.released_host_bytes);
  out.single("cache_tokens", "gauge", "History tokens held by the session's cache.", cache.tokens);

  out.single("cache_saves_total", "counter", "Snapshots written and memory released.",
             counters.saves);
  out.single("cache_saves_ahead_total", "counter",
             "Snapshots written ahead while the memory stayed (released later without a write).",
             counters.saves_ahead);
  out.single("cache_delta_saves_total", "counter",
             "Saves (of both kinds) that wrote only what changed since the save before.",
             counters.delta_saves);
  out.single("cache_restores_total", "counter", "Restores attempted (hits and fallbacks).",
             counters.restores);
  out.single("cache_restore_hits_total", "counter", "Restores that read the history back.",
             counters.restore_hits);
  out.family("cache_fallbacks_total", "counter",
             "Restores that discarded the history, by the snapshot's problem.");
  for (size_t i = 0; i < kFallbackReasonCount; ++i) {
    out.sample(
        "cache_fallbacks_total",
        "reason=\"" + std::string(fallback_reason_name(static_cast<FallbackReason>(i))) + "\"",
        counters.fallbacks[i]);
  }
  out.single("cache_expirations_total", "counter", "Snapshots deleted at expiry.",
             counters.expirations);
  out.single("cache_write_failures_total", "counter", "Snapshot writes that failed.",
             counters.write_failures);
  out.single("cache_cancelled_saves_total", "counter", "Saves stopped because a request arrived.",
             counters.cancelled_saves);
  out.single("cache_out_of_memory_retries_total", "counter",
             "Restores refused for lack of memory (the request failed; retry later).",
             counters.out_of_memory_retries);
  out.single("cache_delete_failures_total", "counter", "Snapshot files that could not be deleted.",
             counters.delete_failures);
  out.single("cache_ram_saves_total", "counter",
             "Saves (of both kinds) that kept the snapshot in the RAM tier.", counters.ram_saves);
  out.single("cache_ram_restores_total", "counter", "Restores from the RAM tier.",
             counters.ram_restores);
  out.single("cache_cold_restores_total", "counter",
             "Restores from disk that found their file out of the page cache.",
             counters.cold_restores);
  out.single("cache_cold_restores_around_cache_total", "counter",
             "Of the cold restores, those that read the file around the page cache (O_DIRECT).",
             counters.cold_restores_around_cache);
  // What the cold restores learned of the disk, per way: the median rate of its last counted
  // reads (0 before any) and how many it counted.
  const ColdReadChoice::Stats& cold = snapshot.cold_reads;
  out.family("cache_cold_read_bytes_per_second", "gauge",
             "Median rate of the last counted cold reads (16 MiB or more), by way.");
  for (const ColdReadChoice::Way way : ColdReadChoice::kWays) {
    out.sample("cache_cold_read_bytes_per_second", way_label(way),
               number(cold.of(way).bytes_per_second));
  }
  out.family("cache_cold_reads_counted_total", "counter",
             "Cold reads of 16 MiB or more counted toward the choice of way, by way.");
  for (const ColdReadChoice::Way way : ColdReadChoice::kWays) {
    out.sample("cache_cold_reads_counted_total", way_label(way), cold.of(way).reads);
  }
  out.single("cache_ram_full_total", "counter",
             "Saves the RAM tier had no room for, written to disk instead.", counters.ram_full);
  out.single("cache_ram_spills_total", "counter",
             "Snapshots moved from the RAM tier to disk to make room for another.",
             counters.ram_spills);
  if (snapshot.disk_budget) {
    out.single("disk_tier_budget_bytes", "gauge",
               "The snapshot directory's budget (--cache-disk-max-mib).",
               snapshot.disk_budget->budget_bytes);
    out.single("disk_tier_used_bytes", "gauge",
               "Bytes this process's snapshot files hold of the budget (and files being written).",
               snapshot.disk_budget->used_bytes);
    out.single("disk_tier_deleted_for_room_total", "counter",
               "Offloaded conversations whose snapshot was deleted to keep within the budget.",
               snapshot.disk_budget->deleted_for_room);
    out.single("disk_tier_refused_total", "counter",
               "Snapshot writes the budget could not make room for (handled as a full disk).",
               snapshot.disk_budget->refused);
  }
  if (snapshot.ram_tier) {
    out.single("ram_tier_budget_bytes", "gauge", "The RAM tier's budget (--cache-ram-mib).",
               snapshot.ram_tier->budget_bytes);
    out.single("ram_tier_used_bytes", "gauge", "Host memory the RAM tier holds now.",
               snapshot.ram_tier->used_bytes);
    out.single("ram_tier_allocation_failures_total", "counter",
               "RAM tier allocations the system refused (the snapshot went to disk).",
               snapshot.ram_tier->allocation_failures);
    out.single("ram_tier_ready_bytes", "gauge",
               "Of the RAM tier's budget, the bytes ready to hold snapshots now (pinned ahead).",
               snapshot.ram_tier->ready_bytes);
    out.single("ram_tier_spill_failures_total", "counter",
               "Moves of a snapshot from the RAM tier to disk that failed (the copy stayed).",
               snapshot.ram_tier->spill_failures);
    out.single("ram_tier_bases_dropped_total", "counter",
               "Copies kept in the RAM tier as a resident conversation's delta base, given up "
               "to make room.",
               snapshot.ram_tier->bases_dropped);
    out.single("ram_tier_direct_copies", "gauge",
               "1 when the device copies to the RAM tier's blocks directly (pinned), 0 when "
               "through the staging ring.",
               snapshot.ram_tier->direct_copies ? 1 : 0);
  }
  out.histogram("cache_save_duration_seconds", "Duration of snapshot writes, to durable.",
                counters.save_seconds);
  out.histogram("cache_restore_duration_seconds", "Duration of restores, hits and fallbacks.",
                counters.restore_seconds);

  // With several conversations: how many are in each state, evictions, forgotten ones and the
  // wait queue. With one, the families are exactly those of a single-session server.
  if (snapshot.sessions) {
    out.family("sessions", "gauge", "Conversations kept, by idle-offload state.");
    for (OffloadState state : kStates) {
      uint64_t n = 0;
      for (const engine::SessionStatus& session : *snapshot.sessions) n += session.state == state;
      out.sample("sessions", "state=\"" + std::string(offload_state_name(state)) + "\"", n);
    }
    out.single("session_evictions_total", "counter",
               "Sessions offloaded to make room on the device for another conversation.",
               snapshot.evictions);
    out.single("session_forgotten_total", "counter",
               "Conversations forgotten to make room for a new one at --max-sessions.",
               snapshot.forgotten);
    out.single("engine_queue_length", "gauge", "Requests waiting for the engine.",
               snapshot.engine.queued);
    out.single("engine_queue_refused_total", "counter",
               "Requests answered 503 because the wait queue was full.", snapshot.refused_busy);
    out.histogram("engine_queue_wait_seconds", "Time from a request's arrival to its start.",
                  snapshot.wait_seconds);
  }
  out.single("engine_commands_total", "counter", "Engine commands finished, whatever their result.",
             snapshot.engine.commands_run);
  out.single("engine_busy", "gauge", "1 while the engine runs a command.",
             uint64_t{snapshot.engine.busy ? 1u : 0u});
  out.single("http_clients_gone_total", "counter",
             "Requests whose client left before the answer; their generations were cancelled.",
             snapshot.clients_gone);
  out.single("backend_committed_bytes", "gauge",
             "Physical memory the backend has mapped, as it reports it.",
             snapshot.memory.committed_bytes);
  return out.take();
}

}  // namespace siesta::server
