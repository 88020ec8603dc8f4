#include "server/llama_routes.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/snapshot/chunk_sealer.h"
#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/generation_stream.h"
#include "server/json_fields.h"
#include "server/llama_json.h"
#include "server/openai_json.h"
#include "server/served_model.h"
#include "server/server_flags.h"
#include "server/status_json.h"

namespace siesta::server {
namespace {

using nlohmann::json;

void fail(httplib::Response& response, const Status& status, const ErrorDetail& detail = {}) {
  set_api_error(response, api_error_from_status(status, detail));
}

// POST /tokenize. One token per byte (engine/tokenizer.h); no special tokens exist, so
// add_special and parse_special change nothing (both are accepted as booleans).
void serve_tokenize(const httplib::Request& request, httplib::Response& response) {
  ErrorDetail detail;
  Result<json> body = parse_object(request.body, &detail);
  if (!body.ok()) return fail(response, body.status(), detail);
  const json* content = field(*body, "content");
  if (content == nullptr) return fail(response, bad_field(&detail, "content", "missing"), detail);
  if (!content->is_string()) {
    return fail(response, wrong_type(&detail, "content", "a string", *content), detail);
  }
  bool with_pieces = false;
  for (const char* name : {"add_special", "parse_special", "with_pieces"}) {
    const json* flag = field(*body, name);
    if (flag == nullptr) continue;
    if (!flag->is_boolean()) {
      return fail(response, wrong_type(&detail, name, "a boolean", *flag), detail);
    }
    if (std::string_view(name) == "with_pieces") with_pieces = flag->get<bool>();
  }
  json tokens = json::array();
  for (unsigned char byte : content->get_ref<const std::string&>()) {
    if (!with_pieces) {
      tokens.push_back(byte);
      continue;
    }
    // A byte of a multi-byte character is not valid UTF-8 alone: its bytes, as llama-server.
    const json piece =
        byte < 0x80 ? json(std::string(1, static_cast<char>(byte))) : json::array({byte});
    tokens.push_back({{"id", byte}, {"piece", piece}});
  }
  set_json(response, {{"tokens", std::move(tokens)}});
}

// POST /detokenize: token ids are bytes.
void serve_detokenize(const httplib::Request& request, httplib::Response& response) {
  ErrorDetail detail;
  Result<json> body = parse_object(request.body, &detail);
  if (!body.ok()) return fail(response, body.status(), detail);
  const json* tokens = field(*body, "tokens");
  if (tokens == nullptr) return fail(response, bad_field(&detail, "tokens", "missing"), detail);
  if (!tokens->is_array()) {
    return fail(response, wrong_type(&detail, "tokens", "an array of token ids", *tokens), detail);
  }
  std::string content;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& id = (*tokens)[i];
    const std::string param = "tokens[" + std::to_string(i) + "]";
    if (!id.is_number_unsigned() || id.get<uint64_t>() > 255) {
      return fail(response,
                  bad_field(&detail, param, "must be a token id 0..255, got " + id.dump()), detail);
    }
    content += static_cast<char>(id.get<uint64_t>());
  }
  set_json(response, {{"content", content}});
}

// POST /apply-template: the chat prompt /v1/chat/completions would read.
void serve_apply_template(const httplib::Request& request, httplib::Response& response) {
  ErrorDetail detail;
  Result<std::string> prompt = render_chat_request_prompt(request.body, &detail);
  if (!prompt.ok()) return fail(response, prompt.status(), detail);
  set_json(response, {{"prompt", *prompt}});
}

// The /completion defaults (llama_json's), as llama-server's params object lists them.
json default_params(const ServerApp& app) {
  return native_params_json(native_defaults(app.config()));
}

// ---- POST /completion ------------------------------------------------------------------------

// What the engine thread tells the request's answer while it runs: the conversation serving it
// and the times of its start and first piece (Clock::Duration counts; -1: not yet).
struct NativeRun {
  std::atomic<uint32_t> session{0};
  std::atomic<int64_t> started{-1};
  std::atomic<int64_t> first_piece{-1};
};

// The timings of a generation that ended now, measured on the server's clock (app.clock()):
// the engine reports none. prompt_ms runs from the generation's start on its conversation
// (GenerateRequest::on_start: after its wait in the queue and any restore) to its first piece
// of text (on_text, on the engine thread), or to its end when no piece came; predicted_ms from
// there to now, when the server takes the result (streamed: within the stream's 10 ms poll).
// The first piece comes once the prompt is read and the first token chosen (later when its
// text might begin a stop string), so prompt_ms holds that token's choice too.
NativeTimings timings_of(const NativeRun& run, const Clock& clock) {
  const int64_t now = clock.now().count();
  const int64_t started = run.started.load() < 0 ? now : run.started.load();
  const int64_t first = run.first_piece.load() < 0 ? now : run.first_piece.load();
  auto ms = [](int64_t from, int64_t to) {
    return to > from ? std::chrono::duration<double, std::milli>(Clock::Duration(to - from)).count()
                     : 0.0;
  };
  return {ms(started, first), ms(first, now)};
}

// A seed for a request that asks for a random one.
Result<uint64_t> fresh_seed() {
  uint8_t bytes[sizeof(uint64_t)] = {};
  SIESTA_RETURN_IF_ERROR(random_bytes(bytes));
  uint64_t seed = 0;
  std::memcpy(&seed, bytes, sizeof(seed));
  return seed;
}

void serve_native_completion(ServerApp& app, const httplib::Request& request,
                             httplib::Response& response) {
  const ServedModel served = served_model(app.config(), app.engine().config());
  Result<uint64_t> seed = fresh_seed();
  if (!seed.ok()) return fail(response, seed.status());
  ErrorDetail detail;
  Result<ParsedNativeCompletion> parsed =
      parse_native_completion(request.body, served, *seed, &detail);
  if (!parsed.ok()) return fail(response, parsed.status(), detail);
  const NativeMeta meta{served.name, parsed->params, parsed->request.prompt, parsed->return_tokens};
  const Clock& clock = app.clock();
  auto run = std::make_shared<NativeRun>();
  engine::GenerateRequest generate = std::move(parsed->request);
  generate.on_start = [run, &clock](uint32_t session) {
    run->session.store(session);
    run->started.store(clock.now().count());
  };
  generate.on_text = [run, &clock](std::string_view) {
    if (run->first_piece.load() < 0) run->first_piece.store(clock.now().count());
  };
  GenerationReply reply;
  reply.complete = [meta, run, &clock](httplib::Response& answer,
                                       const engine::GenerateResult& result) {
    set_json(answer, native_completion_json(meta, result, timings_of(*run, clock)));
  };
  reply.fail = [](httplib::Response& answer, const ApiError& error) {
    set_api_error(answer, error);
  };
  reply.piece = [run](std::string_view piece, bool) {
    return sse_event(native_piece_json(piece, run->session.load()));
  };
  reply.finish = [meta, run, &clock](const engine::GenerateResult& result, bool) {
    return sse_event(native_final_json(meta, result, timings_of(*run, clock)));
  };
  // As llama-server streams an error: one data event holding the error object, no [DONE].
  reply.error = [](const ApiError& error) { return sse_event(api_error_json(error)); };
  serve_generation(app, std::move(generate), meta.params.stream, reply, response);
}

// "siesta-server 0.1.0": the version line without its newline.
std::string build_info() {
  std::string text = server_version_text();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

json slot_json(const ServerApp& app, uint32_t id, const engine::SessionStatus* session) {
  json slot = {{"id", id},
               {"id_task", -1},
               {"n_ctx", app.engine().config().context},
               {"speculative", false},
               {"is_processing", session != nullptr && session->busy},
               {"params", default_params(app)},
               {"next_token",
                {{"has_next_token", session != nullptr && session->busy},
                 {"has_new_line", false},
                 {"n_remain", -1},
                 {"n_decoded", 0}}}};
  if (session == nullptr) {
    slot["state"] = "empty";
    slot["tokens"] = 0;
  } else {
    const json view = session_json(*session);
    for (auto it = view.begin(); it != view.end(); ++it) {
      if (it.key() != "id") slot[it.key()] = it.value();
    }
  }
  return slot;
}

}  // namespace

json llama_slots_json(ServerApp& app) {
  const std::vector<engine::SessionStatus> sessions = app.engine().sessions();
  std::vector<const engine::SessionStatus*> by_id(app.config().sessions(), nullptr);
  for (const engine::SessionStatus& session : sessions) {
    if (session.id < by_id.size()) by_id[session.id] = &session;
  }
  json list = json::array();
  for (uint32_t id = 0; id < by_id.size(); ++id) list.push_back(slot_json(app, id, by_id[id]));
  return list;
}

json llama_props_json(ServerApp& app) {
  bool sleeping = app.config().offload.enabled();
  for (const engine::SessionStatus& session : app.engine().sessions()) {
    // Offloaded (to disk or RAM) or expired: no device memory held. Restoring or saving
    // counts as awake.
    sleeping =
        sleeping && (session.state == OffloadState::kDisk || session.state == OffloadState::kRam ||
                     session.state == OffloadState::kExpired);
  }
  json settings = slot_json(app, 0, nullptr);
  settings.erase("state");
  settings.erase("tokens");
  return {{"default_generation_settings", std::move(settings)},
          {"total_slots", app.config().sessions()},
          {"model_path", app.config().model},
          {"model_alias", app.config().model_id()},
          {"chat_template", kChatTemplateText},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"build_info", build_info()},
          {"is_sleeping", sleeping}};
}

std::vector<Route> llama_routes(ServerApp& app) {
  const httplib::Server::Handler native = [&app](const httplib::Request& request,
                                                 httplib::Response& response) {
    serve_native_completion(app, request, response);
  };
  return {
      {"POST", "/completion", native},
      {"POST", "/completions", native},
      {"POST", "/tokenize", serve_tokenize},
      {"POST", "/detokenize", serve_detokenize},
      {"POST", "/apply-template", serve_apply_template},
      {"GET", "/props",
       [&app](const httplib::Request&, httplib::Response& response) {
         set_json(response, llama_props_json(app));
       }},
  };
}

}  // namespace siesta::server
