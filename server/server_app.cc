#include "server/server_app.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "server/metrics_text.h"
#include "server/server_flags.h"

namespace siesta::server {

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

Result<std::unique_ptr<ServerApp>> ServerApp::start(ServerConfig config, const Clock& clock,
                                                    LogLine log,
                                                    SessionLostHandler on_session_lost) {
  if (!log) log = [](const std::string&) {};
  std::unique_ptr<ServerApp> app(new ServerApp(std::move(config), clock));
  const ServerConfig& cfg = app->config_;

  Result<engine::ModelConfig> model =
      engine::model_config_from_spec(cfg.model, cfg.context, cfg.kv_type);
  if (!model.ok()) return model.status().with_context("--model");

  runtime::EngineStackOptions options;
  options.device.kind = cfg.backend;
  options.model = std::move(model).value();
  options.export_dir = cfg.slot_save_path;
  options.sessions.parallel = cfg.parallel;
  options.sessions.max_sessions = cfg.sessions();
  options.sessions.match = cfg.session_match;
  // With one conversation the queue is unbounded, as it always was; with several, a request
  // that would wait behind more than this many is answered 503 + Retry-After.
  if (options.sessions.max_sessions > 1)
    options.sessions.max_queued = kMaxQueuedPerSession * cfg.parallel;
  options.offload.config = cfg.offload;
  options.offload.persist = cfg.persist;
  options.offload.key_file = cfg.key_file;
  options.offload.exit_save_limit = std::chrono::seconds(cfg.exit_save_seconds);
  // Losing the session's memory is the server's to handle (main: one line, exit 70).
  options.offload.on_fatal = std::move(on_session_lost);
  options.log = log;  // the device's note, the clean-up, one line per save, restore, fallback
  runtime::StackPart failed = runtime::StackPart::kDevice;
  Result<std::unique_ptr<runtime::EngineStack>> stack =
      runtime::EngineStack::open(std::move(options), clock, &failed);
  if (!stack.ok()) {
    const Status& status = stack.status();
    switch (failed) {
      case runtime::StackPart::kDevice:
        // CUDA asked for and unusable: say which flag asked.
        if (cfg.backend == runtime::BackendKind::kCuda &&
            status.code() == StatusCode::kUnsupported) {
          return status.with_context("--backend cuda");
        }
        return status;
      case runtime::StackPart::kStorage: return status.with_context("opening --cache-disk-dir");
      case runtime::StackPart::kEngine: return status;
    }
    return status;
  }
  app->stack_ = std::move(stack).value();
  return app;
}

StatusSnapshot ServerApp::status() const {
  StatusSnapshot snapshot;
  snapshot.version = std::string(server_version());
  snapshot.uptime_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.now() - started_).count();
  const runtime::EngineStack& stack = *stack_;
  snapshot.backend_name = stack.backend().name();
  snapshot.kernels_name = stack.kernels().name();
  snapshot.granularity = stack.backend().granularity();
  snapshot.memory = stack.backend().stats();

  const engine::ModelConfig& model = stack.engine().config();
  snapshot.model = {model.name, model.context, model.kv_type, model.layers, model.dim};
  const engine::EngineStatus engine = stack.engine().status();
  snapshot.engine = {engine.busy, engine.queued_commands, engine.commands_run,
                     engine.history_tokens};
  snapshot.cache = stack.engine().cache_status();
  snapshot.clients_gone = clients_gone();
  if (stack.engine().options().sessions.max_sessions > 1) {
    snapshot.sessions = stack.engine().sessions();
  }
  snapshot.refused_busy = engine.refused_busy;
  snapshot.evictions = engine.evictions;
  snapshot.forgotten = engine.forgotten;
  snapshot.persist = engine.persist;
  snapshot.adoption = engine.adoption;
  snapshot.cold_reads = engine.cold_reads;
  snapshot.wait_seconds = engine.wait_seconds;
  if (const RamTier* tier = stack.ram_tier()) snapshot.ram_tier = tier->stats();
  if (const DiskBudget* budget = stack.disk_budget()) snapshot.disk_budget = budget->stats();
  return snapshot;
}

std::string ServerApp::metrics_text() const { return server::metrics_text(status()); }

std::shared_ptr<std::atomic<bool>> ServerApp::new_request_token() {
  auto token = std::make_shared<std::atomic<bool>>(false);
  MutexLock lock(tokens_mutex_);
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
  MutexLock lock(tokens_mutex_);
  cancelled_ = true;
  for (const std::weak_ptr<std::atomic<bool>>& weak : tokens_) {
    if (std::shared_ptr<std::atomic<bool>> token = weak.lock()) token->store(true);
  }
  tokens_.clear();
}

}  // namespace siesta::server
