// EngineModel-based property test of idle offload with the real engine (synthetic:tiny on the
// simulator): RapidCheck generates sequences of generations whose prompts extend, diverge
// from or abandon the conversation, time steps (timers running or late), damage to the
// snapshot while the session sleeps, a full device, and exports and imports. The same
// sequence drives a second engine with offload off; where the snapshot was lost the reference
// forgets its history too (reset), exactly when the model says so.
//
// Invariants:
//   - every generation gives the reference's bytes and cached_tokens (so whenever the
//     snapshot was valid, offload changed nothing);
//   - the history is discarded exactly when the snapshot was missing, damaged or expired
//     (counted fallbacks / the expired state), never otherwise;
//   - a restore refused for memory fails the command with OutOfMemory and keeps the file;
//   - nothing is committed for the session while it sleeps (the backend holds only weights);
//   - exports and imports give the same results on both engines.
//
// Case count and seed: RC_PARAMS (ctest sets max_success=1000); printed at start-up.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta::engine {
namespace {

constexpr int64_t kIdleSeconds = siesta::testing::OffloadEngineRig::kIdleSeconds;
constexpr int64_t kExpireSeconds = siesta::testing::OffloadEngineRig::kExpireSeconds;

// One engine on its own simulated device; with `offload`, idle offload on a ManualClock.
struct Side : siesta::testing::OffloadEngineRig {
  explicit Side(bool offload) : siesta::testing::OffloadEngineRig(options_for(offload)) {}
  static siesta::testing::OffloadEngineRigOptions options_for(bool offload) {
    siesta::testing::OffloadEngineRigOptions options;
    options.offload = offload;
    options.capacity_bytes = 64ull << 20;  // small, so that "device full" is cheap to reach
    options.staging_buffer_bytes = 64u << 10;
    return options;
  }
};

enum ActionKind : int { kGenerate, kPass, kClockOnly, kDamage, kDeviceFull, kExport, kImport };

struct EngineModel {
  bool damaged = false;     // the current snapshot file was changed or removed
  std::string last_prompt;  // of the last successful generation
  std::string last_answer;
};

std::string suffix_of(int arg) {
  static const char* const words[] = {" alpha", " beta", " gamma", " delta", " eps"};
  return std::string(words[arg % 5]) + std::to_string(arg % 7);
}

// The prompt a client would send: extending the conversation, diverging inside it, the last
// prompt again (a regenerate: the session's prompt-end checkpoint), or new.
std::string next_prompt(const EngineModel& model, int how, int arg) {
  const std::string whole = model.last_prompt + model.last_answer;
  switch (how % 4) {
    case 0: return whole + suffix_of(arg);
    case 1:
      return whole.substr(0, whole.size() * static_cast<size_t>(arg % 10) / 10) + suffix_of(arg);
    case 2: return model.last_prompt.empty() ? suffix_of(arg) : model.last_prompt;
    default: return suffix_of(arg);
  }
}

// True when the offloading engine must lose its history at its next command.
bool history_will_be_lost(Side& on, const EngineModel& model) {
  const OffloadStatus status = on.engine->cache_status();
  if (status.state == OffloadState::kExpired) return true;
  if (status.state != OffloadState::kDisk) return false;
  return model.damaged || status.seconds_since_activity >= kExpireSeconds;
}

RC_GTEST_PROP(EngineOffloadProperty, OffloadNeverChangesTheBytes, ()) {
  const auto steps = *rc::gen::container<std::vector<std::tuple<int, int, int>>>(
      rc::gen::tuple(rc::gen::weightedElement<int>({{6, kGenerate},
                                                    {4, kPass},
                                                    {1, kClockOnly},
                                                    {2, kDamage},
                                                    {1, kDeviceFull},
                                                    {1, kExport},
                                                    {1, kImport}}),
                     rc::gen::inRange(0, 1000), rc::gen::inRange(0, 1000)));
  Side on(true), off(false);
  EngineModel model;
  bool device_full = false;
  for (const auto& [kind, a, b] : steps) {
    const OffloadState state = on.engine->cache_status().state;
    const bool asleep = state == OffloadState::kDisk || state == OffloadState::kExpired;
    RC_LOG() << "step " << kind << " " << a << " " << b << " (state " << offload_state_name(state)
             << ")\n";
    if (kind == kPass || kind == kClockOnly) {
      static const int64_t choices[] = {1, kIdleSeconds - 1, kIdleSeconds, kExpireSeconds / 2,
                                        kExpireSeconds};
      on.clock.advance(std::chrono::seconds(choices[a % 5]));
      if (kind == kPass) on.executor.run_due();
    } else if (kind == kDamage) {
      if (state != OffloadState::kDisk || !std::filesystem::exists(on.snapshot_path())) continue;
      const std::string path = on.snapshot_path();
      if (a % 3 == 0) {
        std::filesystem::remove(path);
      } else if (a % 3 == 1) {
        std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
      } else {
        // One byte of the trailer's tag, changed (never back to what it was).
        std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
        const auto at = static_cast<std::streamoff>(std::filesystem::file_size(path) - 1);
        char byte = 0;
        file.seekg(at);
        file.get(byte);
        file.seekp(at);
        file.put(static_cast<char>(byte + 1));
      }
      model.damaged = true;
    } else if (kind == kDeviceFull) {
      device_full = a % 2 == 1;
      on.backend->set_external_usage(device_full ? on.backend->stats().device_total_bytes : 0);
    } else {
      // A command on both engines. The reference forgets its history exactly when the
      // offloading engine must (a lost snapshot), before running the same command.
      const bool lose = history_will_be_lost(on, model);
      const uint64_t fallbacks_before = on.engine->cache_status().counters.restores -
                                        on.engine->cache_status().counters.restore_hits;
      const std::string name = "export" + std::to_string(a % 3);
      if (kind == kGenerate) {
        std::string prompt = next_prompt(model, a, b);
        const uint32_t max_tokens = 1 + static_cast<uint32_t>(b % 8);
        if (prompt.size() + max_tokens > 256) prompt = suffix_of(b);
        Result<GenerateResult> got = on.generate(prompt, max_tokens);
        if (asleep && device_full) {
          RC_ASSERT(got.status().code() == StatusCode::kOutOfMemory);
          RC_ASSERT(on.engine->cache_status().state == state);
          continue;
        }
        RC_ASSERT(got.ok());
        if (lose) RC_ASSERT(off.engine->reset().get().ok());
        Result<GenerateResult> want = off.generate(prompt, max_tokens);
        RC_ASSERT(want.ok());
        RC_ASSERT(got->text == want->text);
        RC_ASSERT(got->cached_tokens == want->cached_tokens);
        RC_ASSERT(got->admission.fallback.has_value() == (lose && state == OffloadState::kDisk));
        model.last_prompt = prompt;
        model.last_answer = got->text;
      } else if (kind == kExport) {
        Result<ExportResult> got = on.engine->export_conversation(name).get();
        if (asleep && device_full) {
          RC_ASSERT(got.status().code() == StatusCode::kOutOfMemory);
          continue;
        }
        if (lose) RC_ASSERT(off.engine->reset().get().ok());
        Result<ExportResult> want = off.engine->export_conversation(name).get();
        RC_ASSERT(got.ok() && want.ok());
        RC_ASSERT(got->tokens == want->tokens);
      } else {  // kImport
        Result<ImportResult> got = on.engine->import_conversation(name).get();
        if (asleep && device_full) {
          RC_ASSERT(got.status().code() == StatusCode::kOutOfMemory);
          continue;
        }
        if (lose) RC_ASSERT(off.engine->reset().get().ok());
        Result<ImportResult> want = off.engine->import_conversation(name).get();
        RC_ASSERT(got.ok() == want.ok());
        if (got.ok()) RC_ASSERT(got->tokens == want->tokens);
        RC_ASSERT(on.engine->status().history_tokens == off.engine->status().history_tokens);
        if (got.ok()) {
          model.last_prompt.clear();
          model.last_answer.clear();
        }
      }
      const OffloadStatus after = on.engine->cache_status();
      const uint64_t fallbacks = after.counters.restores - after.counters.restore_hits;
      RC_ASSERT(fallbacks - fallbacks_before == (lose && state == OffloadState::kDisk ? 1u : 0u));
      if (lose || asleep) model.damaged = false;  // the file is gone either way
    }
    // Nothing of the session stays committed while it sleeps (only the weights), and the
    // released bytes are exactly what the backend stopped holding.
    const OffloadStatus now = on.engine->cache_status();
    if (now.state == OffloadState::kDisk || now.state == OffloadState::kExpired) {
      RC_ASSERT(now.released_vram_bytes > 0u);
      RC_ASSERT(on.backend->stats().committed_bytes + now.released_vram_bytes ==
                on.resident_committed);
      RC_ASSERT(on.host.stats().committed_bytes == 0u);
    }
  }
  RC_TAG(on.engine->cache_status().counters.restore_hits > 0 ? "restored" : "never restored");
}

}  // namespace
}  // namespace siesta::engine
