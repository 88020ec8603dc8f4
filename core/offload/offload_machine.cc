#include "core/offload/internal/offload_machine.h"

#include <array>
#include <cstdio>
#include <cstdlib>

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

struct PhaseInfo {
  std::string_view name;
  OffloadState state;
  bool command;  // holds_command
  bool save;     // save_running
  bool cancels;  // cancels_save
};

constexpr PhaseInfo kPhaseInfo[kPhaseCount] = {
    {"disabled", OffloadState::kDisabled, false, false, false},
    {"disabled_command", OffloadState::kDisabled, true, false, false},
    {"resident", OffloadState::kResident, false, false, false},
    {"command", OffloadState::kResident, true, false, false},
    {"save_reading", OffloadState::kSaving, false, true, false},
    {"save_cancelling", OffloadState::kSaving, true, true, true},
    {"save_finishing", OffloadState::kSaving, false, true, false},
    {"save_releasing", OffloadState::kSaving, false, true, false},
    {"saved", OffloadState::kResident, false, false, false},
    {"command_save_tail", OffloadState::kResident, true, true, true},
    {"save_tail", OffloadState::kResident, false, true, true},
    {"disk", OffloadState::kDisk, false, false, false},
    {"restoring", OffloadState::kRestoring, true, false, false},
    {"restoring_fresh", OffloadState::kRestoring, true, false, false},
    {"expiring", OffloadState::kExpired, false, false, false},
    {"expired", OffloadState::kExpired, false, false, false},
    // The memory is released and the snapshot is still there; only mapping failed.
    {"lost", OffloadState::kDisk, false, false, false},
};

constexpr std::string_view kEventNames[kEventCount] = {
    "command_arrives", "command_ends",
    "save_due",        "memory_read",
    "file_durable",    "file_kept",
    "save_failed",     "save_cancelled",
    "released",        "release_failed",
    "expiry_due",      "snapshot_deleted",
    "restored",        "restore_out_of_memory",
    "memory_lost",
};

const PhaseInfo& info(Phase phase) { return kPhaseInfo[static_cast<size_t>(phase)]; }

}  // namespace

std::span<const Transition> transitions() { return kTransitions; }

std::optional<Phase> next_phase(Phase from, Event event) {
  const uint8_t to = kIndexed[static_cast<size_t>(from)][static_cast<size_t>(event)];
  if (to == kNone) return std::nullopt;
  return static_cast<Phase>(to);
}

std::string_view phase_name(Phase phase) { return info(phase).name; }
std::string_view event_name(Event event) { return kEventNames[static_cast<size_t>(event)]; }
OffloadState state_of(Phase phase) { return info(phase).state; }
bool holds_command(Phase phase) { return info(phase).command; }
bool save_running(Phase phase) { return info(phase).save; }
bool cancels_save(Phase phase) { return info(phase).cancels; }

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
  std::fprintf(stderr, "siesta: %s\n", line.c_str());
  std::abort();
  // GCOVR_EXCL_STOP
#else
  if (rejected != nullptr) *rejected = line + "; the phase is kept";
  return false;
#endif
}

}  // namespace siesta::offload
