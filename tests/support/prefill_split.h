// Shared by the prefill split tests (tests/property/prefill_split_property_test.cc on the
// simulator, tests/gpu/cuda_prefill_test.cc on CUDA): feed a prompt cut into blocks of given
// sizes, and capture everything a split must not change -- every used byte of every kContents
// region (the KV rows, the recurrent state, the history, the checkpoints, session.meta), the
// next token's logits, and a greedy continuation.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "engine/session.h"
#include "tests/support/backend_test_util.h"

namespace siesta::engine::test_util {

// Feeds prompt[from..] in blocks: cuts[i] tokens for block i (cycling through `cuts`), each
// through feed_block() (a block of one is feed(), the decode graph). REQUIRES: every cut >= 1.
inline Status feed_in_blocks(Session& session, std::span<const Token> prompt, size_t from,
                             std::span<const uint32_t> cuts) {
  size_t next_cut = 0;
  for (size_t i = from; i < prompt.size();) {
    const size_t want = std::min<size_t>(cuts[next_cut++ % cuts.size()], prompt.size() - i);
    SIESTA_ASSIGN_OR_RETURN(uint32_t fed, session.feed_block(prompt.subspan(i, want)));
    if (fed != want) {
      return Internal("feed_block fed " + std::to_string(fed) + " of " + std::to_string(want));
    }
    i += fed;
  }
  return Status::Ok();
}

struct SessionBytes {
  std::vector<std::string> names;               // the kContents regions, in snapshot order
  std::vector<std::vector<std::byte>> regions;  // their used bytes
  std::vector<uint32_t> logit_bits;
  std::string continuation;
  friend bool operator==(const SessionBytes&, const SessionBytes&) = default;
};

// The region, if any, where `a` and `b` first differ ("" when equal).
inline std::string first_difference(const SessionBytes& a, const SessionBytes& b) {
  if (a.names != b.names) return "the region lists";
  for (size_t i = 0; i < a.regions.size(); ++i) {
    if (a.regions[i] != b.regions[i]) {
      const long long at = siesta::test_util::first_difference(a.regions[i], b.regions[i]);
      return a.names[i] + " at byte " + std::to_string(at);
    }
  }
  if (a.logit_bits != b.logit_bits) return "the next token's logits";
  if (a.continuation != b.continuation) {
    return "the continuation ('" + a.continuation + "' vs '" + b.continuation + "')";
  }
  return "";
}

// Reads every used extent (after the kernels are done), then the logits and a greedy
// continuation of `tokens` tokens (which feeds them: the session moves on).
inline Result<SessionBytes> capture(Session& session, MemoryBackend& backend, Kernels& kernels,
                                    int tokens) {
  SessionBytes out;
  SIESTA_RETURN_IF_ERROR(kernels.synchronize());
  for (const SnapshotRegion& r : session.snapshot_regions()) {
    if (r.layout.persist != snapshot::PersistKind::kContents) continue;
    std::vector<std::byte> bytes;
    for (const snapshot::Extent& e : r.layout.extents) {
      if (r.place == SnapshotRegion::Place::kDevice) {
        SIESTA_ASSIGN_OR_RETURN(
            std::vector<std::byte> part,
            siesta::test_util::read_device(backend, r.device + e.offset, e.length));
        bytes.insert(bytes.end(), part.begin(), part.end());
      } else {
        bytes.insert(bytes.end(), r.host + e.offset, r.host + e.offset + e.length);
      }
    }
    out.names.push_back(r.layout.name);
    out.regions.push_back(std::move(bytes));
  }
  SIESTA_ASSIGN_OR_RETURN(std::vector<float> logits, session.next_logits());
  out.logit_bits.resize(logits.size());
  std::memcpy(out.logit_bits.data(), logits.data(), logits.size() * sizeof(float));
  for (int i = 0; i < tokens; ++i) {
    SIESTA_ASSIGN_OR_RETURN(Token next, session.greedy_next());
    out.continuation.push_back(static_cast<char>(next));
    SIESTA_RETURN_IF_ERROR(session.feed(next));
  }
  return out;
}

}  // namespace siesta::engine::test_util
