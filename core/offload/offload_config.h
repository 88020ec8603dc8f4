// OffloadConfig: the idle-offload settings and the rules that make a combination valid: the
// durations are integers 0..604800 (one week), the expiry must exceed the idle time, and a
// snapshot directory is required when offload is on.
//
// The rules live here, once, so that every front end (the server's flags, a test building an
// Offloader directly) accepts the same combinations; the Offloader checks its durations with
// validate_offload_times(). Messages say what is wrong in core's words ("the idle time must
// be 0..604800 seconds, got 604801"); a front end that wants to name its own inputs (the
// server names its flags) reads the typed problem from find_offload_config_problem().
//
// Thread rule: none (pure functions, no shared state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/base/status.h"

namespace siesta {

// The largest value any of the offload durations may take: one week, in seconds.
inline constexpr int64_t kMaxOffloadSeconds = 604800;
// How long an offloaded snapshot is kept by default.
inline constexpr int64_t kDefaultExpireSeconds = 3600;
// Delta saves: a base and up to this many deltas by default (the deltas' half-of-a-whole rule
// ends most chains sooner), at most kMaxDeltaSegments.
inline constexpr uint32_t kDefaultDeltaSegments = 8;
inline constexpr uint32_t kMaxDeltaSegments = 64;

// The one rule for whether idle offload is on: an idle time of 0 switches it off. The
// Offloader's "disabled" state, OffloadConfig::enabled() and the server's start-up line all
// come from here.
constexpr bool offload_enabled(int64_t idle_seconds) { return idle_seconds != 0; }

// Every idle-offload setting, once: the server's flags fill it, the stack passes it on, the
// Offloader reads it (OffloaderOptions::config).
struct OffloadConfig {
  // Seconds without a command before the session is offloaded; 0 switches offload off.
  int64_t idle_seconds = 0;
  // Seconds after which an offloaded snapshot is deleted and the session starts afresh.
  int64_t expire_seconds = kDefaultExpireSeconds;
  // Where snapshots are written; required when enabled(). (The Offloader writes through the
  // store it is given, which owns this directory.)
  std::string disk_dir;
  // AES-256-GCM seals under the process key; false: a digest per chunk (--cache-encrypt off).
  bool encrypt = true;
  // Delta saves: up to this many saves after a whole one write only what changed since the
  // save before (0..kMaxDeltaSegments; 0: every save writes the whole session).
  uint32_t delta_segments = kDefaultDeltaSegments;
  // The RAM tier's budget (core/offload/ram_tier.h), shared by every session: released
  // sessions keep their snapshots in host memory up to it, on disk beyond. 0: no tier, every
  // snapshot on disk (the library's default; the server's is default_ram_tier_bytes()).
  uint64_t ram_bytes = 0;
  // The snapshot directory's budget (core/offload/disk_budget.h), shared by every session: the
  // least recently used released conversations' snapshots are deleted to keep within it. 0:
  // no budget (the library's default; the server's is default_disk_budget_bytes()).
  uint64_t disk_max_bytes = 0;

  bool enabled() const { return offload_enabled(idle_seconds); }
  // When a snapshot expiring at `expiry_unix` was saved: the session's last use, as the
  // Offloader counts expiry from it (an adopted conversation's age, after a restart).
  int64_t saved_at_unix(int64_t expiry_unix) const { return expiry_unix - expire_seconds; }
};

// Which rule a configuration breaks, in the order they are checked:
//   kIdleOutOfRange, kExpireOutOfRange: not in 0..kMaxOffloadSeconds (always checked, so a
//     typo is caught even while offload is off);
//   kExpireNotAfterIdle: enabled and expire_seconds <= idle_seconds;
//   kDirectoryMissing: enabled and disk_dir empty.
enum class OffloadConfigRule : uint8_t {
  kIdleOutOfRange,
  kExpireOutOfRange,
  kExpireNotAfterIdle,
  kDirectoryMissing,
};

struct OffloadConfigProblem {
  OffloadConfigRule rule;
  int64_t idle_seconds;
  int64_t expire_seconds;
};

// The first rule `config` breaks; nullopt when it is a combination offload may run with.
// Whether disk_dir exists or is safe to use is the caller's business (it touches the file
// system).
std::optional<OffloadConfigProblem> find_offload_config_problem(const OffloadConfig& config);

// OK, or InvalidArgument in core's words for the first rule broken, e.g.
//   "the expiry (30 s) must be greater than the idle time (60 s)".
Status validate_offload_config(const OffloadConfig& config);

// The duration rules alone (the first three), for a caller without a directory (the
// Offloader, which is given a store instead). Same words as validate_offload_config().
Status validate_offload_times(int64_t idle_seconds, int64_t expire_seconds);

// The message validate_offload_config() gives for `problem`.
std::string offload_config_problem_text(const OffloadConfigProblem& problem);

}  // namespace siesta
