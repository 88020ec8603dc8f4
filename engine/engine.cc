#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "engine/prefill_pacer.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer.h"

namespace siesta::engine {
namespace {

// The whole request is checked before the session is touched, so a refused request leaves
// it exactly as it was.
Status validate_request(const GenerateRequest& request, const ModelConfig& config) {
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
  if (request.max_tokens == 0) return InvalidArgument("max_tokens must be at least 1");
  // One token per byte; in 64 bits so that no max_tokens can overflow the sum.
  const uint64_t prompt_tokens = request.prompt.size();
  if (prompt_tokens + request.max_tokens > config.context) {
    return InvalidArgument("this model's context is " + std::to_string(config.context) +
                           " tokens; the prompt has " + std::to_string(prompt_tokens) +
                           " and max_tokens asks for " + std::to_string(request.max_tokens));
  }
  if (request.stop.size() > kMaxStopStrings) {
    return InvalidArgument("at most " + std::to_string(kMaxStopStrings) +
                           " stop strings are accepted, got " +
                           std::to_string(request.stop.size()));
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    const std::string& s = request.stop[i];
    if (s.empty() || s.size() > kMaxStopBytes) {
      return InvalidArgument("stop string " + std::to_string(i) + " has " +
                             std::to_string(s.size()) + " bytes; it must have 1 to " +
                             std::to_string(kMaxStopBytes));
    }
    if (!is_valid_utf8(s)) {
      return InvalidArgument("stop string " + std::to_string(i) + " is not valid UTF-8");
    }
  }
  return validate_temperature(request.temperature);
}

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

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

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
  session_ = slots_[0]->session.get();
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
                              std::function<R()> body) {
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  auto outcome = std::make_shared<std::optional<R>>();
  Command command;
  command.name = name;
  command.route = route;
  command.prompt = std::move(prompt);
  command.submitted = deps_.clock.now();
  command.run = [body = std::move(body), outcome, name] {
    // Exceptions do not cross module boundaries (a throwing on_text, bad_alloc): the caller
    // gets a Status instead of a broken promise.
    try {
      outcome->emplace(body());
    } catch (...) {
      outcome->emplace(R(Internal(std::string(name) + " threw an exception")));
    }
  };
  command.deliver = [promise, outcome] { promise->set_value(std::move(**outcome)); };
  command.fail = [promise](Status status) { promise->set_value(R(std::move(status))); };
  {
    std::lock_guard lock(mutex_);
    if (!stopping_ && options_.sessions.max_queued != 0 &&
        queue_.size() >= options_.sessions.max_queued) {
      ++refused_busy_;
      command.fail(Unavailable(std::to_string(queue_.size()) +
                               " requests are waiting already; retry later"));
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

void Engine::thread_main() {
  for (;;) {
    Command command;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;  // the destructor fails what is queued
      command = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      wait_seconds_.observe(
          std::chrono::duration<double>(deps_.clock.now() - command.submitted).count());
      changed_.notify_all();
    }
    run_command(command);
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

void Engine::run_command(Command& command) {
  auto finished = [this] {
    std::lock_guard lock(mutex_);
    ++commands_run_;
    busy_ = false;
    changed_.notify_all();
  };
  Result<RouteChoice> routed = table_.route(
      command.route,
      std::span(reinterpret_cast<const Token*>(command.prompt.data()), command.prompt.size()),
      deps_.clock.now());
  if (!routed.ok()) {
    finished();
    command.fail(routed.status());
    return;
  }
  const uint32_t id = routed->id;
  {
    std::lock_guard lock(mutex_);
    last_used_ = id;
  }
  // The session's memory first: room made, restored, or its unusable history discarded. A
  // restore refused for memory (or a lost session) fails the command before it touches
  // anything.
  Status prepared = prepare_slot(*routed);
  Result<Offloader::Lease> leased =
      prepared.ok() ? slots_[id]->offloader->acquire() : Result<Offloader::Lease>(prepared);
  if (!leased.ok()) {
    table_.end(id, std::nullopt, deps_.clock.now());
    finished();
    command.fail(leased.status());
    return;
  }
  session_ = slots_[id]->session.get();
  {
    const Offloader::Lease lease = std::move(leased).value();
    admission_ = lease.admission();
    Status discarded = routed->forget && session_->history_tokens() != 0
                           ? session_->discard_history()
                           : Status::Ok();
    if (discarded.ok()) {
      command.run();
    } else {
      // The session's state is unknown: the command fails as a kernels error would.
      command.fail(discarded);
      command.deliver = [] {};
    }
    publish_history();
    table_.end(id, session_->history(), deps_.clock.now());
  }  // the lease goes back here: the idle timer counts from now
  finished();
  // Delivered last, so that a caller who has the result sees it counted in status().
  command.deliver();
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
  s.queued_commands = queue_.size();
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
  return submit<Result<GenerateResult>>(
      "generate", route, std::move(prompt),
      [this, request = std::move(request)] { return do_generate(request); });
}

namespace {
SessionRoute slot_route(uint32_t slot) {
  SessionRoute route;
  route.slot = slot;
  return route;
}
}  // namespace

std::future<Status> Engine::reset(uint32_t slot) {
  return submit<Status>("reset", slot_route(slot), "", [this] { return do_reset(); });
}

std::future<Result<ExportResult>> Engine::export_conversation(std::string name, uint32_t slot) {
  return submit<Result<ExportResult>>("export", slot_route(slot), "",
                                      [this, name = std::move(name)] { return do_export(name); });
}

std::future<Result<ImportResult>> Engine::import_conversation(std::string name, uint32_t slot) {
  return submit<Result<ImportResult>>("import", slot_route(slot), "",
                                      [this, name = std::move(name)] { return do_import(name); });
}

Status Engine::discard_after(Status error) {
  Status discarded = session_->discard_history();
  publish_history();
  if (discarded.ok()) return error;
  return Status(error.code(), error.message() + "; discarding the history then failed too: " +
                                  discarded.to_string());
}

Result<GenerateResult> Engine::do_generate(const GenerateRequest& request) {
  SIESTA_RETURN_IF_ERROR(validate_request(request, model_->config()));
  std::optional<Sampler> sampler;
  if (request.temperature > 0) {
    SIESTA_ASSIGN_OR_RETURN(Sampler made, Sampler::create(request.temperature, request.seed));
    sampler.emplace(made);
  }
  auto cancelled = [&request] { return request.cancel && request.cancel->load(); };

  GenerateResult result;
  result.admission = admission_;
  const std::vector<Token> prompt = encode(request.prompt);
  result.prompt_tokens = static_cast<uint32_t>(prompt.size());
  result.finish = FinishReason::kCancelled;
  if (cancelled()) return result;  // before anything: the session is untouched

  Result<uint32_t> reused = session_->reuse_prefix(prompt);
  if (!reused.ok()) {
    // InvalidArgument leaves the session unchanged (and validation should have caught it).
    if (reused.status().code() == StatusCode::kInvalidArgument) return reused.status();
    return discard_after(reused.status());
  }
  result.cached_tokens = *reused;
  publish_history();
  PrefillPacer pacer(kernels_, session_->prefill_block(), SystemClock::instance());
  for (size_t i = *reused; i < prompt.size();) {
    // The history stays a prefix of the prompt, so a cancelled request's work is reused by
    // the next prompt that starts the same way. Checked before every prefill block.
    if (cancelled()) return result;
    const size_t length = std::min<size_t>(pacer.next_block(), prompt.size() - i);
    Result<uint32_t> fed = session_->feed_block(std::span(prompt).subspan(i, length));
    if (!fed.ok()) return discard_after(fed.status());
    i += *fed;
    publish_history();
    Status paced = pacer.after_feed(*fed);
    if (!paced.ok()) return discard_after(paced);
  }
  if (cancelled()) return result;

  StopMatcher matcher(request.stop);
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    result.text += piece;
    if (request.on_text) request.on_text(piece);
  };
  for (;;) {
    Result<Token> next = Internal("no token");
    if (sampler) {
      Result<std::vector<float>> logits = session_->next_logits();
      if (!logits.ok()) return discard_after(logits.status());
      next = sampler->sample(*logits);
    } else {
      next = session_->greedy_next();
    }
    if (!next.ok()) return discard_after(next.status());
    ++result.completion_tokens;
    emit(matcher.push(static_cast<char>(*next)));
    if (matcher.finished()) {
      result.finish = FinishReason::kStop;
      break;
    }
    if (result.completion_tokens == request.max_tokens) {
      result.finish = FinishReason::kLength;
      break;
    }
    if (cancelled()) break;  // result.finish is kCancelled
    // The last token chosen is not fed: its KV is computed when a later prompt contains it.
    Status fed = session_->feed(*next);
    if (!fed.ok()) return discard_after(fed);
    publish_history();
  }
  if (result.finish != FinishReason::kStop) emit(matcher.flush());
  return result;
}

Status Engine::do_reset() { return session_->discard_history(); }

Result<ExportResult> Engine::do_export(const std::string& name) {
  if (!exporter_) {
    return FailedPrecondition("export is off: the engine was started without an export directory");
  }
  SIESTA_RETURN_IF_ERROR(validate_export_name(name));
  // The regions must not change while they are copied: wait for every kernel enqueued.
  Status synced = kernels_.synchronize();
  if (!synced.ok()) return discard_after(synced);
  const std::vector<SnapshotRegion> regions = session_->snapshot_regions();
  SIESTA_ASSIGN_OR_RETURN(SnapshotWriteResult written,
                          exporter_->export_session(name, session_->fingerprint(), regions));
  return ExportResult{written.file_bytes, session_->history_tokens()};
}

Result<ImportResult> Engine::do_import(const std::string& name) {
  if (!exporter_) {
    return FailedPrecondition("import is off: the engine was started without an export directory");
  }
  SIESTA_RETURN_IF_ERROR(validate_export_name(name));
  Status synced = kernels_.synchronize();
  if (!synced.ok()) return discard_after(synced);
  const std::vector<SnapshotRegion> regions = session_->snapshot_regions();
  Result<SnapshotReadResult> read =
      exporter_->import_session(name, session_->fingerprint(), regions);
  if (!read.ok()) {
    if (import_left_session_untouched(read.status().code())) return read.status();
    return discard_after(read.status());  // the regions may hold a mix of old and new bytes
  }
  Status adopted = session_->adopt_restored_state();
  if (!adopted.ok()) return discard_after(adopted);
  publish_history();
  return ImportResult{session_->history_tokens(), read->file_bytes};
}

Status Engine::erase_export(std::string_view name) {
  if (!exporter_) {
    return FailedPrecondition("erase is off: the engine was started without an export directory");
  }
  return exporter_->erase(name);
}

}  // namespace siesta::engine
