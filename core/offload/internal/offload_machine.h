// The Offloader's state machine as data: the phases a session goes through (each one of the
// seven states /v1/status names, plus the step it is at), the events that move it, the one table
// of legal transitions, and, per phase, what the phase allows: where the memory is, what an
// arriving command does, what a due timer does, and what offload_now(), save_ahead(), evict()
// and forget() do. The Offloader looks its decisions up here and carries them out with one
// switch each; no rule about a phase is written anywhere else. docs/ARCHITECTURE.md draws the
// same tables; a test reads both and checks that they agree, pair by pair and phase by phase.
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
  kRam,              // the snapshot is in the RAM tier and the memory released
  kSpilling,         // the RAM tier's copy is being written to disk to make room (the copy stays)
  kSpillCancelling,  // a command arrived during a spill; it waits while the spill stops
  kRestoring,        // a command maps the memory back and reads the snapshot
  kRestoringRam,     // a command maps the memory back and copies the RAM tier's snapshot in
  kRestoringFresh,   // a command maps the memory back after expiry (no history to read)
  kExpiring,         // expired; the snapshot's file is being deleted (or its deletion retried)
  kExpired,          // expired; the file is gone; the memory stays released
  kLost,             // the memory could not be mapped back: every command fails
};
inline constexpr size_t kPhaseCount = 21;

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
  kReleasedToRam,       // as kReleased, for a snapshot held in the RAM tier
  kReleaseFailed,       // releasing failed before anything was given back
  kExpiryDue,           // the expiry deadline passed, or a failed deletion is tried again
  kSnapshotDeleted,     // the expired snapshot's file is gone
  kRestored,            // the memory is back, with its history or with the history discarded
  kRestoreOutOfMemory,  // the memory cannot be committed now; the snapshot is kept
  kMemoryLost,          // committing failed otherwise: the session's addresses may be gone
  kSpillDue,            // the RAM tier needs room: the copy goes to disk
  kSpilled,             // the spilled file is durable; the RAM copy is given back
  kSpillFailed,         // the spill failed or was stopped for the tier; the copy stays in RAM
  kSpillCancelled,      // a spill stopped for an arriving command has ended; its file is gone
};
inline constexpr size_t kEventCount = 20;

// Where the session's memory is.
enum class Memory : uint8_t {
  kCommitted,  // on the device (or in host memory), usable
  kReleasing,  // being given back by a save's release
  kReleased,   // given back (a restore maps it again first)
};
inline constexpr size_t kMemoryCount = 3;

// What acquire() does when a command arrives in the phase.
enum class OnCommand : uint8_t {
  kRun,                    // command_arrives; the command runs on the committed memory
  kRunOverSavedFile,       // as kRun; the file written ahead no longer holds the memory the command
                           // changes: it is retired, unless it stays as the base of a delta
  kWaitForRelease,         // wait until the release ends (never half-released memory), look again
  kCancelSaveAndWait,      // command_arrives raises the writer's cancel flag; wait while it reads
  kCancelSaveAndRun,       // command_arrives; every byte is read: run while the save ends alone
  kCancelSpillAndRestore,  // command_arrives stops the spill; wait until it ends, then restore
                           // from the RAM copy (never from a file the spill left half written)
  kRestore,                // command_arrives; map the memory back and read the snapshot
  kStartFresh,             // command_arrives; map the memory back, nothing to read (expired)
  kRefuseBusy,             // a command holds the session: FailedPrecondition
  kRefuseLost,             // the memory could not be mapped back: DeviceError
};
inline constexpr size_t kOnCommandCount = 10;

// What a timer does in the phase (each action only once its deadline is due).
enum class OnTimer : uint8_t {
  kNothing,      // nothing is due here: a command, a save or a restore arms what comes next
  kSave,         // save_due at the idle deadline (or at once, ahead, when save_ahead() asked)
  kRelease,      // save_due at the idle deadline: the file written ahead holds the memory
  kExpire,       // expiry_due at the expiry deadline: the snapshot is deleted
  kRetryDelete,  // expiry_due: the expired snapshot's deletion, once more
};
inline constexpr size_t kOnTimerCount = 5;

// What offload_now(), save_ahead(), evict() and forget() do in the phase.
enum class OnRequest : uint8_t {
  kRefuseDisabled,  // offload is off: FailedPrecondition
  kRefuseBusy,      // a command holds the session: FailedPrecondition
  kRefuseLost,      // the memory was lost: FailedPrecondition
  kNothing,         // nothing to do here: success
  kWaitForSave,     // a save runs on the executor: wait until it ends, look again
  kSave,            // offload_now(), save_ahead(): post a save; evict(): save and release now
  kRelease,         // evict(): release only (save_due; the file written ahead holds the memory)
  kDelete,          // forget(): expiry_due, then delete the snapshot
  kRetryDelete,     // forget(): delete the expired snapshot, whose deletion failed before
};
inline constexpr size_t kOnRequestCount = 9;

// Everything a phase decides.
struct PhaseRules {
  std::string_view name;
  OffloadState state;  // what /v1/status calls it
  Memory memory;
  OnCommand command;
  OnTimer timer;
  OnRequest offload_now;
  OnRequest save_ahead;
  OnRequest evict;
  OnRequest forget;
  bool save_running;  // a save is in progress on the executor (the destructor waits for it)
  bool cancels_save;  // the writer's cancel flag is raised
};

struct Transition {
  Phase from;
  Event event;
  Phase to;
};

// Every legal transition, once. A (phase, event) pair not listed is illegal.
std::span<const Transition> transitions();

// The phase `event` leads to from `from`; nullopt when the table does not allow it.
std::optional<Phase> next_phase(Phase from, Event event);

// The phase's rules (one row of the phase table).
const PhaseRules& rules(Phase phase);

// "save_reading", "command_arrives", "cancel_save_and_wait": the names the tables in
// docs/ARCHITECTURE.md use.
std::string_view phase_name(Phase phase);
std::string_view event_name(Event event);
std::string_view memory_name(Memory memory);
std::string_view on_command_name(OnCommand action);
std::string_view on_timer_name(OnTimer action);
std::string_view on_request_name(OnRequest action);

// What /v1/status calls the phase.
inline OffloadState state_of(Phase phase) { return rules(phase).state; }
// A command holds the session (from acquire() until its lease is given back).
inline bool holds_command(Phase phase) { return rules(phase).command == OnCommand::kRefuseBusy; }
// A save is in progress on the executor (the destructor waits for it to end).
inline bool save_running(Phase phase) { return rules(phase).save_running; }
// The running save must stop: the writer's cancel flag is raised in these phases.
inline bool cancels_save(Phase phase) { return rules(phase).cancels_save; }

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
