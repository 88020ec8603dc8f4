#include "server/server_app.h"

#include <chrono>
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
                                                    LogLine log) {
  if (!log) log = [](const std::string&) {};
  std::unique_ptr<ServerApp> app(new ServerApp(std::move(config), clock));
  const ServerConfig& cfg = app->config_;

  std::string note;
  Result<OpenedDevice> device = open_device(cfg.backend, &note);
  if (!note.empty()) log(note);
  if (!device.ok()) return device.status();
  app->device_ = std::move(device).value();

  std::optional<engine::EngineOffload> offload;
  if (cfg.offload.enabled()) {
    Result<std::unique_ptr<OffloadStorage>> storage =
        OffloadStorage::open(cfg.offload.disk_dir, clock);
    if (!storage.ok()) return storage.status().with_context("opening --cache-disk-dir");
    app->storage_ = std::move(storage).value();
    log_cleanup(app->storage_->store().startup_cleanup(), log);

    app->executor_ = std::make_unique<ThreadExecutor>(clock);
    OffloaderOptions options;
    options.idle_seconds = cfg.offload.idle_seconds;
    options.expire_seconds = cfg.offload.expire_seconds;
    options.encrypt = cfg.cache_encrypt;
    options.log = log;  // one line per save, restore, fallback and expiry
    // on_fatal keeps its default: one line and exit kExitSessionMemoryLost, since no later
    // request could run on a session whose addresses are gone.
    offload = engine::EngineOffload{std::move(options), &app->storage_->store(),
                                    &app->storage_->key(), app->executor_.get()};
  }

  Result<engine::ModelConfig> model =
      engine::model_config_from_spec(cfg.model, cfg.context, cfg.kv_type);
  if (!model.ok()) return model.status().with_context("--model");
  engine::EngineOptions options{std::move(model).value(), cfg.slot_save_path, std::move(offload)};
  Result<std::unique_ptr<engine::Engine>> engine =
      engine::Engine::start(std::move(options), *app->device_.backend, *app->device_.kernels,
                            app->host_, app->fs_, clock);
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
  if (!config_.offload.enabled()) {
    // No offloader: report the configured times anyway, as the seed's status did, so a
    // client sees what --cache-expire-seconds would be once offload is switched on.
    snapshot.cache.idle_seconds = config_.offload.idle_seconds;
    snapshot.cache.expire_seconds = config_.offload.expire_seconds;
  }
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
