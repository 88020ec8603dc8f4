#include "server/server_app.h"

#include <chrono>
#include <utility>

#include "server/server_flags.h"

namespace siesta::server {

ServerApp::ServerApp(ServerConfig config, std::unique_ptr<MemoryBackend> backend,
                     std::unique_ptr<OffloadStorage> storage, const Clock& clock)
    : config_(std::move(config)),
      backend_(std::move(backend)),
      storage_(std::move(storage)),
      clock_(clock),
      started_(clock.now()) {}

StatusSnapshot ServerApp::status() const {
  StatusSnapshot snapshot;
  snapshot.version = std::string(server_version());
  snapshot.uptime_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.now() - started_).count();
  snapshot.backend_name = backend_->name();
  snapshot.granularity = backend_->granularity();
  snapshot.memory = backend_->stats();
  // No engine yet: the session is as configured and nothing has happened to it.
  snapshot.cache = initial_cache_status(config_.offload);
  if (storage_ != nullptr) snapshot.cache.disk_bytes = storage_->disk_bytes();
  return snapshot;
}

}  // namespace siesta::server
