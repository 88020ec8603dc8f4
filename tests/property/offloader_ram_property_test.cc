// Model-based property test of the Offloader with a RAM tier (core/offload/ram_tier.h):
// RapidCheck generates sequences of commands (some cutting the history back), time steps,
// operator offloads, writes ahead, evictions, forgets, and the tier's pages refused or given
// again (the system running out of memory for it), against a tier whose budget is drawn at
// random: roomy, or too small for the session once its history grows.
//
// Invariants after every step:
//   - a command runs on memory holding exactly the bytes the model predicts (verify()), and the
//     history is kept whenever it was not expired or forgotten: no step of the tier loses it;
//   - the session's snapshot is in exactly one place that can restore it: state ram has a copy
//     in the tier (its bytes are what the tier holds) and no file; state disk has files and
//     no copy; released states commit nothing; resident holds a copy only when written ahead
//     or, with deltas on, kept as the base of the next delta (a delta save then adds a
//     segment to it, and the next restore applies them all);
//   - the tier never holds more than its budget, and holds nothing once the session is
//     resident again with deltas off, expired or forgotten (one session: the tier's bytes are
//     its copy's).
//
// Case count and seed: RC_PARAMS (ctest sets max_success=300); both are printed at start-up.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "core/offload/offloader.h"
#include "core/offload/ram_tier.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

enum RamKind : int {
  kRamCommand,      // arg % 8 positions added; a quarter first cut the history back
  kRamPass,         // time passes and due timers run
  kRamOffloadNow,   // an operator's offload, run at once
  kRamSaveAhead,    // save_ahead(), its write run at once
  kRamEvict,        // evict(): save (or release what was written ahead) on this thread
  kRamForget,       // forget(): a released session's snapshot goes; resident: its history
  kRamRefusePages,  // arg odd: the tier's pages are refused from now on; even: given again
  kRamKindCount
};

const char* ram_kind_name(int kind) {
  static const char* const names[] = {"command", "pass",   "offload_now", "save_ahead",
                                      "evict",   "forget", "refuse_pages"};
  return names[kind];
}

constexpr uint32_t kRamPositions = 64;

struct RamRig {
  OffloaderFixture& f;
  bool deltas = false;  // delta saves on: a restored or written-ahead copy stays as a base
  uint32_t length = 0;  // the history the model predicts
};

OffloadStatus ram_status(const RamRig& r) { return r.f.offloader_->status(); }

void check_ram_invariants(const RamRig& r) {
  const OffloaderFixture& f = r.f;
  const OffloadStatus s = ram_status(r);
  const RamTierStats tier = f.ram_tier_->stats();
  RC_ASSERT(tier.used_bytes <= tier.budget_bytes);
  RC_ASSERT(tier.used_bytes == s.ram_bytes);  // one session: the tier holds its copy or nothing
  switch (s.state) {
    case OffloadState::kRam:
      RC_ASSERT(s.ram_bytes > 0u);
      RC_ASSERT(s.snapshot_segments == 0u);
      RC_ASSERT(!f.snapshot_exists());
      break;
    case OffloadState::kDisk:
      RC_ASSERT(s.ram_bytes == 0u);
      RC_ASSERT(s.snapshot_segments > 0u);
      RC_ASSERT(f.snapshot_exists());
      break;
    case OffloadState::kExpired:
      RC_ASSERT(s.ram_bytes == 0u);
      RC_ASSERT(s.snapshot_segments == 0u);
      break;
    default:
      // Resident: a copy in the tier only when it was written ahead (no file beside it).
      if (s.ram_bytes > 0) RC_ASSERT(s.snapshot_segments == 0u);
      break;
  }
  if (s.state == OffloadState::kRam || s.state == OffloadState::kDisk ||
      s.state == OffloadState::kExpired) {
    RC_ASSERT(f.sim_->stats().committed_bytes == 0u);
    RC_ASSERT(f.host_.stats().committed_bytes == 0u);
  }
}

void run_ram_command(RamRig& r, uint32_t positions, std::optional<uint32_t> rewind_to) {
  OffloaderFixture& f = r.f;
  const OffloadStatus before = ram_status(r);
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  RC_ASSERT(lease.ok());
  if (before.state == OffloadState::kExpired) {
    RC_ASSERT(lease->admission().fresh_after_expiry);
    r.length = 0;
  } else if (before.state == OffloadState::kRam || before.state == OffloadState::kDisk) {
    // Nothing damages a snapshot here: every restore is a hit, from wherever it was.
    RC_ASSERT(lease->admission().restored);
  }
  RC_ASSERT(f.target_->length() == r.length);
  RC_ASSERT(f.target_->verify().empty());
  // The device holds it: the copy went back, unless it stays as the next delta's base.
  const bool copy_kept =
      r.deltas && (before.state == OffloadState::kRam || before.state == OffloadState::kResident);
  RC_ASSERT(ram_status(r).ram_bytes == (copy_kept ? before.ram_bytes : 0u));
  if (rewind_to) {
    f.target_->rewind(*rewind_to);
    r.length = std::min(r.length, *rewind_to);
  }
  f.target_->advance(positions);
  r.length = std::min(kRamPositions, r.length + positions);
  RC_ASSERT(f.target_->verify().empty());
  lease->release();
}

RC_GTEST_PROP(OffloaderRamProperty, TheSnapshotIsInExactlyOnePlaceAndNoHistoryIsLost, ()) {
  // Roomy, or a few pages: the fake target's snapshot grows past it as positions are added.
  const auto budget = *rc::gen::element<uint64_t>(uint64_t{16} << 20, 8 * 4096, 24 * 4096);
  const auto delta_segments = *rc::gen::element<uint32_t>(0u, kDefaultDeltaSegments);
  const auto steps = *rc::gen::container<std::vector<std::tuple<int, int>>>(
      rc::gen::tuple(rc::gen::weightedElement<int>({{5, kRamCommand},
                                                    {4, kRamPass},
                                                    {1, kRamOffloadNow},
                                                    {2, kRamSaveAhead},
                                                    {2, kRamEvict},
                                                    {1, kRamForget},
                                                    {1, kRamRefusePages}}),
                     rc::gen::inRange(0, 1000)));
  test_util::OffloaderSetup setup;
  setup.positions = kRamPositions;
  setup.max_delta_segments = delta_segments;
  setup.ram_tier_bytes = budget;
  OffloaderFixture f(setup);
  RamRig r{f, delta_segments > 0};
  RC_LOG() << "budget " << budget << ", delta segments " << delta_segments << "\n";
  for (const auto& [kind, arg] : steps) {
    RC_LOG() << ram_kind_name(kind) << " " << arg << " (state " << offload_state_name(f.state())
             << ", ram " << ram_status(r).ram_bytes << ")\n";
    switch (kind) {
      case kRamCommand: {
        std::optional<uint32_t> rewind_to;
        if ((arg / 8) % 4 == 0) rewind_to = static_cast<uint32_t>(arg / 32) % (r.length + 1);
        run_ram_command(r, static_cast<uint32_t>(arg % 8), rewind_to);
        break;
      }
      case kRamPass: {
        static const int64_t choices[] = {1, OffloaderFixture::kIdle, OffloaderFixture::kExpire};
        f.pass(choices[arg % 3]);
        break;
      }
      case kRamOffloadNow:
        (void)f.offloader_->offload_now();
        f.executor_.run_due();
        break;
      case kRamSaveAhead:
        f.executor_.run_due();
        RC_ASSERT(f.offloader_->save_ahead().ok());
        f.executor_.run_due();
        break;
      case kRamEvict: RC_ASSERT(f.offloader_->evict().ok()); break;
      case kRamForget: {
        const OffloadState before = f.state();
        RC_ASSERT(f.offloader_->forget().ok());
        if (before != OffloadState::kResident) {
          RC_ASSERT(f.state() == OffloadState::kExpired);
        } else {
          // A resident session: the caller discards the history under a lease.
          Result<Offloader::Lease> lease = f.offloader_->acquire();
          RC_ASSERT(lease.ok());
          RC_ASSERT(f.target_->discard_history().ok());
          r.length = 0;
        }
        break;
      }
      case kRamRefusePages: f.ram_pages_->refuse = arg % 2 == 1; break;
      default: break;
    }
    check_ram_invariants(r);
  }
  const OffloadStatus s = ram_status(r);
  RC_TAG(s.counters.ram_saves > 0 ? "saved to RAM" : "never in RAM");
  RC_TAG(s.counters.ram_full > 0 ? "RAM full or refused" : "RAM always had room");
  RC_TAG(s.counters.ram_restores > 0 ? "restored from RAM" : "never restored from RAM");
  RC_ASSERT(f.fatal_.empty());
}

}  // namespace
}  // namespace siesta
