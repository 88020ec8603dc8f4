// The body of GET /metrics: Prometheus text exposition format 0.0.4, from the same snapshot
// /v1/status is built from (status_json.h), so the two never disagree and the text is
// unit-testable without a server.
//
// Metrics (all names prefixed siesta_; each family with # HELP and # TYPE lines):
//   gauges    cache_state{state="..."} (1 for the current state, 0 for the five others),
//             cache_disk_bytes, cache_released_vram_bytes, cache_released_host_bytes,
//             cache_tokens, engine_busy, backend_committed_bytes
//   counters  cache_saves_total, cache_restores_total, cache_restore_hits_total,
//             cache_fallbacks_total{reason="..."} (one series per fallback_reason_name()),
//             cache_expirations_total, cache_write_failures_total,
//             cache_cancelled_saves_total, cache_out_of_memory_retries_total,
//             cache_delete_failures_total, engine_commands_total
//   histograms cache_save_duration_seconds, cache_restore_duration_seconds:
//             _bucket{le="..."} per DurationHistogram bound, then le="+Inf", _sum, _count
//   with more than one conversation kept (StatusSnapshot::sessions set), also: gauges
//             sessions{state="..."} (conversations per state), engine_queue_length; counters
//             session_evictions_total, session_forgotten_total, engine_queue_refused_total;
//             histogram engine_queue_wait_seconds
// Every series is present from the first scrape on (a counter that has not moved is 0), so
// rate() and absent() behave from start-up.
#pragma once

#include <string>

#include "server/status_json.h"

namespace siesta::server {

// The media type to send the body with.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// The /metrics body for `snapshot`, ending in a newline. Thread rule: pure.
std::string metrics_text(const StatusSnapshot& snapshot);

}  // namespace siesta::server
