// The RAM tier's room (offloader.cc holds the admission and the commands, offloader_save.cc
// the save): when another session's save needs room in the tier, the tier asks resident
// sessions for the bases they keep (given up at once: the memory holds every byte), then its
// least recently used tenants to move their copies to disk. A spill writes the copy as its
// saves would have (segment 0 whole, then each delta; sealed, synced, owned, a fresh
// generation each), then gives the blocks back; the session is in the `disk` state from then
// on, exactly as if its saves had gone to disk.
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

Result<RoomHolder::Freed> Offloader::Impl::give_room(const std::atomic<bool>* requester_cancel) {
  {
    MutexLock lock(mu);
    // A resident session's base, while no save of it runs (a save reads or replaces it; a
    // copy written ahead, `saved`, is the one its release will need).
    if (ram != nullptr && (phase() == Phase::kResident || phase() == Phase::kCommand)) {
      std::shared_ptr<const RamCopy> base = std::move(ram);  // given back below, unlocked
      log("offload: gave up the RAM copy kept as the base of the next delta (" +
          std::to_string(base->payload_bytes()) + " bytes) to make room in the RAM tier");
      lock.unlock();
      base.reset();
      deps.ram_tier->delist(this);
      flush_log();
      return Freed::kBaseDropped;
    }
  }
  if (!begin_task()) return Cancelled("the offloader is closing");
  Status outcome = run_spill(requester_cancel, "to make room in the RAM tier");
  end_task();
  if (!outcome.ok()) return outcome;
  return Freed::kMoved;
}

Status Offloader::spill_to_disk() {
  Impl& impl = *impl_;
  {
    MutexLock lock(impl.mu);
    if (impl.ram == nullptr || impl.phase() != Phase::kRam) return Status::Ok();
  }
  if (!impl.begin_task()) return Cancelled("the offloader is closing");
  Status outcome = impl.run_spill(nullptr, "to keep it past this process");
  impl.end_task();
  // A copy that was spilled or restored meanwhile is not in RAM any more: nothing to do.
  return outcome.code() == StatusCode::kNotFound ? Status::Ok() : outcome;
}

Result<uint64_t> Offloader::Impl::write_ram_copy(const RamCopy& copy, int64_t expiry_unix,
                                                 const std::atomic<bool>* requester_cancel,
                                                 std::vector<Segment>& written,
                                                 std::vector<DiskBudget::Space>& claimed) {
  uint64_t file_bytes = 0;
  for (size_t i = 0; i < copy.segments.size(); ++i) {
    const RamCopy::Segment& segment = copy.segments[i];
    SnapshotWriteOptions write =
        write_options(static_cast<uint32_t>(i), expiry_unix, deps.key->next_generation(),
                      claimed.emplace_back(), segment.snapshot->payload_bytes);
    write.cancel_also = requester_cancel;  // the save that needs the room was cancelled
    // Record buffers from the pool the saves use: it locks its own state, so a spill, which
    // runs on another session's thread, may take from it beside a save.
    write.record_buffers = &record_buffers;
    SnapshotWriter writer(deps.fs, deps.clock, *deps.key, /*backend=*/nullptr);  // host regions
    SIESTA_ASSIGN_OR_RETURN(const SnapshotWriteResult result,
                            writer.write(write, ram_regions(*segment.snapshot)));
    written.push_back(Segment{
        write.generation, result.file_bytes, segment.snapshot->payload_bytes, segment.tokens, {}});
    file_bytes += result.file_bytes;
  }
  return file_bytes;
}

Status Offloader::Impl::run_spill(const std::atomic<bool>* requester_cancel, std::string_view why) {
  const Clock::Duration start = deps.clock.now();
  std::shared_ptr<const RamCopy> copy;
  int64_t expiry_unix = 0;
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
    expiry_unix = last_activity_unix + options.config.expire_seconds;
  }

  std::vector<Segment> segments;
  std::vector<DiskBudget::Space> claimed;  // the files' room, until the chain has it
  const Result<uint64_t> written =
      write_ram_copy(*copy, expiry_unix, requester_cancel, segments, claimed);
  const Clock::Duration written_at = deps.clock.now();

  MutexLock lock(mu);
  if (phase() == Phase::kSpilling && written.ok()) {
    chain = std::move(segments);
    // The files hold the history as the copy did: a delta may build on them after a restore.
    unchanged_tokens = copy->tokens();
    report_chain();
    std::shared_ptr<const RamCopy> dropped = std::move(ram);  // given back below, unlocked
    apply(Event::kSpilled);
    enlist_disk();
    ++st.counters.ram_spills;
    log("offload: spilled " + std::to_string(*written) + " bytes from RAM to disk in " +
        std::to_string(static_cast<int64_t>(milliseconds(written_at - start))) + " ms " +
        std::string(why) + "; state disk");
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
  // (A stopped write removed its own temporary file; segments finished before it stay.)
  if (!stopped || !segments.empty()) {
    uint64_t unchained = 0;
    for (const DiskBudget::Space& room : claimed) unchained += room.bytes();
    (void)remove_files("spilled", unchained);
  }
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
