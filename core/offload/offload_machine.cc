#include "core/offload/internal/offload_machine.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace siesta::offload {
namespace {

using P = Phase;
using E = Event;

// The table. docs/ARCHITECTURE.md ("The offloader's state table") lists the same rows in the
// same order; offload_machine_test checks that they agree.
constexpr Transition kTransitions[] = {
    {P::kDisabled, E::kCommandArrives, P::kDisabledCommand},
    {P::kDisabledCommand, E::kCommandEnds, P::kDisabled},

    {P::kResident, E::kCommandArrives, P::kCommand},
    {P::kResident, E::kSaveDue, P::kSaveReading},
    {P::kCommand, E::kCommandEnds, P::kResident},

    {P::kSaveReading, E::kCommandArrives, P::kSaveCancelling},
    {P::kSaveReading, E::kMemoryRead, P::kSaveFinishing},
    {P::kSaveCancelling, E::kMemoryRead, P::kCommandSaveTail},
    {P::kSaveFinishing, E::kCommandArrives, P::kCommandSaveTail},
    {P::kSaveFinishing, E::kFileDurable, P::kSaveReleasing},
    {P::kSaveFinishing, E::kFileKept, P::kSaved},
    {P::kSaveFinishing, E::kSaveFailed, P::kResident},
    // Cancelled without a command: the Offloader is closing.
    {P::kSaveFinishing, E::kSaveCancelled, P::kResident},
    {P::kSaveReleasing, E::kReleased, P::kDisk},
    {P::kSaveReleasing, E::kReleasedToRam, P::kRam},
    {P::kSaveReleasing, E::kReleaseFailed, P::kResident},
    {P::kCommandSaveTail, E::kSaveCancelled, P::kCommand},
    {P::kCommandSaveTail, E::kCommandEnds, P::kSaveTail},
    {P::kSaveTail, E::kSaveCancelled, P::kResident},
    {P::kSaveTail, E::kCommandArrives, P::kCommandSaveTail},
    // Written ahead: a command uses the memory (the file is retired), or the idle deadline or
    // an eviction releases it (the file holds it already).
    {P::kSaved, E::kCommandArrives, P::kCommand},
    {P::kSaved, E::kSaveDue, P::kSaveReleasing},

    {P::kDisk, E::kCommandArrives, P::kRestoring},
    {P::kDisk, E::kExpiryDue, P::kExpiring},
    {P::kRestoring, E::kRestored, P::kCommand},
    {P::kRestoring, E::kRestoreOutOfMemory, P::kDisk},
    {P::kRestoring, E::kMemoryLost, P::kLost},
    // In the RAM tier: as on disk, and an out-of-memory restore leaves the snapshot in RAM.
    {P::kRam, E::kCommandArrives, P::kRestoringRam},
    {P::kRam, E::kExpiryDue, P::kExpiring},
    {P::kRestoringRam, E::kRestored, P::kCommand},
    {P::kRestoringRam, E::kRestoreOutOfMemory, P::kRam},
    {P::kRestoringRam, E::kMemoryLost, P::kLost},
    // The tier needs room: the copy is written to disk as a save would write it. A command
    // arriving meanwhile stops the spill and restores from the copy, which stayed.
    {P::kRam, E::kSpillDue, P::kSpilling},
    {P::kSpilling, E::kSpilled, P::kDisk},
    {P::kSpilling, E::kSpillFailed, P::kRam},
    {P::kSpilling, E::kCommandArrives, P::kSpillCancelling},
    {P::kSpillCancelling, E::kSpillCancelled, P::kRestoringRam},

    {P::kExpiring, E::kSnapshotDeleted, P::kExpired},
    {P::kExpiring, E::kExpiryDue, P::kExpiring},
    {P::kExpiring, E::kCommandArrives, P::kRestoringFresh},
    {P::kExpired, E::kCommandArrives, P::kRestoringFresh},
    {P::kRestoringFresh, E::kRestored, P::kCommand},
    // The file's deletion is tried again: it may not have happened yet.
    {P::kRestoringFresh, E::kRestoreOutOfMemory, P::kExpiring},
    {P::kRestoringFresh, E::kMemoryLost, P::kLost},
};

// The same table, indexed: kNone where the pair is illegal.
constexpr uint8_t kNone = 0xff;
constexpr auto kIndexed = [] {
  std::array<std::array<uint8_t, kEventCount>, kPhaseCount> indexed{};
  for (auto& row : indexed) row.fill(kNone);
  for (const Transition& t : kTransitions) {
    indexed[static_cast<size_t>(t.from)][static_cast<size_t>(t.event)] = static_cast<uint8_t>(t.to);
  }
  return indexed;
}();

using M = Memory;
using C = OnCommand;
using T = OnTimer;
using R = OnRequest;

// The phase table, in Phase order. docs/ARCHITECTURE.md ("The offloader's phases") lists the
// same rows; offload_machine_test checks that they agree. Columns: name, state, memory,
// command, timer, offload_now, save_ahead, evict, forget, save running, cancels the save.
constexpr PhaseRules kRules[] = {
    {"disabled", OffloadState::kDisabled, M::kCommitted, C::kRun, T::kNothing, R::kRefuseDisabled,
     R::kRefuseDisabled, R::kRefuseDisabled, R::kNothing, false, false},
    {"disabled_command", OffloadState::kDisabled, M::kCommitted, C::kRefuseBusy, T::kNothing,
     R::kRefuseDisabled, R::kRefuseDisabled, R::kRefuseDisabled, R::kRefuseBusy, false, false},
    {"resident", OffloadState::kResident, M::kCommitted, C::kRun, T::kSave, R::kSave, R::kSave,
     R::kSave, R::kNothing, false, false},
    {"command", OffloadState::kResident, M::kCommitted, C::kRefuseBusy, T::kNothing, R::kRefuseBusy,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, false, false},
    // offload_now() during a save: noted, so that a save ahead (which keeps the memory) is
    // released as soon as it ends; a save that releases anyway clears the request.
    {"save_reading", OffloadState::kSaving, M::kCommitted, C::kCancelSaveAndWait, T::kNothing,
     R::kSave, R::kNothing, R::kWaitForSave, R::kWaitForSave, true, false},
    {"save_cancelling", OffloadState::kSaving, M::kCommitted, C::kRefuseBusy, T::kNothing,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, true, true},
    {"save_finishing", OffloadState::kSaving, M::kCommitted, C::kCancelSaveAndRun, T::kNothing,
     R::kSave, R::kNothing, R::kWaitForSave, R::kWaitForSave, true, false},
    {"save_releasing", OffloadState::kSaving, M::kReleasing, C::kWaitForRelease, T::kNothing,
     R::kNothing, R::kNothing, R::kWaitForSave, R::kWaitForSave, true, false},
    // Written ahead: the durable file holds the memory; a command uses it (the file retired
    // unless it is the base of a delta), the idle deadline or an eviction releases it.
    {"saved", OffloadState::kResident, M::kCommitted, C::kRunOverSavedFile, T::kRelease, R::kSave,
     R::kNothing, R::kRelease, R::kNothing, false, false},
    {"command_save_tail", OffloadState::kResident, M::kCommitted, C::kRefuseBusy, T::kNothing,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, true, true},
    {"save_tail", OffloadState::kResident, M::kCommitted, C::kCancelSaveAndRun, T::kNothing,
     R::kSave, R::kNothing, R::kWaitForSave, R::kWaitForSave, true, true},
    {"disk", OffloadState::kDisk, M::kReleased, C::kRestore, T::kExpire, R::kNothing, R::kNothing,
     R::kNothing, R::kDelete, false, false},
    // The snapshot is in the RAM tier (the process's memory); the same rules as on disk.
    {"ram", OffloadState::kRam, M::kReleased, C::kRestore, T::kExpire, R::kNothing, R::kNothing,
     R::kNothing, R::kDelete, false, false},
    // Still restorable from RAM while the copy goes to disk; forget() waits for the spill.
    {"spilling", OffloadState::kRam, M::kReleased, C::kCancelSpillAndRestore, T::kNothing,
     R::kNothing, R::kNothing, R::kNothing, R::kWaitForSave, true, false},
    {"spill_cancelling", OffloadState::kRestoring, M::kReleased, C::kRefuseBusy, T::kNothing,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, true, true},
    {"restoring", OffloadState::kRestoring, M::kReleased, C::kRefuseBusy, T::kNothing,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, false, false},
    {"restoring_ram", OffloadState::kRestoring, M::kReleased, C::kRefuseBusy, T::kNothing,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, false, false},
    {"restoring_fresh", OffloadState::kRestoring, M::kReleased, C::kRefuseBusy, T::kNothing,
     R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, R::kRefuseBusy, false, false},
    {"expiring", OffloadState::kExpired, M::kReleased, C::kStartFresh, T::kRetryDelete, R::kNothing,
     R::kNothing, R::kNothing, R::kRetryDelete, false, false},
    {"expired", OffloadState::kExpired, M::kReleased, C::kStartFresh, T::kNothing, R::kNothing,
     R::kNothing, R::kNothing, R::kNothing, false, false},
    // The memory is released and the snapshot is still there; only mapping failed.
    {"lost", OffloadState::kDisk, M::kReleased, C::kRefuseLost, T::kNothing, R::kRefuseLost,
     R::kRefuseLost, R::kRefuseLost, R::kRefuseLost, false, false},
};
static_assert(std::size(kRules) == kPhaseCount, "one row of rules per phase");
static_assert(static_cast<size_t>(Phase::kLost) + 1 == kPhaseCount, "kPhaseCount counts Phase");
static_assert(static_cast<size_t>(Event::kSpillCancelled) + 1 == kEventCount,
              "kEventCount counts Event");
static_assert(static_cast<size_t>(Memory::kReleased) + 1 == kMemoryCount, "kMemoryCount");
static_assert(static_cast<size_t>(OnCommand::kRefuseLost) + 1 == kOnCommandCount,
              "kOnCommandCount");
static_assert(static_cast<size_t>(OnTimer::kRetryDelete) + 1 == kOnTimerCount, "kOnTimerCount");
static_assert(static_cast<size_t>(OnRequest::kRetryDelete) + 1 == kOnRequestCount,
              "kOnRequestCount");

constexpr std::string_view kEventNames[] = {
    "command_arrives", "command_ends", "save_due",         "memory_read",  "file_durable",
    "file_kept",       "save_failed",  "save_cancelled",   "released",     "released_to_ram",
    "release_failed",  "expiry_due",   "snapshot_deleted", "restored",     "restore_out_of_memory",
    "memory_lost",     "spill_due",    "spilled",          "spill_failed", "spill_cancelled",
};
static_assert(std::size(kEventNames) == kEventCount, "one name per event");
constexpr std::string_view kMemoryNames[] = {"committed", "releasing", "released"};
static_assert(std::size(kMemoryNames) == kMemoryCount, "one name per memory");
constexpr std::string_view kOnCommandNames[] = {
    "run",
    "run_over_saved_file",
    "wait_for_release",
    "cancel_save_and_wait",
    "cancel_save_and_run",
    "cancel_spill_and_restore",
    "restore",
    "start_fresh",
    "refuse_busy",
    "refuse_lost",
};
static_assert(std::size(kOnCommandNames) == kOnCommandCount, "one name per command action");
constexpr std::string_view kOnTimerNames[] = {"nothing", "save", "release", "expire",
                                              "retry_delete"};
static_assert(std::size(kOnTimerNames) == kOnTimerCount, "one name per timer action");
constexpr std::string_view kOnRequestNames[] = {
    "refuse_disabled", "refuse_busy", "refuse_lost",  "nothing", "wait_for_save", "save",
    "release",         "delete",      "retry_delete",
};
static_assert(std::size(kOnRequestNames) == kOnRequestCount, "one name per request action");

}  // namespace

std::span<const Transition> transitions() { return kTransitions; }

std::optional<Phase> next_phase(Phase from, Event event) {
  const uint8_t to = kIndexed[static_cast<size_t>(from)][static_cast<size_t>(event)];
  if (to == kNone) return std::nullopt;
  return static_cast<Phase>(to);
}

const PhaseRules& rules(Phase phase) { return kRules[static_cast<size_t>(phase)]; }
std::string_view phase_name(Phase phase) { return rules(phase).name; }
std::string_view event_name(Event event) { return kEventNames[static_cast<size_t>(event)]; }
std::string_view memory_name(Memory memory) { return kMemoryNames[static_cast<size_t>(memory)]; }
std::string_view on_command_name(OnCommand action) {
  return kOnCommandNames[static_cast<size_t>(action)];
}
std::string_view on_timer_name(OnTimer action) {
  return kOnTimerNames[static_cast<size_t>(action)];
}
std::string_view on_request_name(OnRequest action) {
  return kOnRequestNames[static_cast<size_t>(action)];
}

bool OffloadMachine::apply(Event event, std::string* rejected) {
  if (std::optional<Phase> next = next_phase(phase_, event)) {
    phase_ = *next;
    return true;
  }
  // Coverage (a Debug build) cannot count what follows: there it runs only inside the death
  // test's child (offload_machine_test), which aborts before gcov writes its counts; the
  // NDEBUG build's test checks the rejection's message.
  // GCOVR_EXCL_START
  const std::string line = "internal error: offload event " + std::string(event_name(event)) +
                           " is not allowed in phase " + std::string(phase_name(phase_)) +
                           " (state " + std::string(offload_state_name(state_of(phase_))) + ")";
#ifndef NDEBUG
  (void)rejected;  // a debug build aborts instead
  std::fprintf(stderr, "siesta: %s\n", line.c_str());
  std::abort();
  // GCOVR_EXCL_STOP
#else
  if (rejected != nullptr) *rejected = line + "; the phase is kept";
  return false;
#endif
}

}  // namespace siesta::offload
