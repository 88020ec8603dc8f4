// OffloadConfig: the idle-offload settings, as the command line gives them, and the rules
// that make a combination valid (ANCHORS.md, "The seed": integers 0..604800, expiry must
// exceed idle, a directory is required when the feature is on).
//
// The rules live in core rather than in the server so that every front end (flags, a
// config file, tests building an Offloader directly) rejects the same combinations with the
// same words. Messages name the command-line flag because that is where a person fixes it.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace siesta {

// The largest value any of the offload durations may take: one week, in seconds.
inline constexpr int64_t kMaxOffloadSeconds = 604800;

struct OffloadConfig {
  // Seconds without a command before the session is offloaded; 0 switches offload off.
  int64_t idle_seconds = 0;
  // Seconds after which an offloaded snapshot is deleted and the session starts afresh.
  int64_t expire_seconds = 3600;
  // Where snapshots are written; required when enabled().
  std::string disk_dir;

  bool enabled() const { return idle_seconds != 0; }
};

// OK when `config` is a combination the server may run with. Otherwise InvalidArgument whose
// message names the flag and the rule it breaks, e.g.
//   "--cache-expire-seconds (30) must be greater than --cache-idle-seconds (60)".
// Rules, checked in this order:
//   1. idle_seconds and expire_seconds each lie in 0..kMaxOffloadSeconds (always checked,
//      so a typo is caught even while the feature is off);
//   2. when enabled(): expire_seconds > idle_seconds;
//   3. when enabled(): disk_dir is not empty.
// Whether disk_dir exists or is safe to use is the caller's business (it touches the file
// system); this function is pure. Thread rule: none (no shared state).
Status validate_offload_config(const OffloadConfig& config);

}  // namespace siesta
