#include "server/server_app.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "server/metrics_text.h"
#include "server/server_flags.h"

namespace siesta::server {
namespace {

void log_cleanup(const SnapshotStore::CleanupReport& cleanup, const LogLine& log) {
  if (cleanup.removed_dead_owner_files + cleanup.removed_expired_files + cleanup.failures > 0) {
    log("snapshot directory clean-up: removed " + std::to_string(cleanup.removed_dead_owner_files) +
        " files of stopped servers, " + std::to_string(cleanup.removed_expired_files) +
        " expired; " + std::to_string(cleanup.failures) + " could not be removed");
  }
  for (const std::string& failure : cleanup.failure_messages) log(failure);
}

}  // namespace

void exit_on_session_memory_lost(const Status& reason) {
  // Nothing useful can be done when stderr itself fails: the exit status still says why.
  (void)std::fprintf(
      stderr,
      "siesta: fatal: the session's memory could not be mapped back at its addresses "
      "(%s); exiting with status %d\n",
      reason.to_string().c_str(), kSessionMemoryLostExitCode);
  // _Exit, not exit: this runs on the engine thread mid-command, with other threads running;
  // static destructors must not run under them.
  std::_Exit(kSessionMemoryLostExitCode);
}

ServerApp::ServerApp(ServerConfig config, const Clock& clock)
    : config_(std::move(config)), clock_(clock), started_(clock.now()) {}

ServerApp::~ServerApp() {
  // Members go in reverse declaration order; spelled out for the two that matter most: the
  // engine (and its Offloader) must be gone before the executor its timers run on and the
  // store its saves write to.
  engine_.reset();
  executor_.reset();
}

Result<std::unique_ptr<ServerApp>> ServerApp::start(ServerConfig config, const Clock& clock,
                                                    LogLine log,
                                                    SessionLostHandler on_session_lost) {
  if (!log) log = [](const std::string&) {};
  std::unique_ptr<ServerApp> app(new ServerApp(std::move(config), clock));
  const ServerConfig& cfg = app->config_;

  std::string note;
  Result<OpenedDevice> device = open_device(cfg.backend, &note);
  if (!note.empty()) log(note);
  if (!device.ok()) return device.status();
  app->device_ = std::move(device).value();

  // The offloader is always there; with offload off it reports "disabled" with these times.
  engine::EngineOffload offload;
  offload.options.idle_seconds = cfg.offload.idle_seconds;
  offload.options.expire_seconds = cfg.offload.expire_seconds;
  offload.options.encrypt = cfg.cache_encrypt;
  offload.options.log = log;  // one line per save, restore, fallback and expiry
  // Losing the session's memory is the server's to handle (main: one line, exit 70).
  offload.options.on_fatal = std::move(on_session_lost);
  if (cfg.offload.enabled()) {
    Result<std::unique_ptr<OffloadStorage>> storage =
        OffloadStorage::open(cfg.offload.disk_dir, clock);
    if (!storage.ok()) return storage.status().with_context("opening --cache-disk-dir");
    app->storage_ = std::move(storage).value();
    log_cleanup(app->storage_->store().startup_cleanup(), log);

    app->executor_ = std::make_unique<ThreadExecutor>(clock);
    offload.store = &app->storage_->store();
    offload.key = &app->storage_->key();
    offload.executor = app->executor_.get();
  }

  Result<engine::ModelConfig> model =
      engine::model_config_from_spec(cfg.model, cfg.context, cfg.kv_type);
  if (!model.ok()) return model.status().with_context("--model");
  engine::EngineOptions options{std::move(model).value(), cfg.slot_save_path, std::move(offload)};
  Result<std::unique_ptr<engine::Engine>> engine = engine::Engine::start(
      options, *app->device_.backend, *app->device_.kernels, app->host_, app->fs_, clock);
  if (!engine.ok()) return engine.status().with_context("starting the engine");
  app->engine_ = std::move(engine).value();
  return app;
}

StatusSnapshot ServerApp::status() const {
  StatusSnapshot snapshot;
  snapshot.version = std::string(server_version());
  snapshot.uptime_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.now() - started_).count();
  snapshot.backend_name = device_.backend->name();
  snapshot.kernels_name = device_.kernels->name();
  snapshot.granularity = device_.backend->granularity();
  snapshot.memory = device_.backend->stats();

  const engine::ModelConfig& model = engine_->config();
  snapshot.model = {model.name, model.context, model.kv_type, model.layers, model.dim};
  const engine::EngineStatus engine = engine_->status();
  snapshot.engine = {engine.busy, engine.queued_commands, engine.commands_run,
                     engine.history_tokens};
  snapshot.cache = engine_->cache_status();
  snapshot.clients_gone = clients_gone();
  return snapshot;
}

std::string ServerApp::metrics_text() const { return server::metrics_text(status()); }

std::shared_ptr<std::atomic<bool>> ServerApp::new_request_token() {
  auto token = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard lock(tokens_mutex_);
  if (cancelled_) {
    token->store(true);
    return token;
  }
  // Drop the flags of finished requests so the list stays as long as the requests in flight.
  std::erase_if(tokens_, [](const std::weak_ptr<std::atomic<bool>>& t) { return t.expired(); });
  tokens_.push_back(token);
  return token;
}

void ServerApp::cancel_all() {
  std::lock_guard lock(tokens_mutex_);
  cancelled_ = true;
  for (const std::weak_ptr<std::atomic<bool>>& weak : tokens_) {
    if (std::shared_ptr<std::atomic<bool>> token = weak.lock()) token->store(true);
  }
  tokens_.clear();
}

}  // namespace siesta::server
