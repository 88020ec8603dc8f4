// Adoption: a fresh session takes the chain of files a process before a restart wrote under
// the same key, and goes to disk as if its own save had written them: the phase table's save
// path (save due, memory read, file durable, released), without a byte written.
#include <string>
#include <vector>

#include "core/offload/internal/offloader_impl.h"
#include "core/offload/offloader.h"

namespace siesta {

using offload::Event;
using offload::Phase;

Status Offloader::adopt(const std::vector<AdoptedSegment>& segments, int64_t expiry_unix) {
  Impl& impl = *impl_;
  if (segments.empty()) return InvalidArgument("an adopted snapshot has at least one file");
  uint64_t file_bytes = 0;
  for (const AdoptedSegment& segment : segments) file_bytes += segment.file_bytes;
  DiskBudget::Space room;  // the files' room until the chain has it (report_chain below)
  {
    MutexLock lock(impl.mu);
    if (!impl.options.config.enabled()) {
      return FailedPrecondition("offload is off: no snapshot can be adopted");
    }
    if (impl.phase() != Phase::kResident || !impl.chain.empty() || impl.ram != nullptr ||
        impl.deps.target.history_tokens() != 0) {
      return FailedPrecondition("only a fresh session adopts a snapshot");
    }
    // Adoption takes no other conversation's room: those adopted first are the most recent.
    if (impl.deps.disk_budget != nullptr) {
      SIESTA_ASSIGN_OR_RETURN(room, impl.deps.disk_budget->reserve_free(file_bytes));
    }
    impl.apply(Event::kSaveDue);
    impl.apply(Event::kMemoryRead);
    impl.apply(Event::kFileDurable);
  }
  const Impl::ReleaseOutcome released = impl.release_memory();
  MutexLock lock(impl.mu);
  if (!released.failed.ok() && released.released == 0) {
    impl.apply(Event::kReleaseFailed);  // resident again, fresh; the files stay the store's
    return released.failed;
  }
  for (const AdoptedSegment& segment : segments) {
    impl.chain.push_back({segment.generation, segment.file_bytes, segment.payload_bytes,
                          segment.tokens, segment.writer});
  }
  impl.report_chain();
  impl.st.released_vram_bytes = released.device_bytes;
  impl.st.released_host_bytes = released.host_bytes;
  // Last used when the snapshot was last saved: its expiry is the newest file's.
  impl.last_activity_unix = impl.options.config.saved_at_unix(expiry_unix);
  impl.last_activity = impl.deps.clock.at_unix(impl.last_activity_unix);
  impl.apply(Event::kReleased);
  impl.enlist_disk();
  impl.log("offload: adopted a snapshot of " + std::to_string(file_bytes) + " bytes in " +
           std::to_string(segments.size()) + " file(s) from before the restart; state disk");
  impl.arm_timer_at(impl.expiry_due());
  lock.unlock();
  impl.flush_log();
  return Status::Ok();
}

}  // namespace siesta
