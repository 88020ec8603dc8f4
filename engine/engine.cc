#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "engine/generation.h"

namespace siesta::engine {
namespace {

// Import errors that the reader reports before it writes a byte of the regions.
bool import_left_session_untouched(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kForeign:
    case StatusCode::kUnsupported:
    case StatusCode::kExpired: return true;
    default: return false;
  }
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::start(const EngineOptions& options, MemoryBackend& backend,
                                              Kernels& kernels, HostVmm& host, FileSystem& fs,
                                              const Clock& clock) {
  if (options.sessions.parallel < 1 || options.sessions.parallel > kMaxParallel) {
    return InvalidArgument("parallel sessions must be 1.." + std::to_string(kMaxParallel) +
                           ", got " + std::to_string(options.sessions.parallel));
  }
  if (options.sessions.max_sessions < options.sessions.parallel ||
      options.sessions.max_sessions > kMaxSessions) {
    return InvalidArgument(
        "conversations kept must be " + std::to_string(options.sessions.parallel) + ".." +
        std::to_string(kMaxSessions) + ", got " + std::to_string(options.sessions.max_sessions));
  }
  if (options.sessions.max_sessions > options.sessions.parallel &&
      !options.offload.options.config.enabled()) {
    return InvalidArgument(
        "keeping more conversations than sessions committed at once needs idle offload");
  }
  if (!(options.sessions.match >= 0 && options.sessions.match <= 1)) {
    return InvalidArgument("the session match share must be within 0..1");
  }
  const Deps deps{backend, host, fs, clock};
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                          Model::load(options.model, backend, kernels));
  std::unique_ptr<SnapshotExporter> exporter;
  if (!options.export_dir.empty()) {
    SIESTA_ASSIGN_OR_RETURN(exporter,
                            SnapshotExporter::open(fs, clock, &backend, options.export_dir,
                                                   SnapshotExporter::Options()));
  }
  const EngineOffload& offload = options.offload;
  if (offload.persist && (!offload.options.config.enabled() || offload.key == nullptr ||
                          offload.store == nullptr || !offload.options.config.encrypt)) {
    return InvalidArgument(
        "conversations that survive a restart need idle offload, its store and key, and AES "
        "seals");
  }
  auto table = std::make_unique<SessionTable>(
      SessionTableOptions{options.sessions.max_sessions, options.sessions.match});
  RouteSource route_of = [table = table.get()](uint32_t id) {
    // A number no command reached yet holds nothing: its route says so (no key, no history).
    return encode_route(table->kept(id).value_or(ConversationRoute{id, std::nullopt, {}}));
  };
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<SessionPool> pool,
                          SessionPool::create({backend, host, fs, clock, *model, kernels}, offload,
                                              options.sessions.max_sessions,
                                              options.sessions.parallel, std::move(route_of)));
  AdoptionReport adoption;
  if (offload.persist) {
    adoption = adopt_conversations(
        {*pool, *table, *offload.store, *offload.key, fs, clock, offload.options.log});
  }
  return std::unique_ptr<Engine>(new Engine(options, deps, std::move(model), std::move(table),
                                            std::move(pool), std::move(exporter), kernels,
                                            adoption));
}

Engine::Engine(const EngineOptions& options, Deps deps, std::unique_ptr<Model> model,
               std::unique_ptr<SessionTable> table, std::unique_ptr<SessionPool> pool,
               std::unique_ptr<SnapshotExporter> exporter, Kernels& kernels,
               AdoptionReport adoption)
    : options_(options),
      deps_(deps),
      model_(std::move(model)),
      exporter_(std::move(exporter)),
      kernels_(kernels),
      table_(std::move(table)),
      pool_(std::move(pool)),
      adoption_(adoption),
      history_tokens_(pool_->session(0).history_tokens()),
      thread_([this] { thread_main(); }) {}

Engine::~Engine() {
  std::deque<Command> abandoned;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    abandoned.swap(queue_);
  }
  wake_.notify_all();
  changed_.notify_all();
  for (Command& command : abandoned) {
    command.fail(Cancelled(std::string(command.name) + " was not run: the engine shut down"));
  }
  thread_.join();  // after the running command, if any, has finished
  if (options_.offload.persist) {
    // Kept across the restart: what is not on disk yet goes there, the most recent first.
    std::vector<TableEntry> entries = table_->entries();
    std::sort(entries.begin(), entries.end(),
              [](const TableEntry& a, const TableEntry& b) { return a.last_use > b.last_use; });
    std::vector<uint32_t> order;
    order.reserve(entries.size());
    for (const TableEntry& entry : entries) order.push_back(entry.id);
    (void)pool_->save_for_exit(order);
  }
  pool_.reset();  // each Offloader before its Session, before the model and the exporter
}

template <class R>
std::future<R> Engine::submit(
    std::string_view name, SessionRoute route, std::string prompt,
    std::function<std::optional<R>(uint32_t, Session&, const Admission&)> step) {
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  auto outcome = std::make_shared<std::optional<R>>();
  Command command;
  command.name = name;
  command.route = route;
  command.prompt = std::move(prompt);
  command.submitted = deps_.clock.now();
  command.step = [step = std::move(step), outcome, name](uint32_t id, Session& session,
                                                         const Admission& admission) {
    // Exceptions do not cross module boundaries (a throwing on_text, bad_alloc): the caller
    // gets a Status instead of a broken promise.
    try {
      std::optional<R> done = step(id, session, admission);
      if (!done) return false;
      outcome->emplace(std::move(*done));
    } catch (...) {
      outcome->emplace(R(Internal(std::string(name) + " threw an exception")));
    }
    return true;
  };
  command.deliver = [promise, outcome] { promise->set_value(std::move(**outcome)); };
  command.fail = [promise](Status status) { promise->set_value(R(std::move(status))); };
  enqueue(std::move(command));
  return future;
}

void Engine::enqueue(Command command) {
  if (command.route.key && options_.offload.persist) {
    // What the table keeps, and the snapshot's route carries, is an HMAC under the snapshot
    // key: found again after a restart under the same key file, worthless without it.
    Result<snapshot::HeaderDigest> sealed =
        keyed_digest(*options_.offload.key, "siesta-conversation-key-v1", *command.route.key);
    if (!sealed.ok()) {
      command.fail(sealed.status());
      return;
    }
    static_assert(sizeof(SessionKey) == sizeof(snapshot::HeaderDigest));
    std::copy(sealed->begin(), sealed->end(), command.route.key->begin());
  }
  {
    MutexLock lock(mutex_);
    const size_t queued = queue_.size() + waiting_count_;
    if (!stopping_ && options_.sessions.max_queued != 0 && queued >= options_.sessions.max_queued) {
      ++refused_busy_;
      command.fail(
          Unavailable(std::to_string(queued) + " requests are waiting already; retry later"));
      return;
    }
    if (!stopping_) {
      queue_.push_back(std::move(command));
      wake_.notify_one();
      changed_.notify_all();
      return;
    }
  }
  command.fail(Cancelled(std::string(command.name) + " was not run: the engine is shutting down"));
}

template <class R>
std::future<R> Engine::submit_once(std::string_view name, SessionRoute route,
                                   std::function<R(Session&)> body) {
  return submit<R>(name, route, "",
                   [body = std::move(body)](uint32_t, Session& session, const Admission&) {
                     return std::optional<R>(body(session));
                   });
}

void Engine::thread_main() {
  for (;;) {
    bool stopping = false;
    {
      MutexLock lock(mutex_);
      // Nothing runs: every waiting command can start (none has a busy conversation).
      lock.wait(wake_, [this]() SIESTA_REQUIRES(mutex_) {
        return stopping_ || !queue_.empty() || !running_.empty() || !waiting_.empty();
      });
      stopping = stopping_;
      while (!stopping && !queue_.empty()) {
        waiting_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      waiting_count_ = waiting_.size();
    }
    if (stopping) {
      // The destructor fails what is queued; what waits here is failed here. What runs ends.
      for (Command& command : waiting_) {
        command.fail(Cancelled(std::string(command.name) + " was not run: the engine shut down"));
      }
      waiting_.clear();
      {
        MutexLock lock(mutex_);
        waiting_count_ = 0;
      }
      if (running_.empty()) return;
    } else {
      start_waiting();
    }
    step_running();
  }
}

void Engine::count_finished() {
  MutexLock lock(mutex_);
  ++commands_run_;
  busy_ = !running_.empty();
  changed_.notify_all();
}

void Engine::start_waiting() {
  for (auto it = waiting_.begin();
       it != waiting_.end() && running_.size() < options_.sessions.parallel;) {
    Command& command = *it;
    Result<RouteChoice> routed =
        command.forget
            ? table_->find(command.route, deps_.clock.now())
            : table_->route(command.route,
                            std::span(reinterpret_cast<const Token*>(command.prompt.data()),
                                      command.prompt.size()),
                            deps_.clock.now());
    if (routed.ok() && routed->wait) {
      ++it;  // its conversation runs a command: it starts after that one ends
      continue;
    }
    Command started = std::move(command);
    it = waiting_.erase(it);
    {
      MutexLock lock(mutex_);
      waiting_count_ = waiting_.size();
      busy_ = true;
      wait_seconds_.observe(
          std::chrono::duration<double>(deps_.clock.now() - started.submitted).count());
      if (routed.ok()) last_used_ = routed->id;
      changed_.notify_all();
    }
    if (!routed.ok()) {
      count_finished();
      started.fail(routed.status());
      continue;
    }
    const uint32_t id = routed->id;
    if (started.forget) {  // no lease: an offloaded conversation is not restored to forget it
      Status forgotten = forget_conversation(id);
      count_finished();
      started.fail(std::move(forgotten));  // its outcome, OK included
      continue;
    }
    // The session's memory first: room made, restored, or its unusable history discarded. A
    // restore refused for memory (or a lost session) fails the command before it touches
    // anything.
    Status prepared = pool_->prepare(*routed, *table_);
    Result<Offloader::Lease> leased =
        prepared.ok() ? pool_->offloader(id).acquire() : Result<Offloader::Lease>(prepared);
    if (!leased.ok()) {
      table_->end(id, std::nullopt, deps_.clock.now());
      count_finished();
      started.fail(leased.status());
      continue;
    }
    Session& session = pool_->session(id);
    Status discarded =
        routed->forget && session.history_tokens() != 0 ? session.discard_history() : Status::Ok();
    if (!discarded.ok()) {
      // The session's state is unknown: the command fails as a kernels error would.
      publish_history(session);
      table_->end(id, session.history(), deps_.clock.now());
      leased->release();
      count_finished();
      started.fail(discarded);
      continue;
    }
    running_.push_back(Running{std::move(started), id, std::move(leased).value()});
  }
}

void Engine::step_running() {
  // Each running command's turn, in the order they started; one that ends leaves the list.
  for (size_t i = 0; i < running_.size();) {
    Running& running = running_[i];
    Session& session = pool_->session(running.id);
    if (!running.command.step(running.id, session, running.lease.admission())) {
      ++i;
      continue;
    }
    Running ended = std::move(running);
    running_.erase(running_.begin() + static_cast<ptrdiff_t>(i));
    end_running(ended);
  }
}

void Engine::end_running(Running& running) {
  const uint32_t id = running.id;
  Session& session = pool_->session(id);
  publish_history(session);
  table_->end(id, session.history(), deps_.clock.now());
  running.lease.release();  // the idle timer counts from now
  // More conversations than fit on the device: one will have to make room for another, and the
  // least recently used goes first. Written now, in the background, its eviction later only
  // releases the memory, instead of a save on the returning conversation's time.
  if (table_->conversations() > options_.sessions.parallel) {
    pool_->offloader(id).save_ahead().ignore();  // refused only when it cannot matter
  }
  count_finished();
  // Delivered last, so that a caller who has the result sees it counted in status().
  running.command.deliver();
}

OffloadStatus Engine::cache_status() const {
  uint32_t last = 0;
  {
    MutexLock lock(mutex_);
    last = last_used_;
  }
  return pool_->cache_status(last);
}

std::vector<SessionStatus> Engine::sessions() const { return pool_->sessions(table_->entries()); }

Status Engine::offload_now() { return pool_->offload_now(); }

EngineStatus Engine::status() const {
  MutexLock lock(mutex_);
  return status_locked();
}

EngineStatus Engine::status_locked() const {
  EngineStatus s;
  const ModelConfig& config = model_->config();
  s.model = config.name;
  s.kv_type = config.kv_type;
  s.context = config.context;
  s.history_tokens = history_tokens_.load();
  s.busy = busy_;
  s.queued_commands = queue_.size() + waiting_count_;
  s.commands_run = commands_run_;
  s.refused_busy = refused_busy_;
  s.evictions = pool_->evictions();
  s.forgotten = table_->counters().forgotten;
  s.wait_seconds = wait_seconds_;
  s.persist = options_.offload.persist;
  s.adoption = adoption_;
  s.cold_reads = pool_->cold_reads();
  return s;
}

bool Engine::wait_for_status(const std::function<bool(const EngineStatus&)>& done,
                             std::chrono::milliseconds timeout) const {
  MutexLock lock(mutex_);
  return lock.wait_for(changed_, timeout,
                       [&]() SIESTA_REQUIRES(mutex_) { return done(status_locked()); });
}

std::future<Result<GenerateResult>> Engine::generate(GenerateRequest request) {
  SessionRoute route = request.route;
  std::string prompt = request.prompt;
  // The request lives in the command; its Generation is made at the command's first step.
  auto owned = std::make_shared<GenerateRequest>(std::move(request));
  std::shared_ptr<Generation> generation;
  return submit<Result<GenerateResult>>(
      "generate", route, std::move(prompt),
      [this, owned, generation](uint32_t id, Session& session, const Admission& admission) mutable
      -> std::optional<Result<GenerateResult>> {
        if (!generation) {
          generation = std::make_shared<Generation>(*owned, session, kernels_, model_->config(),
                                                    admission, id, prefill_speed_,
                                                    [this, &session] { publish_history(session); });
        }
        if (!generation->step()) return std::nullopt;
        return generation->take_result();
      });
}

std::future<Status> Engine::forget(SessionRoute route) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  Command command;
  command.name = "forget";
  command.route = route;
  command.submitted = deps_.clock.now();
  command.fail = [promise](Status status) { promise->set_value(std::move(status)); };
  command.forget = true;
  enqueue(std::move(command));
  return future;
}

Status Engine::forget_conversation(uint32_t id) {
  Status forgotten = pool_->forget(id);
  table_->forget(id);
  if (pool_->made(id)) publish_history(pool_->session(id));
  table_->end(id, std::nullopt, deps_.clock.now());
  return forgotten;
}

std::future<Status> Engine::reset(uint32_t slot) {
  return submit_once<Status>("reset", operator_route_to_slot(slot),
                             [this](Session& session) { return do_reset(session); });
}

std::future<Result<ExportResult>> Engine::export_conversation(std::string name, uint32_t slot) {
  return submit_once<Result<ExportResult>>(
      "export", operator_route_to_slot(slot),
      [this, name = std::move(name)](Session& session) { return do_export(session, name); });
}

std::future<Result<ImportResult>> Engine::import_conversation(std::string name, uint32_t slot) {
  return submit_once<Result<ImportResult>>(
      "import", operator_route_to_slot(slot),
      [this, name = std::move(name)](Session& session) { return do_import(session, name); });
}

Status Engine::discard_after(Session& session, Status error) {
  Status outcome = discard_history_after(session, std::move(error));
  publish_history(session);
  return outcome;
}

Status Engine::do_reset(Session& session) {
  Status discarded = session.discard_history();
  publish_history(session);
  return discarded;
}

Result<ExportResult> Engine::do_export(Session& session, const std::string& name) {
  if (!exporter_) {
    return FailedPrecondition("export is off: the engine was started without an export directory");
  }
  SIESTA_RETURN_IF_ERROR(validate_export_name(name));
  // The regions must not change while they are copied: wait for every kernel enqueued.
  Status synced = kernels_.synchronize();
  if (!synced.ok()) return discard_after(session, synced);
  const std::vector<SnapshotRegion> regions = session.snapshot_regions();
  SIESTA_ASSIGN_OR_RETURN(SnapshotWriteResult written,
                          exporter_->export_session(name, session.fingerprint(), regions));
  return ExportResult{written.file_bytes, session.history_tokens()};
}

Result<ImportResult> Engine::do_import(Session& session, const std::string& name) {
  if (!exporter_) {
    return FailedPrecondition("import is off: the engine was started without an export directory");
  }
  SIESTA_RETURN_IF_ERROR(validate_export_name(name));
  Status synced = kernels_.synchronize();
  if (!synced.ok()) return discard_after(session, synced);
  const std::vector<SnapshotRegion> regions = session.snapshot_regions();
  Result<SnapshotReadResult> read = exporter_->import_session(name, session.fingerprint(), regions);
  if (!read.ok()) {
    if (import_left_session_untouched(read.status().code())) return read.status();
    return discard_after(session,
                         read.status());  // the regions may hold a mix of old and new bytes
  }
  Status adopted = session.adopt_restored_state();
  if (!adopted.ok()) return discard_after(session, adopted);
  publish_history(session);
  return ImportResult{session.history_tokens(), read->file_bytes};
}

Status Engine::erase_export(std::string_view name) {
  if (!exporter_) {
    return FailedPrecondition("erase is off: the engine was started without an export directory");
  }
  return exporter_->erase(name);
}

}  // namespace siesta::engine
