#include "server/api_routes.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/base/clock.h"
#include "core/base/log_text.h"
#include "core/snapshot/snapshot_export.h"
#include "server/api_error.h"
#include "server/generation_stream.h"
#include "server/llama_routes.h"
#include "server/openai_json.h"
#include "server/server_app.h"
#include "server/slot_error.h"
#include "server/status_json.h"

namespace siesta::server {
namespace {

using nlohmann::json;

// ---- OpenAI's completions and chat ---------------------------------------------------------

// OpenAI's answer shapes: openai_json.h's chunks over server-sent events, its error object.
GenerationReply openai_reply(const ResponseMeta& meta, bool include_usage) {
  GenerationReply reply;
  reply.complete = [meta](httplib::Response& response, const engine::GenerateResult& result) {
    set_json(response, response_json(meta, result));
  };
  reply.fail = [](httplib::Response& response, const ApiError& error) {
    set_api_error(response, error);
  };
  reply.piece = [meta, include_usage](std::string_view piece, bool first) {
    return sse_event(text_chunk_json(meta, piece, first, include_usage));
  };
  reply.finish = [meta, include_usage](const engine::GenerateResult& result, bool pieces_sent) {
    std::string tail;
    if (!pieces_sent) tail += sse_event(text_chunk_json(meta, "", true, include_usage));
    tail += sse_event(finish_chunk_json(meta, result.finish, include_usage));
    if (include_usage) tail += sse_event(usage_chunk_json(meta, result));
    tail += kSseDone;
    return tail;
  };
  reply.error = [](const ApiError& error) { return sse_event(api_error_json(error)); };
  return reply;
}

void serve_openai_generation(ServerApp& app, ApiKind kind, const httplib::Request& request,
                             httplib::Response& response) {
  const ServedModel served = served_model(app.config(), app.engine().config());
  ErrorDetail detail;
  Result<ParsedGeneration> parsed = kind == ApiKind::kChat
                                        ? parse_chat_request(request.body, served, &detail)
                                        : parse_completion_request(request.body, served, &detail);
  if (!parsed.ok()) return set_api_error(response, api_error_from_status(parsed.status(), detail));
  const ResponseMeta meta{
      kind,        new_response_id(kind),     static_cast<int64_t>(std::time(nullptr)),
      served.name, served.system_fingerprint, parsed->shown_logprobs};
  serve_generation(app, std::move(parsed->request), parsed->stream,
                   openai_reply(meta, parsed->include_usage), response);
}

// ---- Slots ---------------------------------------------------------------------------------

// Every file operation goes through the engine (which owns the exporter and its directory);
// its failures are answered by slot_api_error(), which never shows the client a server path.
// The session number of /slots/{id}: a conversation 0..N-1 in canonical decimal, as the
// client sent it (not percent-decoded: "%30" is not a number, and "01" is not the number 1's
// only spelling, so neither names a session).
std::optional<uint32_t> parse_slot_id(std::string_view text, uint32_t sessions) {
  if (text.empty() || text.size() > 4 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
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
  // The id as sent: the raw target's path after "/slots/" (cpp-httplib's matches are decoded).
  const std::string_view target = request.target;
  const std::string_view path = target.substr(0, target.find('?'));
  const std::string_view asked = path.substr(std::min(path.size(), path.rfind('/') + 1));
  const std::optional<uint32_t> slot = parse_slot_id(asked, app.config().sessions());
  if (!slot) {
    ApiError error;
    error.http_status = 400;
    error.type = "invalid_request_error";
    error.param = "id_slot";
    error.code = "invalid_slot";
    error.message = "no session " + quote_for_log(asked) + ": this server keeps sessions 0.." +
                    std::to_string(app.config().sessions() - 1) + " (decimal, as written)";
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
    // llama-server's answer: the feature is not offered (501), not the client's mistake.
    return fail(Unsupported("slot files are off: start the server with --slot-save-path DIR to " +
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

// The slots endpoints' answer under --no-slots (llama-server's).
bool slots_off(const ServerApp& app, httplib::Response& response) {
  if (app.config().slots_endpoints) return false;
  set_api_error(response, 501, "the slots endpoints are off (--no-slots)", "not_supported_error",
                "not_supported");
  return true;
}

}  // namespace

std::vector<Route> api_routes(ServerApp& app) {
  const int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::vector<Route> openai = {
      {"GET", "/v1/models",
       [&app, started](const httplib::Request&, httplib::Response& response) {
         set_json(response, models_json(app.config().model_id(), started));
       }},
      {"GET", "/v1/models/{model}",
       [&app, started](const httplib::Request& request, httplib::Response& response) {
         const std::string& id = app.config().model_id();
         const std::string asked = request.matches.size() > 1 ? request.matches[1].str() : "";
         // The listed id, or the model's own name.
         if (asked != id && asked != app.engine().config().name) {
           ApiError error;
           error.http_status = 404;
           error.type = "invalid_request_error";
           error.param = "model";
           error.code = "model_not_found";
           error.message = "The model " + quote_for_log(asked) +
                           " does not exist; this server serves " + quote_for_log(id);
           return set_api_error(response, error);
         }
         set_json(response, model_json(id, started));
       }},
      {"POST", "/v1/completions",
       [&app](const httplib::Request& request, httplib::Response& response) {
         serve_openai_generation(app, ApiKind::kCompletion, request, response);
       }},
      {"POST", "/v1/chat/completions",
       [&app](const httplib::Request& request, httplib::Response& response) {
         serve_openai_generation(app, ApiKind::kChat, request, response);
       }},
  };
  // llama-server's unprefixed twins of OpenAI's routes (/models, /chat/completions): the same
  // handlers under the path without "/v1" (a view into the same literal). Not /completions:
  // there llama-server serves its native API (llama_routes.h), not OpenAI's.
  const size_t prefixed = openai.size();
  for (size_t i = 0; i < prefixed; ++i) {
    if (openai[i].path == "/v1/completions") continue;
    openai.push_back({openai[i].method, openai[i].path.substr(3), openai[i].handler});
  }
  openai.push_back({"GET", "/slots", [&app](const httplib::Request&, httplib::Response& response) {
                      if (!slots_off(app, response)) set_json(response, llama_slots_json(app));
                    }});
  openai.push_back(
      {"POST", "/slots/{id}", [&app](const httplib::Request& request, httplib::Response& response) {
         if (!slots_off(app, response)) serve_slot(app, request, response);
       }});
  return openai;
}

}  // namespace siesta::server
