#include "core/offload/internal/save_outcome.h"

#include <algorithm>

namespace siesta::offload {

SaveOutcome decide_save_outcome(const SaveFacts& facts) {
  SaveOutcome out;
  // A command let in during the save (or the destructor) cancels it: whatever was written no
  // longer holds the memory the command changes.
  if (facts.phase != Phase::kSaveFinishing || facts.closing ||
      facts.written == StatusCode::kCancelled) {
    out.end = SaveOutcome::End::kCancelled;
    out.event = Event::kSaveCancelled;
    if (facts.written == StatusCode::kOk && !facts.to_ram) {
      // Complete but stale. A delta goes alone; a whole save replaced the chain's base.
      out.remove =
          facts.segment > 0 ? SaveOutcome::Remove::kThisDelta : SaveOutcome::Remove::kChain;
    }
    return out;
  }
  if (facts.written != StatusCode::kOk) {
    out.end = SaveOutcome::End::kFailed;
    out.event = Event::kSaveFailed;
    out.backoff = std::min(facts.backoff_max,
                           facts.backoff_initial * (1u << std::min(facts.failures_in_a_row, 20u)));
    // The writer leaves the final name alone on failure, except when only the directory's
    // sync failed after the rename: the file is then at the segment's path, not durable and
    // outside the chain's account. A delta goes alone; a whole file may have replaced the base,
    // and no chain is trusted over a base in doubt (the memory, kept, holds everything).
    if (facts.named && !facts.to_ram) {
      out.remove =
          facts.segment > 0 ? SaveOutcome::Remove::kThisDelta : SaveOutcome::Remove::kChain;
    }
    return out;
  }
  out.end = facts.keep_memory ? SaveOutcome::End::kWrittenAhead : SaveOutcome::End::kDurable;
  out.event = facts.keep_memory ? Event::kFileKept : Event::kFileDurable;
  out.new_chain = facts.segment == 0;
  // In the RAM tier: the copy is the whole snapshot; an earlier chain's files go.
  if (facts.to_ram && facts.chain_segments > 0) out.remove = SaveOutcome::Remove::kChain;
  return out;
}

}  // namespace siesta::offload
