// What a finished snapshot write means for the session: the second of a save's two steps. The
// first (Offloader::Impl::run_save) waits for the device and writes the file, without the
// Offloader's mutex; this one, a pure function of what the write left, decides the outcome,
// which run_save then applies under the mutex (the phase event, the chain, the counters) and
// carries out after it (the files to remove, the release). Being pure, every case is
// unit-tested alone (tests/unit/save_outcome_test.cc).
//
// Thread rule: pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/offload/internal/offload_machine.h"

namespace siesta::offload {

// What the save knows once the writer has returned.
struct SaveFacts {
  Phase phase = Phase::kSaveFinishing;   // after the writer's last read (kMemoryRead applied)
  bool closing = false;                  // the Offloader's destructor has begun
  StatusCode written = StatusCode::kOk;  // the write's outcome (the device wait's, if it failed)
  // The writer gave its file the final name (SnapshotWriteOptions::on_named): a failure after
  // that (the directory's sync) left the complete file at the segment's path.
  bool named = false;
  uint32_t segment = 0;       // the save's plan: 0 a whole snapshot, k > 0 a delta
  size_t chain_segments = 0;  // files in the chain before this save
  bool keep_memory = false;   // a save ahead (save_ahead()): the memory stays
  // The snapshot was copied into the RAM tier, not written to a file: the chain's files were
  // not touched by it, and once it is complete they are superseded.
  bool to_ram = false;
  uint32_t failures_in_a_row = 0;  // before this save
  Clock::Duration backoff_initial{0};
  Clock::Duration backoff_max{0};
};

struct SaveOutcome {
  enum class End : uint8_t {
    kCancelled,     // a command arrived (or the Offloader closes): the file must not stay
    kFailed,        // the write failed: the memory is kept, retried after `backoff`
    kWrittenAhead,  // durable, the memory kept (save_ahead)
    kDurable,       // durable: the memory is released next
  };
  // (The deltas a new whole snapshot supersedes are removed by the write step, as soon as the
  // new base is durable: before a command can let another save write a delta.)
  enum class Remove : uint8_t {
    kNothing,
    kThisDelta,  // the delta alone (cancelled, or failed once named): the chain below stands
    kChain,      // every segment: a base was replaced (cancelled) or is in doubt (failed)
  };
  End end = End::kFailed;
  Event event = Event::kSaveFailed;  // what the phase is told
  Remove remove = Remove::kNothing;
  bool new_chain = false;      // the chain restarts at this save (a whole snapshot)
  Clock::Duration backoff{0};  // kFailed: until the retry
};

SaveOutcome decide_save_outcome(const SaveFacts& facts);

}  // namespace siesta::offload
