// ServerApp: everything siesta-server serves from: the runtime's EngineStack (the device,
// host memory, the snapshot storage when idle offload is on, the executor for the offloader's
// timers and saves, and the engine with its Offloader) opened from the server's configuration,
// plus what only a server has (its start time, the requests' cancel flags, the count of clients
// gone). Routes reach the session only through engine() and read numbers through status(); the
// API routes use config(), engine() and new_request_token().
//
// Thread rule: every method may be called from any number of HTTP worker threads at once
// (engine() is itself thread-safe). status() and metrics_text() only read counters: they
// never wait for a command, a save or a restore and never wake a sleeping session (status calls
// that woke the server were a bug of another system).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "engine/engine.h"
#include "runtime/engine_stack.h"
#include "server/server_config.h"
#include "server/status_json.h"

namespace siesta::server {

// One line for the server's log (main prefixes "siesta-server: " and writes it to stderr).
using LogLine = runtime::LogLine;

// Called once, on the engine thread, when the session's memory could not be mapped back after
// an offload (Offloader's on_fatal): no later request could run safely on it.
using SessionLostHandler = std::function<void(const Status&)>;

// With several conversations, requests waiting per resident session before the next one is
// answered 503 + Retry-After.
inline constexpr size_t kMaxQueuedPerSession = 64;

// The exit status of a server whose session memory was lost (docs/IDLE_SESSION.md).
inline constexpr int kSessionMemoryLostExitCode = 70;

// The server's policy for a lost session, which main() installs: one line on stderr
// ("siesta: fatal: the session's memory could not be mapped back ...") and exit status 70.
[[noreturn]] void exit_on_session_memory_lost(const Status& reason);

class ServerApp {
 public:
  // Opens the EngineStack (runtime/engine_stack.h) for `config`: the device of config.backend
  // (the kAuto note is logged), the snapshot storage on config.offload.disk_dir when offload is
  // on (its start-up clean-up is logged), a ThreadExecutor on `clock` for the offloader's
  // timers and saves, and the engine with config.model / context / kv_type, export_dir =
  // config.slot_save_path and an Offloader configured from config.offload and
  // config.offload.encrypt, whose one line per operation goes to `log`; `on_session_lost` is
  // called if the session's memory is lost (empty: the request that found it fails with
  // DeviceError, and so do later ones).
  // REQUIRES: `config` came from parse_server_flags() (validated), and when offload is on its
  // disk_dir passed prepare_cache_dir(); `clock` outlives the app. Under a ManualClock the
  // offloader's timers fire once the test moves it past their deadline.
  // Failure: "--model: ..." for a model the configuration cannot load; the device's error
  // ("--backend cuda: CUDA is unavailable: ..." when CUDA was asked for and is not usable);
  // "opening --cache-disk-dir: ..." with the store's error; "starting the engine: ..." with
  // the engine's. Whatever was opened is closed again.
  static Result<std::unique_ptr<ServerApp>> start(ServerConfig config, const Clock& clock,
                                                  LogLine log,
                                                  SessionLostHandler on_session_lost = {});

  // Closes the stack: the engine first (running command finished, queued ones cancelled, a
  // running save stopped), then the executor, the storage (this process's snapshots removed),
  // the kernels and the backend.
  ~ServerApp() = default;
  ServerApp(const ServerApp&) = delete;
  ServerApp& operator=(const ServerApp&) = delete;

  const ServerConfig& config() const { return config_; }
  engine::Engine& engine() const { return stack_->engine(); }
  // What the app serves from (tests wait on it: wait_offload_idle()).
  const runtime::EngineStack& stack() const { return *stack_; }
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
  std::shared_ptr<std::atomic<bool>> new_request_token() SIESTA_EXCLUDES(tokens_mutex_);
  // Raises every request's cancel flag; a generation then ends within one token step.
  void cancel_all() SIESTA_EXCLUDES(tokens_mutex_);

  // The API routes call this when they find a client gone before its answer (its generation
  // is then cancelled); counted for /metrics.
  void note_client_gone() { clients_gone_.fetch_add(1); }
  uint64_t clients_gone() const { return clients_gone_.load(); }

 private:
  ServerApp(ServerConfig config, const Clock& clock);

  const ServerConfig config_;
  const Clock& clock_;
  const Clock::Duration started_;

  // The cancel flags of the requests in flight (expired ones are dropped as new ones come),
  // and whether cancel_all() came.
  Mutex tokens_mutex_;
  std::vector<std::weak_ptr<std::atomic<bool>>> tokens_ SIESTA_GUARDED_BY(tokens_mutex_);
  bool cancelled_ SIESTA_GUARDED_BY(tokens_mutex_) = false;
  std::atomic<uint64_t> clients_gone_{0};

  std::unique_ptr<runtime::EngineStack> stack_;
};

}  // namespace siesta::server
