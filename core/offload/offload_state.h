// The states of an idle-offload session, named as /v1/status and /metrics show them. Each is
// one or more phases of the Offloader's state machine (core/offload/internal/offload_machine.h,
// whose table docs/ARCHITECTURE.md draws).
#pragma once

#include <string_view>

namespace siesta {

enum class OffloadState {
  kDisabled,   // the feature is off (an idle time of 0: offload_enabled())
  kResident,   // the session's memory is on the device
  kSaving,     // idle: the snapshot is being written, then the memory released
  kDisk,       // the snapshot is durable and the memory released
  kRam,        // the snapshot is in the RAM tier and the memory released
  kRestoring,  // a command arrived: memory is being committed and read back
  kExpired,    // the snapshot passed its expiry and was deleted
};

constexpr std::string_view offload_state_name(OffloadState state) {
  switch (state) {
    case OffloadState::kDisabled: return "disabled";
    case OffloadState::kResident: return "resident";
    case OffloadState::kSaving: return "saving";
    case OffloadState::kDisk: return "disk";
    case OffloadState::kRam: return "ram";
    case OffloadState::kRestoring: return "restoring";
    case OffloadState::kExpired: return "expired";
  }
  return "unknown";
}

}  // namespace siesta
