// OffloadSettings: the idle-offload part of a stack's options (the times, the directory, the
// seals, what to do when a session's memory is lost), and the one place that turns them into
// the Offloader's options, so that the server, the test rigs and the benchmarks configure the
// Offloader the same way.
//
// Thread rule: none (plain data and a pure function).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "core/base/status.h"
#include "core/offload/offload_config.h"
#include "core/offload/offloader.h"

namespace siesta::runtime {

// One line for a log.
using LogLine = std::function<void(const std::string&)>;

struct OffloadSettings {
  // The times, the snapshot directory, the seals and the delta saves. idle_seconds 0 (the
  // default): offload off; the Offloader then reports "disabled" with these times and no
  // directory is opened.
  OffloadConfig config;
  // Called once, on the engine thread, when the session's memory could not be mapped back
  // after an offload (OffloaderOptions::on_fatal). Empty: that command and every later one fail
  // with DeviceError.
  std::function<void(const Status&)> on_fatal;
  // Conversations survive a restart (--cache-persist on): snapshots are sealed under the key
  // in `key_file` (made 0600 when missing: core/snapshot/key_file.h), this process's files
  // stay when it stops, and a start adopts what a stopped server left under the same key
  // (engine/conversation_adoption.h). Off (the default): an ephemeral key, and the files of
  // stopped servers are removed at start.
  bool persist = false;
  std::string key_file;
  // With persist: the engine's close saves what is not on disk yet within this time
  // (engine::EngineOffload::exit_save_limit).
  std::chrono::seconds exit_save_limit{30};

  bool enabled() const { return config.enabled(); }
};

// The Offloader's options for `settings`: its config and on_fatal, one line per save,
// restore, fallback and expiry to `log` (empty: the Offloader's default, stderr). The fields
// the settings do not name (session "0", chunk size, write backoff) keep OffloaderOptions'
// defaults; a caller that measures or tests them sets them afterwards.
OffloaderOptions offloader_options(const OffloadSettings& settings, LogLine log);

}  // namespace siesta::runtime
