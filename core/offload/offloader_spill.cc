// The RAM tier's spill (offloader.cc holds the admission and the commands, offloader_save.cc
// the save): when another session's save needs room in the tier, the tier asks its least
// recently used tenants to move their copies to disk. A spill writes the copy as a whole save
// would (segment 0, sealed, synced, owned, a fresh generation), then gives the block back; the
// session is in the `disk` state from then on, exactly as if its save had gone to disk.
//
// The copy stays in RAM until the file is durable, so the session is restorable from one place
// at every step: from RAM until `spilled`, from disk after it. A command arriving meanwhile
// stops the spill (its cancel flag), waits until it has ended and its file is gone, and restores
// from RAM.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/offload/offloader.h"
#include "core/offload/ram_snapshot.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

using offload::Event;
using offload::Phase;

Status Offloader::Impl::spill(const std::atomic<bool>* requester_cancel) {
  if (!begin_task()) return Cancelled("the offloader is closing");
  Status outcome = run_spill(requester_cancel);
  end_task();
  return outcome;
}

Status Offloader::Impl::run_spill(const std::atomic<bool>* requester_cancel) {
  const Clock::Duration start = deps.clock.now();
  std::shared_ptr<RamSnapshot> copy;
  int64_t expiry_unix = 0;
  uint64_t tokens = 0;
  {
    MutexLock lock(mu);
    if (ram == nullptr) return NotFound("no copy in the RAM tier");
    // Only a copy at rest is spilled (the table has spill_due from `ram` alone): one being
    // restored or spilled already is another's.
    if (!offload::next_phase(phase(), Event::kSpillDue)) {
      return FailedPrecondition("the RAM copy is in use");
    }
    apply(Event::kSpillDue);
    copy = ram;
    tokens = ram_tokens;
    expiry_unix = last_activity_unix + options.config.expire_seconds;
  }

  SnapshotWriteOptions write;
  write.path = segment_paths[0];
  write.mode = options.config.encrypt ? snapshot::SnapshotMode::kSessionEncrypted
                                      : snapshot::SnapshotMode::kSessionDigest;
  write.fingerprint = deps.target.fingerprint();
  write.expiry_unix = expiry_unix;
  write.chunk_bytes = options.chunk_bytes;
  write.generation = deps.key->next_generation();
  write.owner = options.session;
  write.cancel = &cancel_save;           // this session's command, or closing
  write.cancel_also = requester_cancel;  // the save that needs the room was cancelled
  // The writer's own record buffers, not the session's pool: a spill runs on another session's
  // thread, and the pool is owned by this session's save and restoring phases.
  SnapshotWriter writer(deps.fs, deps.clock, *deps.key, /*backend=*/nullptr);  // host regions
  const Result<SnapshotWriteResult> written = writer.write(write, ram_regions(*copy));
  const Clock::Duration written_at = deps.clock.now();

  MutexLock lock(mu);
  if (phase() == Phase::kSpilling && written.ok()) {
    chain.assign(1, Segment{write.generation, written->file_bytes, copy->payload_bytes, tokens});
    // The file holds the history as the copy did: a delta may build on it after a restore.
    unchanged_tokens = tokens;
    report_chain();
    std::shared_ptr<RamSnapshot> dropped = std::move(ram);  // given back below, unlocked
    st.ram_bytes = 0;
    apply(Event::kSpilled);
    ++st.counters.ram_spills;
    log("offload: spilled " + std::to_string(written->file_bytes) + " bytes from RAM to disk in " +
        std::to_string(static_cast<int64_t>(milliseconds(written_at - start))) +
        " ms to make room in the RAM tier; state disk");
    arm_timer_at(expiry_due());  // a timer that came during the spill did nothing
    lock.unlock();
    dropped.reset();
    deps.ram_tier->delist(this);
    flush_log();
    return Status::Ok();
  }

  // Stopped or failed: the copy stays in RAM and the session where it was. A file the writer
  // completed (a command came after its last cancel check) or put in place before failing
  // (its directory sync) is no snapshot of this session: removed. The store's remove also
  // clears what the writer's own clean-up could not.
  const bool command_waits = phase() == Phase::kSpillCancelling;
  const bool stopped = !written.ok() && written.status().code() == StatusCode::kCancelled;
  lock.unlock();
  if (!stopped) (void)remove_files("spilled");
  lock.lock();
  if (command_waits) {
    apply(Event::kSpillCancelled);  // the command restores from RAM now
    return Cancelled("the spill was stopped: a command arrived");
  }
  apply(Event::kSpillFailed);
  arm_timer_at(expiry_due());
  if (stopped) return written.status();  // the requester was cancelled, or closing
  ++st.counters.write_failures;
  st.last_error = written.status().to_string();
  log_change("spill", written.status(),
             "spilling the RAM copy to disk failed (copy kept in RAM): " + st.last_error);
  return written.status();
}

}  // namespace siesta
