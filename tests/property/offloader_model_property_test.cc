// OffloaderModel-based property test of the Offloader: RapidCheck generates sequences of commands
// (some cutting the history back first, as a diverging prompt does), time steps (with and
// without the timers running), damage to a segment of the snapshot while the session sleeps
// (deleted, truncated, a flipped byte, another session's file), failing writes, the device
// running out of memory, operator offloads, and what the session table does with a session:
// writes ahead (save_ahead), evictions (evict) and forgetting (forget, then the fresh command
// that discards the history). They run against an Offloader over a FakeOffloadTarget and a
// model of what the session must hold, with delta saves at the server's default
// (kDefaultDeltaSegments) in most cases, at one segment, or off (whole saves only).
//
// Invariants after every step:
//   - a command runs on memory holding exactly the bytes the model predicts (verify());
//   - the history is discarded exactly when the snapshot was missing, damaged, foreign or
//     expired (the reason matching: segments are read oldest first, and only the newest
//     one's expiry counts), and kept otherwise;
//   - nothing is committed while the state is disk or expired, and the released bytes are the
//     session's committed bytes, as the backend reports them;
//   - the snapshot's files on disk are exactly the segments its status reports (none once
//     expired), so no file of a discarded, retired or superseded snapshot survives; out of
//     memory leaves the state and the files;
//   - save_ahead writes the snapshot and keeps the memory (or, already written, saved, on
//     disk or expired, does nothing); evict writes and releases, or only releases what was
//     written ahead, or fails with the write's error keeping the memory; forget deletes a
//     snapshot on disk (expired: the next command is fresh) and leaves a resident session to
//     its caller, whose command discards the history and leaves no file; all three refuse
//     while a command holds the session.
//
// Case count and seed: RC_PARAMS (ctest sets max_success=500); both are printed at start-up;
// on failure RapidCheck prints the seed and the shrunk sequence.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "core/offload/offload_config.h"
#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

enum Kind : int {
  kCommand,     // arg % 4 positions added; a quarter first cut the history back; some also
                // try save_ahead, evict and forget while they hold the session
  kPass,        // time passes and due timers run
  kClockOnly,   // time passes, timers do not run (an executor that is late)
  kDamage,      // arg % 4: delete, truncate, flip a byte, another session's file; the segment:
                // (arg / 4) % segments
  kFailWrites,  // arg odd: NoSpace, even: IoError; every write fails until kHeal
  kHeal,
  kDeviceFull,  // arg odd: another process takes the device memory; even: gives it back
  kOffloadNow,
  kSaveAhead,  // due timers run, then save_ahead(); arg odd: its write runs now, even: it stays
               // posted (a command or the next time step comes first)
  kEvict,
  kForget,
  kKindCount
};

const char* kind_name(int kind) {
  static const char* const names[] = {"command",     "pass",  "clock_only",  "damage",
                                      "fail_writes", "heal",  "device_full", "offload_now",
                                      "save_ahead",  "evict", "forget"};
  return names[kind];
}

struct OffloaderModel {
  uint32_t length = 0;
  // What each segment file of the snapshot on disk suffered (cleared once it is read or gone).
  std::map<uint32_t, FallbackReason> damage;
  // Written ahead: the durable snapshot holds the memory, only the release is left.
  bool saved = false;
  uint64_t saves_ahead_seen = 0;          // counters.saves_ahead when last looked at
  std::optional<StatusCode> write_error;  // every write fails with it (kFailWrites)
  bool device_full = false;
};

struct Rig {
  OffloaderFixture& f;
  OffloaderModel model;
  uint32_t max_delta_segments = 0;
};

constexpr uint32_t kPositions = 24;

OffloadStatus status(Rig& r) { return r.f.offloader_->status(); }

void damage_file(Rig& r, int how) {
  OffloaderFixture& f = r.f;
  const uint32_t segments = status(r).snapshot_segments;
  if (f.state() != OffloadState::kDisk || segments == 0) return;
  const auto segment = static_cast<uint32_t>((how / 4) % static_cast<int>(segments));
  const std::string path = f.snapshot_path(segment);
  if (!std::filesystem::exists(path)) return;
  std::optional<FallbackReason> damage;
  if (auto it = r.model.damage.find(segment); it != r.model.damage.end()) damage = it->second;
  RC_LOG() << "  damage segment " << segment << " of " << segments << "\n";
  switch (how % 4) {
    case 0:
      std::filesystem::remove(path);
      damage = FallbackReason::kNotFound;
      break;
    case 1:
      std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
      // Another process's file is refused for its nonce before its length is looked at.
      if (damage != FallbackReason::kForeign) damage = FallbackReason::kTruncated;
      break;
    case 2: {
      // The last byte of the last chunk's seal (the trailer is the file's last 40 bytes): a
      // chunk failing its seal, which the reader finds after the expiry check.
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      const auto at = static_cast<std::streamoff>(std::filesystem::file_size(path) - 41);
      char byte = 0;
      file.seekg(at);
      file.read(&byte, 1);
      byte = static_cast<char>(byte + 1);  // never undone by a later damage of the same byte
      file.seekp(at);
      file.write(&byte, 1);
      if (!damage) damage = FallbackReason::kCorrupt;
      break;
    }
    default: {
      test_util::OffloaderSetup other_setup;
      other_setup.positions = kPositions + 8;  // another layout
      OffloaderFixture other(other_setup);
      RC_ASSERT(other.command(3).ok());
      other.pass(OffloaderFixture::kIdle);
      RC_ASSERT(other.state() == OffloadState::kDisk);
      std::filesystem::copy_file(other.snapshot_path(), path,
                                 std::filesystem::copy_options::overwrite_existing);
      damage = FallbackReason::kForeign;
      break;
    }
  }
  r.model.damage[segment] = *damage;
}

// What a restore of the chain of `segments` must report: the segments are read oldest first
// and the first refused decides; only the newest one's expiry is checked, after its header
// (missing, truncated and foreign files are refused before) and before its chunks.
std::optional<FallbackReason> expected_fallback(const OffloaderModel& model, uint32_t segments,
                                                bool past_expiry) {
  for (uint32_t k = 0; k < segments; ++k) {
    const bool newest = k + 1 == segments;
    const auto it = model.damage.find(k);
    if (it != model.damage.end()) {
      if (newest && past_expiry && it->second == FallbackReason::kCorrupt) {
        return FallbackReason::kExpired;
      }
      return it->second;
    }
    if (newest && past_expiry) return FallbackReason::kExpired;
  }
  return std::nullopt;
}

// After every step: released memory, and the files on disk are the chain the status reports.
void check_invariants(Rig& r) {
  OffloaderFixture& f = r.f;
  const OffloadStatus s = status(r);
  if (s.state == OffloadState::kDisk || s.state == OffloadState::kExpired) {
    RC_ASSERT(f.sim_->stats().committed_bytes == 0u);
    RC_ASSERT(f.host_.stats().committed_bytes == 0u);
    RC_ASSERT(s.released_vram_bytes == f.target_->committed_device_bytes());
  }
  if (s.state == OffloadState::kDisk) RC_ASSERT(s.snapshot_segments > 0u);
  if (s.state == OffloadState::kExpired) RC_ASSERT(s.snapshot_segments == 0u);
  RC_ASSERT(s.snapshot_segments <= r.max_delta_segments + 1);
  for (uint32_t k = 0; k <= r.max_delta_segments; ++k) {
    const auto it = r.model.damage.find(k);
    const bool deleted = it != r.model.damage.end() && it->second == FallbackReason::kNotFound;
    RC_ASSERT(f.snapshot_exists(k) == (k < s.snapshot_segments && !deleted));
  }
  // The model's notes on the state the Offloader left: a write ahead that ran (posted by an
  // earlier step) leaves the session saved.
  if (s.counters.saves_ahead > r.model.saves_ahead_seen) r.model.saved = true;
  r.model.saves_ahead_seen = s.counters.saves_ahead;
  if (s.state != OffloadState::kResident) r.model.saved = false;
  if (s.state != OffloadState::kDisk) r.model.damage.clear();
}

// A command that holds the session: save_ahead, evict and forget are refused meanwhile.
void refused_while_held(Rig& r) {
  RC_ASSERT(r.f.offloader_->save_ahead().code() == StatusCode::kFailedPrecondition);
  RC_ASSERT(r.f.offloader_->evict().code() == StatusCode::kFailedPrecondition);
  RC_ASSERT(r.f.offloader_->forget().code() == StatusCode::kFailedPrecondition);
}

// A command: acquire, check what it found, optionally cut the history back to `rewind_to`
// (discard: to nothing, as a forgotten conversation's fresh command does), add `positions`.
void run_command(Rig& r, uint32_t positions, std::optional<uint32_t> rewind_to, bool discard,
                 bool try_others) {
  OffloaderFixture& f = r.f;
  OffloaderModel& model = r.model;
  const bool deltas = r.max_delta_segments > 0;
  const OffloadStatus before = status(r);
  const bool past_expiry = before.seconds_since_activity >= OffloaderFixture::kExpire;
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  const bool released =
      before.state == OffloadState::kDisk || before.state == OffloadState::kExpired;
  if (released && model.device_full) {
    RC_ASSERT(lease.status().code() == StatusCode::kOutOfMemory);
    RC_ASSERT(f.state() == before.state);
    RC_ASSERT(status(r).snapshot_segments == before.snapshot_segments);
    return;
  }
  RC_ASSERT(lease.ok());
  const Admission* admitted = &lease->admission();
  const uint32_t segments = status(r).snapshot_segments;
  if (before.state == OffloadState::kExpired) {
    RC_ASSERT(admitted->fresh_after_expiry);
    model.length = 0;
    RC_ASSERT(segments == 0u);
  } else if (before.state == OffloadState::kDisk) {
    const std::optional<FallbackReason> expected =
        expected_fallback(model, before.snapshot_segments, past_expiry);
    RC_LOG() << "  restore of " << before.snapshot_segments << " segment(s): expected fallback "
             << (expected ? fallback_reason_name(*expected) : "none") << ", got "
             << (admitted->fallback ? fallback_reason_name(*admitted->fallback) : "none") << "\n";
    RC_ASSERT(admitted->fallback == expected);
    RC_ASSERT(admitted->restored == !expected.has_value());
    if (expected) model.length = 0;
    // A restored chain stays as the base of the next delta; anything else is retired.
    RC_ASSERT(segments == (deltas && admitted->restored ? before.snapshot_segments : 0u));
  } else {
    RC_ASSERT(!admitted->restored && !admitted->fallback && !admitted->fresh_after_expiry);
    // Written ahead: the file no longer holds the memory the command changes, unless it stays
    // as the base of a delta.
    RC_ASSERT(segments == (model.saved && !deltas ? 0u : before.snapshot_segments));
  }
  model.damage.clear();
  model.saved = false;
  RC_ASSERT(f.target_->length() == model.length);
  RC_ASSERT(f.target_->verify().empty());
  uint32_t lowest = model.length;
  if (discard) {
    RC_ASSERT(f.target_->discard_history().ok());
    model.length = 0;
  } else if (rewind_to) {
    f.target_->rewind(*rewind_to);
    model.length = std::min(model.length, *rewind_to);
  }
  lowest = std::min(lowest, model.length);
  if (try_others) refused_while_held(r);
  f.target_->advance(positions);
  model.length = std::min(kPositions, model.length + positions);
  RC_ASSERT(f.target_->verify().empty());
  lease->release();
  // A history rewritten from its start leaves no delta to build on: the chain is retired.
  RC_ASSERT(status(r).snapshot_segments == (deltas && lowest > 0 ? segments : 0u));
}

uint64_t write_calls(OffloaderFixture& f) { return f.fs_.counters().of(FsOp::kWrite); }

void run_save_ahead(Rig& r, bool write_now) {
  OffloaderFixture& f = r.f;
  f.executor_.run_due();  // the executor is on time: nothing else is due below
  check_invariants(r);
  const OffloadStatus before = status(r);
  const uint64_t writes = write_calls(f);
  RC_ASSERT(f.offloader_->save_ahead().ok());
  if (!write_now) return;
  f.executor_.run_due();
  const OffloadStatus after = status(r);
  RC_ASSERT(after.counters.saves == before.counters.saves);
  if (before.state != OffloadState::kResident || r.model.saved) {
    // Saved already, on disk or expired: nothing to write ahead.
    RC_ASSERT(after.state == before.state);
    RC_ASSERT(write_calls(f) == writes);
    RC_ASSERT(after.counters.saves_ahead == before.counters.saves_ahead);
    RC_ASSERT(after.snapshot_segments == before.snapshot_segments);
    return;
  }
  RC_ASSERT(after.state == OffloadState::kResident);
  RC_ASSERT(write_calls(f) > writes);
  RC_ASSERT(f.target_->verify().empty());  // the memory is kept, as it was
  RC_ASSERT(f.sim_->stats().committed_bytes == f.target_->committed_device_bytes());
  if (r.model.write_error) {
    RC_ASSERT(after.counters.write_failures == before.counters.write_failures + 1);
    RC_ASSERT(after.counters.saves_ahead == before.counters.saves_ahead);
  } else {
    RC_ASSERT(after.counters.saves_ahead == before.counters.saves_ahead + 1);
    RC_ASSERT(after.snapshot_segments > 0u);
  }
  check_invariants(r);
}

void run_evict(Rig& r) {
  OffloaderFixture& f = r.f;
  const OffloadStatus before = status(r);
  const uint64_t writes = write_calls(f);
  const Status evicted = f.offloader_->evict();
  const OffloadStatus after = status(r);
  RC_LOG() << "  evict: " << evicted.to_string() << "\n";
  if (before.state != OffloadState::kResident) {
    // Released already: nothing to do.
    RC_ASSERT(evicted.ok());
    RC_ASSERT(after.state == before.state);
    RC_ASSERT(write_calls(f) == writes);
    return;
  }
  if (r.model.saved) {
    // Written ahead: only the release is left.
    RC_ASSERT(evicted.ok());
    RC_ASSERT(after.state == OffloadState::kDisk);
    RC_ASSERT(write_calls(f) == writes);
    RC_ASSERT(after.counters.saves == before.counters.saves + 1);
    RC_ASSERT(after.snapshot_segments == before.snapshot_segments);
    return;
  }
  RC_ASSERT(write_calls(f) > writes);
  if (r.model.write_error) {
    RC_ASSERT(evicted.code() == *r.model.write_error);
    RC_ASSERT(after.state == OffloadState::kResident);
    RC_ASSERT(f.target_->verify().empty());
    return;
  }
  RC_ASSERT(evicted.ok());
  RC_ASSERT(after.state == OffloadState::kDisk);
  RC_ASSERT(after.counters.saves == before.counters.saves + 1);
}

void run_forget(Rig& r) {
  OffloaderFixture& f = r.f;
  const OffloadStatus before = status(r);
  const Status forgotten = f.offloader_->forget();
  RC_ASSERT(forgotten.ok());
  if (before.state == OffloadState::kDisk || before.state == OffloadState::kExpired) {
    // Deleted without waking the session: the next command starts fresh.
    RC_ASSERT(f.state() == OffloadState::kExpired);
    RC_ASSERT(status(r).snapshot_segments == 0u);
    return;
  }
  // Resident: the session table discards the history under a lease (the fresh command).
  RC_ASSERT(f.state() == OffloadState::kResident);
  RC_ASSERT(status(r).snapshot_segments == before.snapshot_segments);
  run_command(r, 0, std::nullopt, /*discard=*/true, /*try_others=*/false);
  RC_ASSERT(status(r).snapshot_segments == 0u);
}

RC_GTEST_PROP(OffloaderModelProperty, TheSessionHoldsWhatTheModelSays, ()) {
  const auto max_delta_segments =
      *rc::gen::weightedElement<uint32_t>({{1, 0u}, {1, 1u}, {3, kDefaultDeltaSegments}});
  const auto steps = *rc::gen::container<std::vector<std::tuple<int, int>>>(
      rc::gen::tuple(rc::gen::weightedElement<int>({{5, kCommand},
                                                    {4, kPass},
                                                    {1, kClockOnly},
                                                    {2, kDamage},
                                                    {1, kFailWrites},
                                                    {2, kHeal},
                                                    {1, kDeviceFull},
                                                    {1, kOffloadNow},
                                                    {2, kSaveAhead},
                                                    {2, kEvict},
                                                    {1, kForget}}),
                     rc::gen::inRange(0, 1000)));
  test_util::OffloaderSetup setup;
  setup.positions = kPositions;
  setup.max_delta_segments = max_delta_segments;
  OffloaderFixture f(setup);
  Rig r{f, {}, max_delta_segments};
  RC_LOG() << "max_delta_segments " << max_delta_segments << "\n";
  for (const auto& [kind, arg] : steps) {
    RC_LOG() << kind_name(kind) << " " << arg << " (state " << offload_state_name(f.state()) << ", "
             << status(r).snapshot_segments << " segment(s))\n";
    switch (kind) {
      case kCommand: {
        std::optional<uint32_t> rewind_to;
        if ((arg / 4) % 4 == 0) rewind_to = static_cast<uint32_t>(arg / 16) % (r.model.length + 1);
        run_command(r, static_cast<uint32_t>(arg % 4), rewind_to, /*discard=*/false,
                    /*try_others=*/(arg / 64) % 4 == 0);
        break;
      }
      case kPass:
      case kClockOnly: {
        static const int64_t choices[] = {1, OffloaderFixture::kIdle - 1, OffloaderFixture::kIdle,
                                          OffloaderFixture::kExpire / 2, OffloaderFixture::kExpire};
        const int64_t seconds = choices[arg % 5];
        if (kind == kPass) {
          f.pass(seconds);
        } else {
          f.clock_.advance(std::chrono::seconds(seconds));
        }
        break;
      }
      case kDamage: damage_file(r, arg); break;
      case kFailWrites: {
        const FsFaultKind fault = arg % 2 ? FsFaultKind::kNoSpace : FsFaultKind::kIoError;
        f.fs_.set_plan({FsOp::kWrite, 1, fault, true});
        r.model.write_error = arg % 2 ? StatusCode::kNoSpace : StatusCode::kIoError;
        break;
      }
      case kHeal:
        f.fs_.set_plan(FsFaultPlan::none());
        r.model.write_error.reset();
        break;
      case kDeviceFull:
        r.model.device_full = arg % 2 == 1;
        f.sim_->set_external_usage(r.model.device_full ? f.sim_->stats().device_total_bytes : 0);
        break;
      case kOffloadNow:
        (void)f.offloader_->offload_now();
        f.executor_.run_due();
        break;
      case kSaveAhead: run_save_ahead(r, arg % 2 == 1); break;
      case kEvict: run_evict(r); break;
      case kForget: run_forget(r); break;
      default: break;
    }
    check_invariants(r);
  }
  const OffloadStatus s = status(r);
  RC_TAG(max_delta_segments == 0 ? "whole saves" : "delta saves");
  RC_TAG(s.counters.restore_hits > 0 ? "restored" : "never restored");
  RC_TAG(s.counters.restores > s.counters.restore_hits ? "fell back" : "no fallback");
  RC_TAG(s.counters.delta_saves > 0 ? "wrote a delta" : "no delta");
  RC_TAG(s.counters.saves_ahead > 0 ? "wrote ahead" : "never ahead");
  RC_ASSERT(f.fatal_.empty());
}

}  // namespace
}  // namespace siesta
