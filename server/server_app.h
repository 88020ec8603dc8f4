// ServerApp: everything siesta-server serves from, opened in one place and closed in the
// reverse order: the device (backend + kernels), host VMM, the snapshot storage (when idle
// offload is on), the executor for the offloader's timers and saves, and the engine with its
// Offloader. Routes reach the session only through engine() and read numbers through
// status(); the API routes use config(), engine() and new_request_token().
//
// Thread rule: every method may be called from any number of HTTP worker threads at once
// (engine() is itself thread-safe). status() and metrics_text() only read counters: they
// never wait for a command, a save or a restore and never wake a sleeping session (status calls
// that woke the server were a bug of another system).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "engine/engine.h"
#include "server/backend_choice.h"
#include "server/offload_storage.h"
#include "server/server_config.h"
#include "server/status_json.h"

namespace siesta::server {

// One line for the server's log (main prefixes "siesta-server: " and writes it to stderr).
using LogLine = std::function<void(const std::string&)>;

// Called once, on the engine thread, when the session's memory could not be mapped back after
// an offload (Offloader's on_fatal): no later request could run safely on it.
using SessionLostHandler = std::function<void(const Status&)>;

// The exit status of a server whose session memory was lost (docs/IDLE_SESSION.md).
inline constexpr int kSessionMemoryLostExitCode = 70;

// The server's policy for a lost session, which main() installs: one line on stderr
// ("siesta: fatal: the session's memory could not be mapped back ...") and exit status 70.
[[noreturn]] void exit_on_session_memory_lost(const Status& reason);

class ServerApp {
 public:
  // Opens, in order: the device of config.backend (open_device(); the kAuto note is logged),
  // the snapshot storage on config.offload.disk_dir when offload is on (its start-up
  // clean-up is logged), the executor, and the engine with config.model / context / kv_type,
  // export_dir = config.slot_save_path and, when offload is on, an Offloader whose one line
  // per operation goes to `log`, and `on_session_lost` is called if the session's memory is
  // lost (empty: the request that found it fails with DeviceError, and so do later ones).
  // REQUIRES: `config` came from parse_server_flags() (validated), and when offload is on its
  // disk_dir passed prepare_cache_dir(); `clock` outlives the app. The offloader's timers run
  // on a ThreadExecutor against `clock`: SystemClock in the server; under a ManualClock they
  // fire once the test moves it past their deadline.
  // Failure: the device's, the storage's or Engine::start()'s status, with context; whatever
  // was opened is closed again.
  static Result<std::unique_ptr<ServerApp>> start(ServerConfig config, const Clock& clock,
                                                  LogLine log,
                                                  SessionLostHandler on_session_lost = {});

  // Destroys the engine first (running command finished, queued ones cancelled, a running
  // save stopped), then the executor, the storage (this process's snapshots removed), the
  // kernels and the backend.
  ~ServerApp();
  ServerApp(const ServerApp&) = delete;
  ServerApp& operator=(const ServerApp&) = delete;

  const ServerConfig& config() const { return config_; }
  engine::Engine& engine() const { return *engine_; }
  // The clock the app was started with (SystemClock in the server), for routes that time
  // their work.
  const Clock& clock() const { return clock_; }

  // The numbers /v1/status and /metrics report, read now.
  StatusSnapshot status() const;
  // The /metrics body (metrics_text(status())).
  std::string metrics_text() const;

  // A cancel flag for one request's generation (GenerateRequest::cancel). cancel_all()
  // raises every flag handed out that is still held, and every flag handed out afterwards
  // starts raised (the server is stopping).
  std::shared_ptr<std::atomic<bool>> new_request_token();
  // Raises every request's cancel flag; a generation then ends within one token step.
  void cancel_all();

  // The API routes call this when they find a client gone before its answer (its generation
  // is then cancelled); counted for /metrics.
  void note_client_gone() { clients_gone_.fetch_add(1); }
  uint64_t clients_gone() const { return clients_gone_.load(); }

 private:
  ServerApp(ServerConfig config, const Clock& clock);

  const ServerConfig config_;
  const Clock& clock_;
  const Clock::Duration started_;

  std::mutex tokens_mutex_;
  std::vector<std::weak_ptr<std::atomic<bool>>> tokens_;
  bool cancelled_ = false;
  std::atomic<uint64_t> clients_gone_{0};

  // Declared in opening order; destroyed in reverse, so each part outlives its users.
  OpenedDevice device_;
  HostVmm host_;
  PosixFileSystem fs_;
  std::unique_ptr<OffloadStorage> storage_;  // null when offload is off
  std::unique_ptr<ThreadExecutor> executor_;
  std::unique_ptr<engine::Engine> engine_;  // last: destroyed first
};

}  // namespace siesta::server
