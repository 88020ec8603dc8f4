// OffloadTarget: everything the offload logic sees of a session. engine::Session implements it;
// core never learns what a model is.
//
// A session's memory is a fixed set of reservations that never move for the session's life:
// device ranges (MemoryBackend reservations) and host ranges (HostVmm). The Offloader
// releases and re-commits them as whole units, and reads and writes the regions inside them
// with SnapshotWriter / SnapshotReader.
//
// Thread rule: called on the thread that runs the session's commands, never while one runs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

class OffloadTarget {
 public:
  virtual ~OffloadTarget() = default;

  // Every region of the session, in a fixed order, with the extents used so far: a
  // kContents region lists only the bytes the conversation has written (KV rows below the
  // current length...), so a snapshot grows with the conversation, not with the allocated
  // context; kReinit and kDiscard regions list none. Names, sizes, places and addresses never
  // change for the session's life; extents change as the session runs.
  // REQUIRES: the session's memory is committed (extents may be read from it).
  virtual std::vector<SnapshotRegion> snapshot_regions() const = 0;

  // As snapshot_regions(), with only the bytes that can differ from what they were when the
  // history last held `unchanged_tokens` tokens, none of them rewritten since (see
  // take_unchanged_tokens()): restored over a snapshot taken then, these extents give the
  // session as it is now. Rows appended since, and whatever is rewritten whole (the state),
  // are listed; the rows before `unchanged_tokens` are not. Default: snapshot_regions().
  // REQUIRES: as snapshot_regions(); unchanged_tokens <= history_tokens().
  virtual std::vector<SnapshotRegion> snapshot_regions_after(uint64_t unchanged_tokens) const {
    (void)unchanged_tokens;
    return snapshot_regions();
  }

  // The lowest history length since the last call (0 when the session was created, its
  // history discarded or its memory replaced by adopt_restored_state() since), and a new count
  // from the current length: every byte of the history's first that-many tokens is as it was
  // at the last call. The Offloader calls it at the end of each command, to know what a delta
  // save must write, and right after restoring its own snapshot (the memory is then the
  // snapshot's), so that the count starts there. Whatever else replaces the contents (an
  // import, a reset) leaves 0 at the command's end: no delta builds on a snapshot of what was
  // there before. Default 0: nothing is known unchanged, so every save writes the whole
  // session.
  virtual uint64_t take_unchanged_tokens() { return 0; }

  // Marks where the device work the session's commands have queued ends (the Offloader calls
  // it at the end of each command, on the command's thread). Default: no mark.
  virtual void mark_device_work() {}

  // Waits until the work queued up to the last mark has run: the session's own, not what
  // other sessions queued since (a save does not wait for another session's decode). Returns
  // true; false when there is no mark to wait for, and the caller must synchronize the whole
  // device instead (the default). Failure: the device's error.
  // Thread rule: any thread, while no command of the session runs.
  virtual Result<bool> wait_for_marked_work() { return false; }

  // The device ranges to decommit on release and commit again on restore: whole ranges as
  // committed (MemoryBackend's unit of decommit), covering every device region.
  virtual std::vector<DeviceRange> device_memory() const = 0;

  // The host ranges to release and commit again, covering every host region.
  virtual std::vector<HostRange*> host_memory() = 0;

  // Model + configuration + region layout. A snapshot with another fingerprint is Foreign.
  virtual snapshot::Fingerprint fingerprint() const = 0;

  // Tokens of history the session holds (its KV length); kept in ordinary memory, so it may
  // be read while the session's memory is released.
  virtual uint64_t history_tokens() const = 0;

  // After a restore has copied every saved extent back: re-reads the session's own state from
  // the restored regions and checks it (lengths within the context...), then recomputes the
  // kReinit regions. The memory was replaced: the unchanged count is 0 until the caller, if
  // the bytes were its own snapshot's, starts a new one (take_unchanged_tokens()). Failure: Corrupt
  // when the restored state is impossible (the caller then discards the history); DeviceError from
  // the kernels. REQUIRES: memory committed.
  virtual Status adopt_restored_state() = 0;

  // Missing, damaged, foreign or expired snapshot, or an explicit reset: forgets the history
  // (length 0, no checkpoints), clears the kContents regions and recomputes the kReinit
  // ones, so the next prompt is read from the start. Failure: DeviceError from the kernels.
  // REQUIRES: memory committed.
  virtual Status discard_history() = 0;
};

}  // namespace siesta
