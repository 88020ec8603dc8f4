#include "server/api_routes.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "core/base/clock.h"
#include "core/base/log_text.h"
#include "core/snapshot/snapshot_export.h"
#include "server/api_error.h"
#include "server/connection_probe.h"
#include "server/openai_json.h"
#include "server/server_app.h"
#include "server/slot_error.h"
#include "server/status_json.h"

namespace siesta::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// How often a waiting handler looks at its client's socket and its generation.
constexpr milliseconds kPollInterval{10};

// ---- One generation ----------------------------------------------------------------------

// Shared by the handler, the engine thread (on_text) and the content provider, which may
// outlive the handler's frame.
struct Generation {
  std::shared_ptr<std::atomic<bool>> cancel;
  std::future<Result<engine::GenerateResult>> future;
  std::optional<Result<engine::GenerateResult>> result;  // once taken from the future
  // The request's client (connection_probe.h), valid while the request is served: in the
  // handler and in the content provider, which cpp-httplib runs before the request ends.
  ClientWatch* client = nullptr;

  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::string> pieces;  // guarded by mutex

  bool done() {
    if (result) return true;
    if (future.wait_for(milliseconds(0)) != std::future_status::ready) return false;
    result.emplace(future.get());
    return true;
  }
  // Cancels, then waits for the engine to finish with this request.
  void abandon() {
    cancel->store(true);
    if (!result) result.emplace(future.get());
  }
};

ApiError shutting_down() {
  ApiError error;
  error.http_status = 503;
  error.message = "the generation was cancelled: the server is shutting down";
  error.code = "cancelled";
  return error;
}

std::shared_ptr<Generation> start_generation(ServerApp& app, ParsedGeneration& parsed) {
  auto generation = std::make_shared<Generation>();
  generation->cancel = app.new_request_token();
  generation->client = current_client();
  parsed.request.cancel = generation->cancel;
  if (parsed.stream) {
    // A weak reference: the engine's copy of the request must not keep the state alive in a
    // cycle (state -> future -> engine command -> on_text -> state).
    std::weak_ptr<Generation> weak = generation;
    parsed.request.on_text = [weak](std::string_view text) {
      if (auto state = weak.lock()) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->pieces.emplace_back(text);
        state->arrived.notify_one();
      }
    };
  }
  generation->future = app.engine().generate(std::move(parsed.request));
  return generation;
}

// Without a watch (a plain httplib::Server in a test) only a failed write reveals it.
bool client_gone(Generation& generation) {
  return generation.client != nullptr && generation.client->gone();
}

bool has_piece(Generation& generation) {
  std::lock_guard<std::mutex> lock(generation.mutex);
  return !generation.pieces.empty();
}

// Streams the pieces as they come; called by httplib until it returns false or done() is
// called. Returns false (and cancels) when the client is gone.
bool provide(Generation& g, const ResponseMeta& meta, bool include_usage, bool& first,
             httplib::DataSink& sink) {
  std::deque<std::string> pieces;
  {
    std::unique_lock<std::mutex> lock(g.mutex);
    // The result is made ready after the last piece is queued: once done, no wait is needed.
    if (g.pieces.empty() && !g.done()) {
      g.arrived.wait_for(lock, kPollInterval, [&] { return !g.pieces.empty(); });
    }
    pieces.swap(g.pieces);
  }
  const bool finished = pieces.empty() && g.done();
  for (const std::string& piece : pieces) {
    const std::string event = sse_event(text_chunk_json(meta, piece, first, include_usage));
    first = false;
    if (!sink.write(event.data(), event.size())) return false;
  }
  if (!finished) {
    // Pieces may still be queued when the result is ready: finish on the next call, after
    // they are written.
    return !client_gone(g);
  }
  const Result<engine::GenerateResult>& result = *g.result;
  std::string tail;
  if (!result.ok()) {
    tail = sse_event(api_error_json(api_error_from_status(result.status())));
  } else if (result->finish == engine::FinishReason::kCancelled) {
    tail = sse_event(api_error_json(shutting_down()));
  } else {
    if (first) tail += sse_event(text_chunk_json(meta, "", true, include_usage));
    tail += sse_event(finish_chunk_json(meta, result->finish, include_usage));
    if (include_usage) tail += sse_event(usage_chunk_json(meta, *result));
    tail += kSseDone;
  }
  if (!sink.write(tail.data(), tail.size())) return false;
  sink.done();
  return true;
}

void serve_generation(ServerApp& app, ApiKind kind, const httplib::Request& request,
                      httplib::Response& response) {
  const engine::ModelConfig& config = app.engine().config();
  const ServedModel served{config.name, config.context, app.config().sessions()};
  ErrorDetail detail;
  Result<ParsedGeneration> parsed = kind == ApiKind::kChat
                                        ? parse_chat_request(request.body, served, &detail)
                                        : parse_completion_request(request.body, served, &detail);
  if (!parsed.ok()) return set_api_error(response, api_error_from_status(parsed.status(), detail));
  const bool stream = parsed->stream;
  const bool include_usage = parsed->include_usage;
  std::shared_ptr<Generation> g = start_generation(app, *parsed);

  // Wait for the result (or, streaming, the first piece), watching the client.
  while (!(stream && has_piece(*g)) &&
         g->future.wait_for(kPollInterval) != std::future_status::ready) {
    if (client_gone(*g)) {
      app.note_client_gone();
      g->abandon();
      response.status = 499;  // nginx's "client closed request": nobody reads it
      return;
    }
  }
  if (!stream || !has_piece(*g)) {
    g->done();
    const Result<engine::GenerateResult>& result = *g->result;
    if (!result.ok()) return set_api_error(response, api_error_from_status(result.status()));
    if (result->finish == engine::FinishReason::kCancelled) {
      return set_api_error(response, shutting_down());
    }
  }
  const ResponseMeta meta{kind, new_response_id(kind), static_cast<int64_t>(std::time(nullptr)),
                          config.name};
  if (!stream) return set_json(response, response_json(meta, g->result->value()));

  response.set_header("Cache-Control", "no-cache");
  auto first = std::make_shared<bool>(true);
  response.set_chunked_content_provider(
      "text/event-stream",
      [&app, g, meta, include_usage, first](size_t, httplib::DataSink& sink) {
        if (provide(*g, meta, include_usage, *first, sink)) return true;
        app.note_client_gone();
        g->cancel->store(true);
        return false;
      },
      // Runs when httplib is done with the response, whatever happened: a stream that did not
      // finish cancels its generation, and the connection's thread waits for the engine.
      [g](bool success) {
        if (!success || !g->done()) g->abandon();
      });
}

// ---- Slots ---------------------------------------------------------------------------------

// Every file operation goes through the engine (which owns the exporter and its directory);
// its failures are answered by slot_api_error(), which never shows the client a server path.
// The session number of /slots/{id}: decimal digits naming a conversation 0..N-1.
std::optional<uint32_t> parse_slot_id(const std::string& text, uint32_t sessions) {
  if (text.empty() || text.size() > 4) return std::nullopt;
  uint32_t id = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<uint32_t>(c - '0');
  }
  if (id >= sessions) return std::nullopt;
  return id;
}

void serve_slot(ServerApp& app, const httplib::Request& request, httplib::Response& response) {
  auto fail = [&](const Status& status, ErrorDetail detail = {}) {
    // The file name is at fault only for a client error (a bad name, a missing file...).
    if (http_status_for(status.code()) >= 500) detail.param.clear();
    set_api_error(response, api_error_from_status(status, detail));
  };
  const std::string asked = request.matches.size() > 1 ? request.matches[1].str() : "0";
  const std::optional<uint32_t> slot = parse_slot_id(asked, app.config().sessions());
  if (!slot) {
    ApiError error;
    error.http_status = 404;
    error.type = "invalid_request_error";
    error.param = "id_slot";
    error.code = "not_found";
    error.message = "no session " + quote_for_log(asked) + ": this server keeps sessions 0.." +
                    std::to_string(app.config().sessions() - 1);
    return set_api_error(response, error);
  }
  const uint32_t id = *slot;
  const std::string action = request.get_param_value("action");
  if (action != "save" && action != "restore" && action != "erase") {
    return fail(
        InvalidArgument("action: expected save, restore or erase, got " + quote_for_log(action)),
        {"action", ""});
  }
  json body = json::object();
  if (!request.body.empty()) {
    try {
      body = json::parse(request.body);
    } catch (const std::exception& e) {
      return fail(
          InvalidArgument("the request body is not valid JSON: " + quote_for_log(e.what())));
    }
    if (!body.is_object()) return fail(InvalidArgument("the request body must be a JSON object"));
  }
  auto filename_it = body.find("filename");
  const bool has_filename = filename_it != body.end() && !filename_it->is_null();
  engine::Engine& engine = app.engine();
  if (action == "erase" && !has_filename) {
    uint64_t tokens = 0;
    if (engine.options().sessions.max_sessions == 1) {
      tokens = engine.status().history_tokens;
    } else {
      for (const engine::SessionStatus& session : engine.sessions()) {
        if (session.id == id) tokens = session.tokens;
      }
    }
    Status reset = engine.reset(id).get();
    if (!reset.ok()) return fail(reset);
    return set_json(response, {{"id_slot", id}, {"n_erased", tokens}});
  }
  if (!has_filename) return fail(InvalidArgument("filename: missing"), {"filename", ""});
  if (!filename_it->is_string()) {
    return fail(InvalidArgument("filename: expected a string"), {"filename", ""});
  }
  const std::string name = filename_it->get<std::string>();
  if (app.config().slot_save_path.empty()) {
    return fail(
        InvalidArgument("slot files are off: start the server with --slot-save-path DIR "
                        "to " +
                        action + " them"));
  }
  if (Status valid = validate_export_name(name); !valid.ok()) return fail(valid, {"filename", ""});
  const SlotAction slot_action = action == "save"      ? SlotAction::kSave
                                 : action == "restore" ? SlotAction::kRestore
                                                       : SlotAction::kErase;
  auto fail_file = [&](const Status& status) {
    const ApiError error = slot_api_error(status, slot_action, name);
    if (error.http_status >= 500) {
      // The client's message names no server path; the operator's log has the whole status.
      (void)std::fprintf(stderr, "siesta-server: slot %s of %s failed: %s\n", action.c_str(),
                         quote_for_log(name).c_str(), status.to_string().c_str());
    }
    set_api_error(response, error);
  };
  const Clock& clock = app.clock();
  const Clock::Duration started = clock.now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(clock.now() - started).count();
  };
  if (slot_action == SlotAction::kSave) {
    Result<engine::ExportResult> saved = engine.export_conversation(name, id).get();
    if (!saved.ok()) return fail_file(saved.status());
    return set_json(response, {{"id_slot", id},
                               {"filename", name},
                               {"n_saved", saved->tokens},
                               {"n_written", saved->bytes},
                               {"timings", {{"save_ms", elapsed_ms()}}}});
  }
  if (slot_action == SlotAction::kRestore) {
    Result<engine::ImportResult> restored = engine.import_conversation(name, id).get();
    if (!restored.ok()) return fail_file(restored.status());
    return set_json(response, {{"id_slot", id},
                               {"filename", name},
                               {"n_restored", restored->tokens},
                               {"n_read", restored->bytes},
                               {"timings", {{"restore_ms", elapsed_ms()}}}});
  }
  if (Status erased = engine.erase_export(name); !erased.ok()) return fail_file(erased);
  set_json(response, {{"id_slot", id}, {"filename", name}});
}

// GET /slots, as llama.cpp lists its slots: one object per session number, with siesta's
// offload state. Never wakes a session and never shows a prompt or a key.
nlohmann::json slots_json(ServerApp& app) {
  engine::Engine& engine = app.engine();
  const uint32_t context = engine.config().context;
  std::vector<engine::SessionStatus> sessions = engine.sessions();
  nlohmann::json list = nlohmann::json::array();
  for (const engine::SessionStatus& session : sessions) {
    nlohmann::json entry = session_json(session);
    entry["n_ctx"] = context;
    entry["is_processing"] = session.busy;
    list.push_back(std::move(entry));
  }
  return list;
}

}  // namespace

std::vector<Route> api_routes(ServerApp& app) {
  const int64_t started = static_cast<int64_t>(std::time(nullptr));
  return {
      {"GET", "/v1/models",
       [&app, started](const httplib::Request&, httplib::Response& response) {
         set_json(response, models_json(app.engine().config().name, started));
       }},
      {"GET", "/v1/models/{model}",
       [&app, started](const httplib::Request& request, httplib::Response& response) {
         const std::string& name = app.engine().config().name;
         const std::string asked = request.matches.size() > 1 ? request.matches[1].str() : "";
         if (asked != name) {
           ApiError error;
           error.http_status = 404;
           error.type = "invalid_request_error";
           error.param = "model";
           error.code = "model_not_found";
           error.message = "The model " + quote_for_log(asked) +
                           " does not exist; this server serves " + quote_for_log(name);
           return set_api_error(response, error);
         }
         set_json(response, model_json(name, started));
       }},
      {"POST", "/v1/completions",
       [&app](const httplib::Request& request, httplib::Response& response) {
         serve_generation(app, ApiKind::kCompletion, request, response);
       }},
      {"POST", "/v1/chat/completions",
       [&app](const httplib::Request& request, httplib::Response& response) {
         serve_generation(app, ApiKind::kChat, request, response);
       }},
      {"GET", "/slots",
       [&app](const httplib::Request&, httplib::Response& response) {
         set_json(response, slots_json(app));
       }},
      {"POST", "/slots/{id}",
       [&app](const httplib::Request& request, httplib::Response& response) {
         serve_slot(app, request, response);
       }},
  };
}

}  // namespace siesta::server
