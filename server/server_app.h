// ServerApp: what the HTTP layer serves. It owns the memory backend now, and will own the
// engine and its Offloader when they arrive; routes reach the session only through it.
//
// Thread rule: every const method may be called from any number of HTTP worker threads at
// once. status() only reads counters: it never takes the session's admission lock, never
// waits for a save or restore and never wakes a sleeping session (ANCHORS.md bug 8).
#pragma once

#include <memory>

#include "core/clock.h"
#include "core/memory_backend.h"
#include "server/offload_storage.h"
#include "server/server_config.h"
#include "server/status_json.h"

namespace siesta::server {

class ServerApp {
 public:
  // REQUIRES: `backend` is not null; `clock` outlives the app. `storage` is null when
  // offload is off.
  ServerApp(ServerConfig config, std::unique_ptr<MemoryBackend> backend,
            std::unique_ptr<OffloadStorage> storage, const Clock& clock);

  const ServerConfig& config() const { return config_; }

  // The numbers /v1/status reports, read now.
  StatusSnapshot status() const;

 private:
  const ServerConfig config_;
  const std::unique_ptr<MemoryBackend> backend_;
  const std::unique_ptr<OffloadStorage> storage_;
  const Clock& clock_;
  const Clock::Duration started_;
};

}  // namespace siesta::server
