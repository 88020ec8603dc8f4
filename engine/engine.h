// Engine: the command loop. One engine thread owns the Model and the Sessions and runs the
// commands -- generate, reset, export and import of a conversation -- started in the order
// they were submitted (FIFO). Up to P commands run at once, each on its own conversation's
// session, by turns: one step each (a prefill block or a generated token, engine/
// generation.h; the other commands take one step), so a short request's first token comes
// after its own prefill and one step per other running command, not after a long generation
// ends. A command for a conversation that runs another waits for it (a conversation runs its
// commands one at a time, in order); commands behind it for other conversations go ahead.
// With P = 1 the commands run one at a time. status() is answered from copies the engine
// thread publishes, so it never waits for a command, and never wakes a sleeping session.
//
// Conversations (EngineOptions::parallel P, max_sessions N): the engine keeps up to N
// conversations, each its own Session (its own reserved address range and recorded decode
// graph, kept for the engine's life once created) with its own Offloader, of which at most P
// have their memory committed. A SessionTable (engine/session_table.h) routes every command
// to its conversation from host-memory bookkeeping only (routing never wakes a session); a
// command for a conversation whose memory is released first makes room -- when P are
// committed, the least recently used idle one is offloaded (Offloader::evict(): the same
// save-then-release as the idle timer's) -- and then restores it. Write early, release late:
// while more conversations exist than P, a session's snapshot is written in the background as
// soon as its command ends (Offloader::save_ahead()), its memory kept, so that its eviction
// later costs only the release and not a save on the returning conversation's time. A new
// conversation at N forgets the least recently used idle one (its snapshot deleted, its history
// discarded). Slot 0's session is created by start(); the others when first routed to. With P = N =
// 1 the engine behaves as a single-session engine: every command goes to session 0.
//
// Idle offload (EngineOptions::offload): the engine owns the session's Offloader, also when
// offload is off (it then reports "disabled"). Every command runs through one private
// path, start_waiting() to end_running(), holding an Offloader::Lease while it runs: acquiring
// it restores the session (or discards an unusable snapshot's history), giving it back arms
// the idle timer. A restore refused for lack of memory fails the command with OutOfMemory
// (retry later; the snapshot stays) before the command touches anything. Status and
// cache_status() never wake a sleeping session.
//
// Errors and the session: a command refused for its input (InvalidArgument,
// FailedPrecondition, NotFound, Foreign...) leaves the session exactly as it was, so the next
// request gives the same bytes as if the refused one had never come. A device or kernels error
// in the middle of a command, or an import that failed after it began writing the session's
// regions (Corrupt, Truncated, IoError...), discards the history (the next prompt is read from
// the start) and returns the error.
//
// Thread rule: every public method may be called from any thread. Commands' futures are made
// ready on the engine thread. GenerateRequest::on_text runs on the engine thread, between two
// tokens: it may block (the next command waits), but must not wait for a command of this
// engine (that would wait for itself) and must not throw.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "compute/kernels.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/file_system.h"
#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offloader.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/cold_read_choice.h"
#include "core/snapshot/snapshot_export.h"
#include "core/snapshot/snapshot_store.h"
#include "engine/conversation_adoption.h"
#include "engine/generate_request.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/prefill_pacer.h"
#include "engine/session.h"
#include "engine/session_pool.h"
#include "engine/session_table.h"

namespace siesta::engine {

// How many conversations the engine keeps and serves at once.
struct EngineSessions {
  // Sessions committed at once (1..kMaxParallel) and conversations kept (parallel..
  // kMaxSessions); more conversations than sessions needs offload on.
  uint32_t parallel = 1;
  uint32_t max_sessions = 1;
  // The share of a kept history a prompt must repeat to continue that conversation (0..1).
  double match = kDefaultSessionMatch;
  // Commands waiting to start at once; one more is refused with Unavailable (busy now: retry
  // later; 503 + Retry-After). 0: no bound.
  size_t max_queued = 0;
};

struct EngineOptions {
  ModelConfig model;
  // Where export_conversation / import_conversation keep their files (SnapshotExporter:
  // private to this user, created 0700). Empty: both are refused with FailedPrecondition.
  std::string export_dir;
  // The default is offload off: cache_status() says "disabled" with these options' times.
  EngineOffload offload;
  EngineSessions sessions;
};

inline constexpr uint32_t kMaxParallel = 64;

struct ExportResult {
  uint64_t bytes = 0;   // size of the file written
  uint64_t tokens = 0;  // history tokens it holds
};

struct ImportResult {
  uint64_t tokens = 0;  // history tokens after the import
  uint64_t bytes = 0;   // size of the file read
};

struct EngineStatus {
  std::string model;  // "synthetic:tiny"
  KvType kv_type = KvType::kF32;
  uint32_t context = 0;
  uint64_t history_tokens = 0;       // as of the last token the engine thread fed
  bool busy = false;                 // a command is running
  size_t queued_commands = 0;        // submitted, not started
  uint64_t commands_run = 0;         // finished, whatever their result
  uint64_t refused_busy = 0;         // commands refused because max_queued were waiting
  uint64_t evictions = 0;            // sessions offloaded to make room for another (at P)
  uint64_t forgotten = 0;            // conversations forgotten to make room for a new one (at N)
  DurationHistogram wait_seconds;    // from submission to the command's start
  bool persist = false;              // conversations survive a restart (EngineOffload::persist)
  AdoptionReport adoption;           // what the start took back from before a restart
  ColdReadChoice::Stats cold_reads;  // which way snapshot files out of the page cache are read
};

class Engine {
 public:
  // Loads the model, creates the session (history empty) and its Offloader, opens the
  // exporter when options.export_dir is set, and starts the engine thread.
  // Failure: the model's InvalidArgument for a bad configuration; Offloader::create()'s
  // InvalidArgument for bad offload options (or a missing store, key or executor with offload
  // on); OutOfMemory / DeviceError from the backend or the kernels; the exporter's errors for
  // an unusable export directory.
  // Nothing is left running or reserved on failure.
  // `backend`, `kernels`, `host`, `fs` and `clock` must outlive the engine; `kernels` must
  // compute on `backend`'s device and is used only by the engine thread from now on.
  static Result<std::unique_ptr<Engine>> start(const EngineOptions& options, MemoryBackend& backend,
                                               Kernels& kernels, HostVmm& host, FileSystem& fs,
                                               const Clock& clock);

  // Lets the running command finish, fails every queued command with Cancelled, joins the
  // engine thread, then frees the session and the model.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Continues the conversation with `request.prompt` (reusing the longest prefix of the
  // history the prompt extends, or the whole prompt when it was the last one asked: the
  // session's prompt-end checkpoint) and generates up to max_tokens tokens (0: until a stop
  // string or the full context).
  // Success: the text, the token ids (and log probabilities when asked), usage and the
  // conversation's number (GenerateResult::session, also told to request.on_start); the
  // history then holds the prompt and every generated token but the last (its KV is computed
  // when a later prompt containing it is fed).
  // Failure: InvalidArgument for an empty prompt, prompt + max_tokens beyond the context (a
  // prompt that fills it, for max_tokens 0), bad stop strings, temperature, top_p, min_p,
  // logit_bias or logprobs (validate_request(), checked before the session is touched: it is
  // unchanged); the kernels' errors mid-generation (history discarded).
  std::future<Result<GenerateResult>> generate(GenerateRequest request);

  // Forgets the history of session `slot`. Failure: InvalidArgument for a slot out of range;
  // the kernels' errors.
  std::future<Status> reset(uint32_t slot = 0);

  // Forgets the conversation `route` names (OpenAI's Responses API DELETE): its history is
  // discarded, its snapshot deleted, and its key dropped from the table, so that the key then
  // opens a fresh conversation. Runs on the engine thread like every command, after the
  // conversation's running command (if any) ends. An offloaded conversation is not restored
  // to be forgotten: its snapshot is deleted (a deletion the store refuses is retried by its
  // Offloader; the next use starts fresh all the same), and its memory stays released; a
  // resident one has its history discarded (Session::discard_history()).
  // Failure: NotFound when the route names no conversation (a key never seen, or forgotten
  // since; a slot never used); InvalidArgument for a route with neither key nor slot, or a
  // slot out of range; FailedPrecondition for a client's slot that holds a keyed
  // conversation; the kernels' errors of the discard, or a lost session's DeviceError /
  // FailedPrecondition (the table forgets the conversation all the same).
  std::future<Status> forget(SessionRoute route);

  // Writes the conversation as the durable export `name` in the export directory.
  // Failure: FailedPrecondition without an export directory; InvalidArgument for a bad name
  // (validate_export_name); the writer's errors (NoSpace, IoError...). The session is never
  // changed, and an earlier export of that name survives a failed one.
  // `slot`: the session whose conversation is written (InvalidArgument when out of range).
  std::future<Result<ExportResult>> export_conversation(std::string name, uint32_t slot = 0);

  // Replaces the conversation with the export `name`, so the next generate continues exactly
  // as the engine that exported it would have.
  // Failure, session unchanged: FailedPrecondition without an export directory, or for a
  // name that holds anything but a regular file (a symlink, directory, FIFO: refused without
  // blocking); InvalidArgument for a bad name; NotFound; Foreign for an export of another
  // model, configuration or KV layout; Unsupported for another format version.
  // Failure, history discarded: every other error (Corrupt, Truncated, IoError...), since the
  // reader may have begun restoring the regions and they may hold a mix of old and new bytes;
  // a restored state the session rejects (Corrupt); a kernels error before the import.
  // `slot`: the session replaced (InvalidArgument when out of range).
  std::future<Result<ImportResult>> import_conversation(std::string name, uint32_t slot = 0);

  // Removes the export `name` from the export directory (SnapshotExporter::erase). Runs on
  // the caller's thread: it neither waits for a command nor wakes a sleeping session, since it
  // touches no session memory.
  // Failure: FailedPrecondition without an export directory; InvalidArgument for a bad name;
  // NotFound when there is no such export; the file system's error.
  Status erase_export(std::string_view name);

  // Never waits for the engine thread or a command.
  EngineStatus status() const;

  // Waits until `done(status())` is true, at most `timeout` of real time; returns whether it
  // is. `done` is asked at once and again whenever a command is queued, starts or ends, with
  // the engine's queue locked: it must be quick and call nothing of this engine's. For a
  // caller that must know that a command it caused has been queued, or that all have ended.
  // Any thread but the engine thread (an on_text waiting here would wait for itself).
  bool wait_for_status(const std::function<bool(const EngineStatus&)>& done,
                       std::chrono::milliseconds timeout) const;

  // The offloader's status (state, bytes, counters); never waits and never wakes the session.
  // With several conversations: the totals (bytes and counters summed), with the state, times
  // and last error of the most recently used one.
  OffloadStatus cache_status() const;

  // One entry per conversation created so far, by id. Never waits, never wakes a session.
  std::vector<SessionStatus> sessions() const;

  // Offloads the session now (POST /v1/cache/offload); with several, every idle one.
  // Failure: FailedPrecondition when offload is off or (one session) a command is running
  // (Offloader::offload_now()).
  Status offload_now();

  const EngineOptions& options() const { return options_; }

  const ModelConfig& config() const { return model_->config(); }
  // The fingerprint every session's snapshot carries (model, weights, layout, kernels): what a
  // file must match to be restored here. Any thread.
  snapshot::Fingerprint fingerprint() const { return pool_->session(0).fingerprint(); }
  // Host memory the conversations' saves keep for their chunk records, in one pool for all of
  // them (bounded by the saves that run at once). Any thread.
  uint64_t record_buffer_bytes() const { return pool_->record_buffer_bytes(); }

 private:
  // A queued command: step() runs its work on the session it was given (with the number of
  // its conversation), one step at a time,
  // and returns true once the outcome is ready; deliver() then makes its future ready. fail()
  // makes the future ready with an error instead. Most commands take one step; generate takes
  // one per prefill block and one per token (engine/generation.h).
  struct Command {
    std::string_view name;
    SessionRoute route;
    std::string prompt;  // for routing by prefix; empty for commands without one
    Clock::Duration submitted{0};
    std::function<bool(uint32_t id, Session&, const Admission&)> step;
    std::function<void()> deliver;
    std::function<void(Status)> fail;
    // Engine::forget(): routed only to an existing conversation (SessionTable::find()) and
    // run in start_waiting() without a lease (forget_conversation()); `fail` delivers its
    // Status, OK included, and `step` and `deliver` are unused.
    bool forget = false;
  };
  // A command that has started: its conversation's session is leased to it until it ends.
  struct Running {
    Command command;
    uint32_t id = 0;
    Offloader::Lease lease;
  };
  struct Deps {
    MemoryBackend& backend;
    HostVmm& host;
    FileSystem& fs;
    const Clock& clock;
  };

  Engine(const EngineOptions& options, Deps deps, std::unique_ptr<Model> model,
         std::unique_ptr<SessionTable> table, std::unique_ptr<SessionPool> pool,
         std::unique_ptr<SnapshotExporter> exporter, Kernels& kernels, AdoptionReport adoption);

  // `step(id, session, admission)` returns the outcome once the command's work is done, nullopt
  // while it goes on (it is called again at the command's next turn). `id` is the number of
  // the conversation `session` holds.
  template <class R>
  std::future<R> submit(std::string_view name, SessionRoute route, std::string prompt,
                        std::function<std::optional<R>(uint32_t, Session&, const Admission&)> step);
  // Queues `command`, or fails it (Unavailable when max_queued wait already, Cancelled when
  // the engine is stopping). Any thread.
  void enqueue(Command command);
  // A command done in one step.
  template <class R>
  std::future<R> submit_once(std::string_view name, SessionRoute route,
                             std::function<R(Session&)> body);
  void thread_main();
  // Starts waiting commands, in the order they came, while fewer than P run: each is routed to
  // its conversation (one waits while its conversation runs another command), its session
  // prepared and leased (the offloader's hook point). Engine thread.
  void start_waiting();
  // One step of every running command, in the order they started; a command that ends gives
  // its session back and is delivered. Engine thread.
  void step_running();
  void end_running(Running& running);
  // The command ended before it started: counted, its conversation untouched.
  void count_finished();
  void publish_history(const Session& session) { history_tokens_.store(session.history_tokens()); }
  // status() but for the fields under mutex_.
  EngineStatus status_locked() const SIESTA_REQUIRES(mutex_);

  Status do_reset(Session& session);
  // Engine::forget()'s work on conversation `id` (routed, marked busy in the table): the
  // memory part by the pool, the table part by the table, the conversation ended. Engine thread.
  Status forget_conversation(uint32_t id);
  Result<ExportResult> do_export(Session& session, const std::string& name);
  Result<ImportResult> do_import(Session& session, const std::string& name);
  // A device error left the session's state unspecified: start over, keep the first error.
  Status discard_after(Session& session, Status error);

  // Immutable after start(); used only by the engine thread (model_ also by config(); the
  // exporter, whose methods are safe from any thread, also by erase_export()).
  const EngineOptions options_;
  const Deps deps_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SnapshotExporter> exporter_;  // null without an export directory
  Kernels& kernels_;
  // The device's prefill speed, learned by every prefill's pacer and kept for the next one
  // (engine/prefill_pacer.h). Engine thread only.
  PrefillSpeed prefill_speed_;
  // Routing; made before the pool, whose snapshot files carry its routes, and kept after it.
  std::unique_ptr<SessionTable> table_;
  // Every conversation's session and offloader, and the device budget over them.
  std::unique_ptr<SessionPool> pool_;
  const AdoptionReport adoption_;
  // Engine thread only: the commands started (at most P, each on its own conversation), and
  // those taken from the queue that wait for their conversation, in the order they came.
  std::vector<Running> running_;
  std::deque<Command> waiting_;

  // Published for status().
  std::atomic<uint64_t> history_tokens_{0};

  // The queue and what status() reports of it; never held while a command runs.
  mutable Mutex mutex_;
  std::condition_variable wake_;
  mutable std::condition_variable changed_;  // the queue, busy_ or commands_run_ changed
  std::deque<Command> queue_ SIESTA_GUARDED_BY(mutex_);
  // waiting_.size(), for status and the queue's bound (which counts it with queue_).
  size_t waiting_count_ SIESTA_GUARDED_BY(mutex_) = 0;
  bool busy_ SIESTA_GUARDED_BY(mutex_) = false;  // a command runs
  uint64_t commands_run_ SIESTA_GUARDED_BY(mutex_) = 0;
  uint64_t refused_busy_ SIESTA_GUARDED_BY(mutex_) = 0;
  DurationHistogram wait_seconds_ SIESTA_GUARDED_BY(mutex_);
  uint32_t last_used_ SIESTA_GUARDED_BY(mutex_) = 0;  // the last started command's session
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;

  std::thread thread_;  // last: started when everything above exists
};

}  // namespace siesta::engine
