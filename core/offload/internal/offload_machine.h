// The Offloader's state machine as data: the phases a session goes through (each one of the
// six states /v1/status names, plus the step it is at), the events that move it, and the one
// table of legal transitions. docs/ARCHITECTURE.md draws the same table; a test reads both and
// checks that they agree for every (phase, event) pair.
//
// Why phases and not the six states alone: a state does not say who may touch the memory. A
// save reads it, then finishes its file, then releases the memory, and a command that arrives
// must do something different at each of those steps (wait one chunk, run at once, wait for
// the release and restore). Each such step is a phase, so that the rules are the table's and
// not a set of flags kept consistent by comments.
//
// Not phases, because they are not the session's: the Offloader's own lifetime (closing:
// the destructor stops saves and timers) and the count of its executor tasks in progress.
//
// Thread rule: pure data and functions; OffloadMachine is not synchronised (the Offloader
// holds it under its mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/offload/offload_state.h"

namespace siesta::offload {

enum class Phase : uint8_t {
  kDisabled,         // offload is off; no command
  kDisabledCommand,  // offload is off; a command holds the lease
  kResident,         // the memory is on the device; no command; the idle timer runs
  kCommand,          // the memory is on the device; a command holds the lease
  kSaveReading,      // the writer reads the session's memory
  kSaveCancelling,   // a command arrived; it waits while the writer stops reading (one chunk)
  kSaveFinishing,    // every byte is read; the file is being made durable
  kSaveReleasing,    // the file is durable; the memory is being released
  kSaved,            // written ahead: the file is durable and the memory kept; no command
  kCommandSaveTail,  // a command runs while its cancelled save ends (abandons or removes the file)
  kSaveTail,         // no command; a cancelled save still ends
  kDisk,             // the snapshot is durable and the memory released
  kRestoring,        // a command maps the memory back and reads the snapshot
  kRestoringFresh,   // a command maps the memory back after expiry (no history to read)
  kExpiring,         // expired; the snapshot's file is being deleted (or its deletion retried)
  kExpired,          // expired; the file is gone; the memory stays released
  kLost,             // the memory could not be mapped back: every command fails
};
inline constexpr size_t kPhaseCount = 17;

enum class Event : uint8_t {
  kCommandArrives,      // acquire()
  kCommandEnds,         // the lease is given back
  kSaveDue,             // the idle deadline, an offload request or a retry is due
  kMemoryRead,          // the writer reads no more of the session's memory
  kFileDurable,         // the snapshot is synced, renamed and its directory synced
  kFileKept,            // as kFileDurable, for a save that keeps the memory (save_ahead())
  kSaveFailed,          // the write failed; the memory is kept
  kSaveCancelled,       // a cancelled save has ended; its file is gone
  kReleased,            // the memory is given back (all of it, or part: the file holds all)
  kReleaseFailed,       // releasing failed before anything was given back
  kExpiryDue,           // the expiry deadline passed, or a failed deletion is tried again
  kSnapshotDeleted,     // the expired snapshot's file is gone
  kRestored,            // the memory is back, with its history or with the history discarded
  kRestoreOutOfMemory,  // the memory cannot be committed now; the snapshot is kept
  kMemoryLost,          // committing failed otherwise: the session's addresses may be gone
};
inline constexpr size_t kEventCount = 15;

struct Transition {
  Phase from;
  Event event;
  Phase to;
};

// Every legal transition, once. A (phase, event) pair not listed is illegal.
std::span<const Transition> transitions();

// The phase `event` leads to from `from`; nullopt when the table does not allow it.
std::optional<Phase> next_phase(Phase from, Event event);

// "save_reading", "command_arrives": the names the table in docs/ARCHITECTURE.md uses.
std::string_view phase_name(Phase phase);
std::string_view event_name(Event event);

// What /v1/status calls the phase.
OffloadState state_of(Phase phase);
// A command holds the session (from acquire() until its lease is given back).
bool holds_command(Phase phase);
// A save is in progress on the executor (the destructor waits for it to end).
bool save_running(Phase phase);
// The running save must stop: the writer's cancel flag is raised in these phases.
bool cancels_save(Phase phase);

// The phase of one Offloader. Thread rule: none (the owner synchronises).
class OffloadMachine {
 public:
  explicit OffloadMachine(Phase start) : phase_(start) {}

  Phase phase() const { return phase_; }

  // Moves to next_phase(phase(), event) and returns true. An illegal event is a bug in the
  // Offloader: debug builds abort with the phase and event named; release builds keep the
  // phase, set *rejected to a line that names both, and return false.
  bool apply(Event event, std::string* rejected);

 private:
  Phase phase_;
};

}  // namespace siesta::offload
