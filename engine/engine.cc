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

Result<std::unique_ptr<Engine::Slot>> Engine::make_slot(const EngineOptions& options, Deps deps,
                                                        const Model& model, Kernels& kernels,
                                                        uint32_t id) {
  auto slot = std::make_unique<Slot>();
  SIESTA_ASSIGN_OR_RETURN(slot->session, Session::create(model, deps.backend, kernels, deps.host));
  // Always an Offloader: with offload off it reports "disabled" and admits every command at
  // once, so that there is one way to be disabled (offload_enabled()).
  const EngineOffload& offload = options.offload;
  OffloaderOptions offloader_options = offload.options;
  if (id != 0) offloader_options.session = std::to_string(id);
  SIESTA_ASSIGN_OR_RETURN(
      slot->offloader, Offloader::create({*slot->session, deps.backend, deps.host, deps.fs,
                                          deps.clock, offload.executor, offload.store, offload.key},
                                         std::move(offloader_options)));
  return slot;
}

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
      !offload_enabled(options.offload.options.idle_seconds)) {
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
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<Slot> first,
                          make_slot(options, deps, *model, kernels, 0));
  return std::unique_ptr<Engine>(
      new Engine(options, deps, std::move(model), std::move(first), std::move(exporter), kernels));
}

Engine::Engine(const EngineOptions& options, Deps deps, std::unique_ptr<Model> model,
               std::unique_ptr<Slot> first, std::unique_ptr<SnapshotExporter> exporter,
               Kernels& kernels)
    : options_(options),
      deps_(deps),
      model_(std::move(model)),
      exporter_(std::move(exporter)),
      kernels_(kernels),
      table_({options.sessions.max_sessions, options.sessions.match}),
      history_tokens_(first->session->history_tokens()),
      thread_([this] { thread_main(); }) {
  MutexLock lock(slots_mu_);
  slots_.resize(options.sessions.max_sessions);
  slots_[0] = std::move(first);
}

Engine::~Engine() {
  std::deque<Command> abandoned;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    abandoned.swap(queue_);
  }
  wake_.notify_all();
  changed_.notify_all();
  for (Command& command : abandoned) {
    command.fail(Cancelled(std::string(command.name) + " was not run: the engine shut down"));
  }
  thread_.join();  // after the running command, if any, has finished
  // Each slot's Offloader goes before its Session (Slot's member order).
  MutexLock lock(slots_mu_);
  slots_.clear();
}

template <class R>
std::future<R> Engine::submit(std::string_view name, SessionRoute route, std::string prompt,
                              std::function<std::optional<R>(Session&, const Admission&)> step) {
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  auto outcome = std::make_shared<std::optional<R>>();
  Command command;
  command.name = name;
  command.route = route;
  command.prompt = std::move(prompt);
  command.submitted = deps_.clock.now();
  command.step = [step = std::move(step), outcome, name](Session& session,
                                                         const Admission& admission) {
    // Exceptions do not cross module boundaries (a throwing on_text, bad_alloc): the caller
    // gets a Status instead of a broken promise.
    try {
      std::optional<R> done = step(session, admission);
      if (!done) return false;
      outcome->emplace(std::move(*done));
    } catch (...) {
      outcome->emplace(R(Internal(std::string(name) + " threw an exception")));
    }
    return true;
  };
  command.deliver = [promise, outcome] { promise->set_value(std::move(**outcome)); };
  command.fail = [promise](Status status) { promise->set_value(R(std::move(status))); };
  {
    std::lock_guard lock(mutex_);
    const size_t queued = queue_.size() + waiting_count_;
    if (!stopping_ && options_.sessions.max_queued != 0 && queued >= options_.sessions.max_queued) {
      ++refused_busy_;
      command.fail(
          Unavailable(std::to_string(queued) + " requests are waiting already; retry later"));
      return future;
    }
    if (!stopping_) {
      queue_.push_back(std::move(command));
      wake_.notify_one();
      changed_.notify_all();
      return future;
    }
  }
  command.fail(Cancelled(std::string(name) + " was not run: the engine is shutting down"));
  return future;
}

template <class R>
std::future<R> Engine::submit_once(std::string_view name, SessionRoute route,
                                   std::function<R(Session&)> body) {
  return submit<R>(name, route, "", [body = std::move(body)](Session& session, const Admission&) {
    return std::optional<R>(body(session));
  });
}

void Engine::thread_main() {
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      // Nothing runs: every waiting command can start (none has a busy conversation).
      wake_.wait(lock, [this] {
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
        std::lock_guard lock(mutex_);
        waiting_count_ = 0;
      }
      if (running_.empty()) return;
    } else {
      start_waiting();
    }
    step_running();
  }
}

bool Engine::holds_memory(uint32_t id) const {
  const Slot* slot = slots_[id].get();
  if (slot == nullptr) return false;
  const OffloadStatus status = slot->offloader->status();
  if (status.memory_lost) return false;
  switch (status.state) {
    case OffloadState::kDisabled:
    case OffloadState::kResident:
    case OffloadState::kSaving: return true;
    default: return false;
  }
}

Status Engine::make_room(uint32_t id) {
  for (;;) {
    uint32_t committed = 0;
    for (uint32_t other = 0; other < slots_.size(); ++other) {
      if (other != id && holds_memory(other)) ++committed;
    }
    if (committed < options_.sessions.parallel) return Status::Ok();
    std::optional<uint32_t> victim = table_.least_recent_idle(
        [&](uint32_t other) { return other != id && holds_memory(other); });
    if (!victim) {
      return Unavailable("all " + std::to_string(options_.sessions.parallel) +
                         " sessions on the device are busy; retry later");
    }
    Status evicted = slots_[*victim]->offloader->evict();
    if (!evicted.ok()) {
      return Unavailable("no device room for this conversation now: offloading session " +
                         std::to_string(*victim) + " failed: " + evicted.to_string());
    }
    evictions_.fetch_add(1);
  }
}

Status Engine::prepare_slot(const RouteChoice& choice) {
  const uint32_t id = choice.id;
  if (slots_[id] == nullptr) {
    SIESTA_RETURN_IF_ERROR(make_room(id));
    SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<Slot> made,
                            make_slot(options_, deps_, *model_, kernels_, id));
    MutexLock lock(slots_mu_);
    slots_[id] = std::move(made);
    return Status::Ok();
  }
  if (choice.forget) {
    // A snapshot on disk is deleted now; a resident history is discarded under the lease. A
    // failed deletion is retried by the offloader, and the next restore is fresh anyway.
    (void)slots_[id]->offloader->forget();
  }
  if (!holds_memory(id)) SIESTA_RETURN_IF_ERROR(make_room(id));
  return Status::Ok();
}

void Engine::count_finished() {
  std::lock_guard lock(mutex_);
  ++commands_run_;
  busy_ = !running_.empty();
  changed_.notify_all();
}

void Engine::start_waiting() {
  for (auto it = waiting_.begin();
       it != waiting_.end() && running_.size() < options_.sessions.parallel;) {
    Command& command = *it;
    Result<RouteChoice> routed = table_.route(
        command.route,
        std::span(reinterpret_cast<const Token*>(command.prompt.data()), command.prompt.size()),
        deps_.clock.now());
    if (routed.ok() && routed->wait) {
      ++it;  // its conversation runs a command: it starts after that one ends
      continue;
    }
    Command started = std::move(command);
    it = waiting_.erase(it);
    {
      std::lock_guard lock(mutex_);
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
    // The session's memory first: room made, restored, or its unusable history discarded. A
    // restore refused for memory (or a lost session) fails the command before it touches
    // anything.
    Status prepared = prepare_slot(*routed);
    Result<Offloader::Lease> leased =
        prepared.ok() ? slots_[id]->offloader->acquire() : Result<Offloader::Lease>(prepared);
    if (!leased.ok()) {
      table_.end(id, std::nullopt, deps_.clock.now());
      count_finished();
      started.fail(leased.status());
      continue;
    }
    Session& session = *slots_[id]->session;
    Status discarded =
        routed->forget && session.history_tokens() != 0 ? session.discard_history() : Status::Ok();
    if (!discarded.ok()) {
      // The session's state is unknown: the command fails as a kernels error would.
      publish_history(session);
      table_.end(id, session.history(), deps_.clock.now());
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
    Session& session = *slots_[running.id]->session;
    if (!running.command.step(session, running.lease.admission())) {
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
  Session& session = *slots_[id]->session;
  publish_history(session);
  table_.end(id, session.history(), deps_.clock.now());
  running.lease.release();  // the idle timer counts from now
  // More conversations than fit on the device: one will have to make room for another, and the
  // least recently used goes first. Written now, in the background, its eviction later only
  // releases the memory, instead of a save on the returning conversation's time.
  if (table_.conversations() > options_.sessions.parallel) {
    slots_[id]->offloader->save_ahead().ignore();  // refused only when it cannot matter
  }
  count_finished();
  // Delivered last, so that a caller who has the result sees it counted in status().
  running.command.deliver();
}

namespace {

void add_histogram(DurationHistogram& total, const DurationHistogram& more) {
  for (size_t i = 0; i < DurationHistogram::kBuckets; ++i)
    total.cumulative[i] += more.cumulative[i];
  total.count += more.count;
  total.sum_seconds += more.sum_seconds;
}

void add_counters(OffloadCounters& total, const OffloadCounters& more) {
  total.saves += more.saves;
  total.saves_ahead += more.saves_ahead;
  total.delta_saves += more.delta_saves;
  total.restores += more.restores;
  total.restore_hits += more.restore_hits;
  for (size_t i = 0; i < kFallbackReasonCount; ++i) total.fallbacks[i] += more.fallbacks[i];
  total.expirations += more.expirations;
  total.write_failures += more.write_failures;
  total.cancelled_saves += more.cancelled_saves;
  total.out_of_memory_retries += more.out_of_memory_retries;
  total.delete_failures += more.delete_failures;
  add_histogram(total.save_seconds, more.save_seconds);
  add_histogram(total.restore_seconds, more.restore_seconds);
}

}  // namespace

OffloadStatus Engine::cache_status() const {
  uint32_t last = 0;
  {
    std::lock_guard lock(mutex_);
    last = last_used_;
  }
  MutexLock lock(slots_mu_);
  if (slots_.size() == 1) return slots_[0]->offloader->status();
  // Totals over every conversation, the state and times of the one used last.
  OffloadStatus total;
  bool first = true;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    if (slots_[id] == nullptr) continue;
    const OffloadStatus one = slots_[id]->offloader->status();
    if (first || id == last) {
      OffloadStatus kept = total;
      total = one;
      if (!first) {
        total.disk_bytes = kept.disk_bytes + one.disk_bytes;
        total.released_vram_bytes = kept.released_vram_bytes + one.released_vram_bytes;
        total.released_host_bytes = kept.released_host_bytes + one.released_host_bytes;
        total.tokens = kept.tokens + one.tokens;
        total.counters = kept.counters;
        add_counters(total.counters, one.counters);
        total.command_waiting = kept.command_waiting || one.command_waiting;
        total.memory_lost = kept.memory_lost || one.memory_lost;
        if (total.last_error.empty()) total.last_error = kept.last_error;
      }
      first = false;
      continue;
    }
    total.disk_bytes += one.disk_bytes;
    total.released_vram_bytes += one.released_vram_bytes;
    total.released_host_bytes += one.released_host_bytes;
    total.tokens += one.tokens;
    add_counters(total.counters, one.counters);
    total.command_waiting = total.command_waiting || one.command_waiting;
    total.memory_lost = total.memory_lost || one.memory_lost;
    if (total.last_error.empty()) total.last_error = one.last_error;
  }
  return total;
}

std::vector<SessionStatus> Engine::sessions() const {
  const std::vector<TableEntry> entries = table_.entries();
  std::vector<SessionStatus> out;
  MutexLock lock(slots_mu_);
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    if (slots_[id] == nullptr) continue;
    const OffloadStatus one = slots_[id]->offloader->status();
    SessionStatus s;
    s.id = id;
    s.state = one.state;
    s.tokens = one.tokens;
    s.disk_bytes = one.disk_bytes;
    s.seconds_idle = one.seconds_since_activity;
    s.restores = one.counters.restores;
    for (uint64_t n : one.counters.fallbacks) s.fallbacks += n;
    for (const TableEntry& entry : entries) {
      if (entry.id != id) continue;
      s.tokens = entry.history_tokens;
      s.busy = entry.busy;
      s.keyed = entry.keyed;
      s.commands = entry.commands;
    }
    out.push_back(s);
  }
  return out;
}

Status Engine::offload_now() {
  MutexLock lock(slots_mu_);
  if (slots_.size() == 1) return slots_[0]->offloader->offload_now();
  if (!offload_enabled(options_.offload.options.idle_seconds)) {
    return FailedPrecondition("idle offload is disabled");
  }
  // Every idle conversation; one running a command is left to its idle timer.
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (slot != nullptr) slot->offloader->offload_now().ignore();
  }
  return Status::Ok();
}

EngineStatus Engine::status() const {
  std::lock_guard lock(mutex_);
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
  s.evictions = evictions_.load();
  s.forgotten = table_.counters().forgotten;
  s.wait_seconds = wait_seconds_;
  return s;
}

bool Engine::wait_for_status(const std::function<bool(const EngineStatus&)>& done,
                             std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return done(status_locked()); });
}

std::future<Result<GenerateResult>> Engine::generate(GenerateRequest request) {
  SessionRoute route = request.route;
  std::string prompt = request.prompt;
  // The request lives in the command; its Generation is made at the command's first step.
  auto owned = std::make_shared<GenerateRequest>(std::move(request));
  std::shared_ptr<Generation> generation;
  return submit<Result<GenerateResult>>(
      "generate", route, std::move(prompt),
      [this, owned, generation](Session& session, const Admission& admission) mutable
      -> std::optional<Result<GenerateResult>> {
        if (!generation) {
          generation =
              std::make_shared<Generation>(*owned, session, kernels_, model_->config(), admission,
                                           [this, &session] { publish_history(session); });
        }
        if (!generation->step()) return std::nullopt;
        return generation->take_result();
      });
}

std::future<Status> Engine::reset(uint32_t slot) {
  return submit_once<Status>("reset", route_by_slot(slot),
                             [this](Session& session) { return do_reset(session); });
}

std::future<Result<ExportResult>> Engine::export_conversation(std::string name, uint32_t slot) {
  return submit_once<Result<ExportResult>>(
      "export", route_by_slot(slot),
      [this, name = std::move(name)](Session& session) { return do_export(session, name); });
}

std::future<Result<ImportResult>> Engine::import_conversation(std::string name, uint32_t slot) {
  return submit_once<Result<ImportResult>>(
      "import", route_by_slot(slot),
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
