#include "engine/conversation_adoption.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "core/snapshot/snapshot_reader.h"
#include "engine/conversation_route.h"

namespace siesta::engine {
namespace {

// A candidate whose every file authenticated: what adopting it takes.
struct Authentic {
  // A copy: the store's list changes as candidates are adopted.
  SnapshotStore::AdoptionCandidate candidate;
  std::vector<Offloader::AdoptedSegment> segments;
  ConversationRoute route;
  int64_t expiry_unix = 0;
  uint64_t file_bytes = 0;
};

// Counts one refusal by its status code's reason, and logs why.
void count_refusal(const AdoptionDeps& deps, AdoptionReport& report, const Status& why) {
  if (deps.log) deps.log("conversation adoption: refused: " + why.to_string());
  switch (why.code()) {
    case StatusCode::kForeign: ++report.foreign; break;
    case StatusCode::kCorrupt:
    case StatusCode::kTruncated: ++report.unreadable; break;
    case StatusCode::kExpired: ++report.expired; break;
    case StatusCode::kNoSpace: ++report.no_room; break;
    default: ++report.failed; break;
  }
}

uint64_t payload_of(const snapshot::SnapshotHeader& header) {
  uint64_t total = 0;
  for (const snapshot::RegionLayout& region : header.regions) {
    for (const snapshot::Extent& extent : region.extents) total += extent.length;
  }
  return total;
}

// Authenticates every file of `candidate` (the newest one's expiry too) and decodes its route.
// Failure: the reader's outcome for the first file refused; Foreign when a file names another
// owner than its name says, or its route another conversation number.
Result<Authentic> authenticate(const AdoptionDeps& deps, const snapshot::Fingerprint& fingerprint,
                               const SnapshotStore::AdoptionCandidate& candidate) {
  SnapshotReader reader(deps.fs, deps.clock, deps.key, nullptr);
  Authentic out;
  out.candidate = candidate;
  for (size_t i = 0; i < candidate.segment_paths.size(); ++i) {
    const bool newest = i + 1 == candidate.segment_paths.size();
    SnapshotHeaderCheck check;
    check.path = candidate.segment_paths[i];
    check.fingerprint = fingerprint;
    check.any_process = true;  // its header names its writer, which the restore expects
    check.check_expiry = newest;
    SIESTA_ASSIGN_OR_RETURN(SnapshotReadResult read, reader.read_header(check));
    if (read.header.owner != candidate.session) {
      return Foreign("a snapshot's header names another conversation than its file name");
    }
    out.segments.push_back({read.header.generation, read.file_bytes, payload_of(read.header), 0,
                            read.header.process_nonce});
    out.file_bytes += read.file_bytes;
    if (newest) {
      out.expiry_unix = read.header.expiry_unix;
      SIESTA_ASSIGN_OR_RETURN(out.route, decode_route(read.header.route));
    }
  }
  if (SessionPool::store_name(out.route.slot) != candidate.session) {
    return Foreign("a snapshot's route names another conversation than its file name");
  }
  // Each file was written at a length of the history no longer than the newest's.
  for (Offloader::AdoptedSegment& segment : out.segments) segment.tokens = out.route.history.size();
  return out;
}

}  // namespace

AdoptionReport adopt_conversations(const AdoptionDeps& deps) {
  AdoptionReport report;
  // A copy: adopt() takes each candidate off the store's list.
  const std::vector<SnapshotStore::AdoptionCandidate> candidates = deps.store.adoption_candidates();
  report.offered = candidates.size();
  const snapshot::Fingerprint fingerprint = deps.pool.session(0).fingerprint();
  std::vector<Authentic> authentic;
  for (const SnapshotStore::AdoptionCandidate& candidate : candidates) {
    Result<Authentic> checked = authenticate(deps, fingerprint, candidate);
    if (checked.ok()) {
      authentic.push_back(std::move(checked).value());
    } else {
      count_refusal(deps, report, checked.status());
    }
  }
  // The most recently used first: the budget and the numbers go to them.
  std::stable_sort(authentic.begin(), authentic.end(), [](const Authentic& a, const Authentic& b) {
    return a.expiry_unix > b.expiry_unix;
  });
  const uint32_t max_sessions = deps.table.options().max_sessions;
  for (const Authentic& one : authentic) {
    const uint32_t id = one.route.slot;
    if (!one.route.key && one.route.history.empty()) {
      ++report.empty;  // nothing to keep: removed with the rest
      continue;
    }
    if (id >= max_sessions || deps.table.kept(id).has_value()) {
      ++report.no_room;  // fewer conversations kept than before the restart
      continue;
    }
    Status renamed = deps.store.adopt(one.candidate, SessionPool::store_name(id));
    if (!renamed.ok()) {
      count_refusal(deps, report, renamed);
      continue;
    }
    Status adopted = deps.pool.adopt(id, one.segments, one.expiry_unix);
    if (adopted.ok()) {
      // Last used when it was last saved, as the Offloader counts its expiry.
      adopted = deps.table.adopt(
          one.route, deps.clock.at_unix(deps.pool.offload_config().saved_at_unix(one.expiry_unix)));
      if (!adopted.ok()) (void)deps.pool.forget(id);
    }
    if (!adopted.ok()) {
      (void)deps.store.remove(SessionPool::store_name(id));  // renamed: ours to remove
      count_refusal(deps, report, adopted);
      continue;
    }
    ++report.adopted;
    report.adopted_bytes += one.file_bytes;
  }
  Status finished = deps.store.finish_adoption();
  if (!finished.ok() && deps.log) {
    deps.log("conversation adoption: removing what was not adopted: " + finished.to_string() +
             " (tried again at the next start)");
  }
  if (deps.log && report.offered > 0) {
    deps.log("conversation adoption: " + std::to_string(report.adopted) + " of " +
             std::to_string(report.offered) + " kept from before the restart (" +
             std::to_string(report.adopted_bytes) + " bytes), " + std::to_string(report.empty) +
             " empty; refused: " + std::to_string(report.foreign) + " foreign, " +
             std::to_string(report.unreadable) + " unreadable or under another key, " +
             std::to_string(report.expired) + " expired, " + std::to_string(report.no_room) +
             " without room, " + std::to_string(report.failed) + " failed");
  }
  return report;
}

}  // namespace siesta::engine
