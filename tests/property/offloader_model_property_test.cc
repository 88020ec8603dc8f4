// Model-based property test of the Offloader: RapidCheck generates sequences of commands, time
// steps (with and without the timers running), damage to the snapshot while the session
// sleeps (deleted, truncated, a flipped byte, another session's file), failing writes, the
// device running out of memory, and operator offloads; they run against an Offloader over a
// FakeOffloadTarget and a model of what the session must hold.
//
// Invariants after every step:
//   - a command runs on memory holding exactly the bytes the model predicts (verify());
//   - the history is discarded exactly when the snapshot was missing, damaged, foreign or
//     expired (the reason matching), and kept otherwise;
//   - nothing is committed while the state is disk or expired, and the released bytes are the
//     session's committed bytes, as the backend reports them;
//   - no file of a discarded snapshot survives; out of memory leaves the state and the file.
//
// Case count and seed: RC_PARAMS (ctest sets max_success=1000); both are printed at start-up;
// on failure RapidCheck prints the seed and the shrunk sequence.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>
#include <vector>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

enum Kind : int {
  kCommand,
  kPass,        // time passes and due timers run
  kClockOnly,   // time passes, timers do not run (an executor that is late)
  kDamage,      // arg % 4: delete, truncate, flip a byte, another session's file
  kFailWrites,  // arg odd: NoSpace, even: IoError; every write fails until kHeal
  kHeal,
  kDeviceFull,  // arg odd: another process takes the device memory; even: gives it back
  kOffloadNow,
  kKindCount
};

const char* kind_name(int kind) {
  static const char* const names[] = {"command",     "pass", "clock_only",  "damage",
                                      "fail_writes", "heal", "device_full", "offload_now"};
  return names[kind];
}

struct Model {
  uint32_t length = 0;
  std::optional<FallbackReason> damage;  // what the current snapshot file suffered
};

constexpr uint32_t kPositions = 24;

void damage_file(OffloaderFixture& f, int how, Model& model) {
  const std::string path = f.snapshot_path();
  if (!std::filesystem::exists(path) || f.state() != OffloadState::kDisk) return;
  switch (how % 4) {
    case 0:
      std::filesystem::remove(path);
      model.damage = FallbackReason::kNotFound;
      break;
    case 1:
      std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
      // Another process's file is refused for its nonce before its length is looked at.
      if (model.damage != FallbackReason::kForeign) model.damage = FallbackReason::kTruncated;
      break;
    case 2: {
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      const auto at = static_cast<std::streamoff>(std::filesystem::file_size(path) * 3 / 4);
      char byte = 0;
      file.seekg(at);
      file.read(&byte, 1);
      byte = static_cast<char>(byte + 1);  // never undone by a later damage of the same byte
      file.seekp(at);
      file.write(&byte, 1);
      if (!model.damage) model.damage = FallbackReason::kCorrupt;
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
      model.damage = FallbackReason::kForeign;
      break;
    }
  }
}

void check_released_invariants(OffloaderFixture& f) {
  const OffloadStatus status = f.offloader_->status();
  if (status.state == OffloadState::kDisk || status.state == OffloadState::kExpired) {
    RC_ASSERT(f.sim_->stats().committed_bytes == 0u);
    RC_ASSERT(f.host_.stats().committed_bytes == 0u);
    RC_ASSERT(status.released_vram_bytes == f.target_->committed_device_bytes());
  }
  if (status.state == OffloadState::kExpired) RC_ASSERT(!f.snapshot_exists());
}

void run_command(OffloaderFixture& f, Model& model, bool device_full, uint32_t positions) {
  const OffloadState before = f.state();
  const bool file_before = f.snapshot_exists();
  const bool past_expiry =
      f.offloader_->status().seconds_since_activity >= OffloaderFixture::kExpire;
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  const bool released = before == OffloadState::kDisk || before == OffloadState::kExpired;
  if (released && device_full) {
    RC_ASSERT(lease.status().code() == StatusCode::kOutOfMemory);
    RC_ASSERT(f.state() == before);
    RC_ASSERT(f.snapshot_exists() == file_before);
    return;
  }
  RC_ASSERT(lease.ok());
  const Admission* admitted = &lease->admission();
  if (before == OffloadState::kExpired) {
    RC_ASSERT(admitted->fresh_after_expiry);
    model.length = 0;
  } else if (before == OffloadState::kDisk) {
    // The reader's order (snapshot_reader.h): missing, truncated and foreign files are refused
    // before the expiry is looked at, a damaged chunk only after it.
    std::optional<FallbackReason> expected = model.damage;
    if (past_expiry && (!expected || *expected == FallbackReason::kCorrupt)) {
      expected = FallbackReason::kExpired;
    }
    RC_LOG() << "restore: expected fallback "
             << (expected ? fallback_reason_name(*expected) : "none") << ", got "
             << (admitted->fallback ? fallback_reason_name(*admitted->fallback) : "none") << "\n";
    RC_ASSERT(admitted->fallback == expected);
    RC_ASSERT(admitted->restored == !expected.has_value());
    if (expected) model.length = 0;
    RC_ASSERT(!f.snapshot_exists());
  } else {
    RC_ASSERT(!admitted->restored && !admitted->fallback && !admitted->fresh_after_expiry);
  }
  model.damage.reset();
  RC_ASSERT(f.target_->length() == model.length);
  RC_ASSERT(f.target_->verify().empty());
  f.target_->advance(positions);
  model.length = std::min(kPositions, model.length + positions);
  RC_ASSERT(f.target_->verify().empty());
  lease->release();
}

RC_GTEST_PROP(OffloaderModelProperty, TheSessionHoldsWhatTheModelSays, ()) {
  const auto steps = *rc::gen::container<std::vector<std::tuple<int, int>>>(
      rc::gen::tuple(rc::gen::weightedElement<int>({{4, kCommand},
                                                    {4, kPass},
                                                    {1, kClockOnly},
                                                    {2, kDamage},
                                                    {1, kFailWrites},
                                                    {2, kHeal},
                                                    {1, kDeviceFull},
                                                    {1, kOffloadNow}}),
                     rc::gen::inRange(0, 1000)));
  test_util::OffloaderSetup setup;
  setup.positions = kPositions;
  OffloaderFixture f(setup);
  Model model;
  bool device_full = false;
  int restores = 0, fallbacks = 0;
  for (const auto& [kind, arg] : steps) {
    RC_LOG() << kind_name(kind) << " " << arg << " (state " << offload_state_name(f.state())
             << ")\n";
    switch (kind) {
      case kCommand: run_command(f, model, device_full, static_cast<uint32_t>(arg % 4)); break;
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
      case kDamage: damage_file(f, arg, model); break;
      case kFailWrites:
        f.fs_.set_plan(
            {FsOp::kWrite, 1, arg % 2 ? FsFaultKind::kNoSpace : FsFaultKind::kIoError, true});
        break;
      case kHeal: f.fs_.set_plan(FsFaultPlan::none()); break;
      case kDeviceFull:
        device_full = arg % 2 == 1;
        f.sim_->set_external_usage(device_full ? f.sim_->stats().device_total_bytes : 0);
        break;
      case kOffloadNow:
        (void)f.offloader_->offload_now();
        f.executor_.run_due();
        break;
      default: break;
    }
    check_released_invariants(f);
  }
  const OffloadStatus status = f.offloader_->status();
  restores = static_cast<int>(status.counters.restore_hits);
  fallbacks = static_cast<int>(status.counters.restores - status.counters.restore_hits);
  RC_TAG(restores > 0 ? "restored" : "never restored");
  RC_TAG(fallbacks > 0 ? "fell back" : "no fallback");
  RC_ASSERT(f.fatal_.empty());
}

}  // namespace
}  // namespace siesta
