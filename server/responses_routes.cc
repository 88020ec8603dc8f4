#include "server/responses_routes.h"

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/base/log_text.h"
#include "server/api_error.h"
#include "server/generation_stream.h"
#include "server/random_id.h"
#include "server/response_store.h"
#include "server/responses_json.h"
#include "server/served_model.h"

namespace siesta::server {
namespace {

using nlohmann::json;

void not_found(httplib::Response& response, const std::string& id, bool previous) {
  ApiError error;
  error.http_status = 404;
  error.type = "invalid_request_error";
  error.param = previous ? "previous_response_id" : "";
  error.code = previous ? "previous_response_not_found" : "not_found";
  error.message = std::string(previous ? "Previous response" : "Response") + " with id " +
                  quote_for_log(id) + " not found.";
  set_api_error(response, error);
}

// The id of /v1/responses/{id}.
std::string path_id(const httplib::Request& request) {
  return request.matches.size() > 1 ? request.matches[1].str() : "";
}

void serve_create(ServerApp& app, ResponseStore& store, const httplib::Request& request,
                  httplib::Response& response) {
  ErrorDetail detail;
  Result<ResponsesRequest> parsed = parse_responses_request(request.body, &detail);
  if (!parsed.ok()) return set_api_error(response, api_error_from_status(parsed.status(), detail));
  std::optional<StoredResponse> previous;
  if (parsed->previous_response_id) {
    previous = store.get(*parsed->previous_response_id);
    if (!previous) return not_found(response, *parsed->previous_response_id, true);
  }
  // A stored chain's own conversation; an unstored single turn needs none.
  std::optional<engine::SessionKey> fresh_key;
  if (parsed->store) fresh_key = engine::session_key_of(random_id("conv_"));
  const ServedModel served = served_model(app.config(), app.engine().config());
  Result<engine::GenerateRequest> generate = responses_generate_request(
      *parsed, previous ? &*previous : nullptr, served, fresh_key, &detail);
  if (!generate.ok()) {
    return set_api_error(response, api_error_from_status(generate.status(), detail));
  }
  auto asked = std::make_shared<const ResponsesRequest>(std::move(*parsed));
  auto before = std::make_shared<const std::optional<StoredResponse>>(std::move(previous));
  const ResponsesMeta meta{new_responses_id("resp_"), new_responses_id("msg_"),
                           static_cast<int64_t>(std::time(nullptr)), served.name};
  const std::optional<engine::SessionKey> key = generate->route.key;
  // Keeps a finished response for previous_response_id and GET (store: true).
  auto keep = [&store, meta, asked, before, key](const engine::GenerateResult& result,
                                                 const json& object) {
    if (!asked->store || !key) return;
    const StoredResponse* from = before->has_value() ? &**before : nullptr;
    store.put(meta.id,
              {responses_conversation(*asked, from, result.text), *key, dump_json(object)});
  };
  auto stream = std::make_shared<ResponsesStream>(meta, *asked);
  GenerationReply reply;
  reply.complete = [meta, asked, keep](httplib::Response& answer,
                                       const engine::GenerateResult& result) {
    const json object = response_object_json(meta, *asked, &result);
    keep(result, object);
    set_json(answer, object);
  };
  reply.fail = [](httplib::Response& answer, const ApiError& error) {
    set_api_error(answer, error);
  };
  reply.begin = [stream] { return stream->begin(); };
  reply.piece = [stream](std::string_view piece, bool) { return stream->piece(piece); };
  reply.finish = [stream, meta, asked, keep](const engine::GenerateResult& result, bool) {
    keep(result, response_object_json(meta, *asked, &result));
    return stream->finish(result);
  };
  reply.error = [stream](const ApiError& error) { return stream->error(error); };
  const bool streamed = asked->stream;
  serve_generation(app, std::move(*generate), streamed, reply, response);
}

void serve_delete(ServerApp& app, ResponseStore& store, const httplib::Request& request,
                  httplib::Response& response) {
  const std::string id = path_id(request);
  std::optional<StoredResponse> record = store.get(id);
  if (!record) return not_found(response, id, false);
  engine::SessionRoute route;
  route.key = record->key;
  const Status forgotten = app.engine().forget(route).get();
  // NotFound: the engine had already let the conversation go (forgotten to make room, or
  // deleted through another response of the chain); there is nothing more to forget.
  if (!forgotten.ok() && forgotten.code() != StatusCode::kNotFound) {
    return set_api_error(response, api_error_from_status(forgotten));
  }
  store.erase(id);
  set_json(response, {{"id", id}, {"object", "response"}, {"deleted", true}});
}

}  // namespace

std::vector<Route> responses_routes(ServerApp& app) {
  auto store = std::make_shared<ResponseStore>();
  return {
      {"POST", "/v1/responses",
       [&app, store](const httplib::Request& request, httplib::Response& response) {
         serve_create(app, *store, request, response);
       }},
      {"GET", "/v1/responses/{id}",
       [store](const httplib::Request& request, httplib::Response& response) {
         const std::string id = path_id(request);
         std::optional<StoredResponse> record = store->get(id);
         if (!record) return not_found(response, id, false);
         response.set_content(record->answer, "application/json");
       }},
      {"DELETE", "/v1/responses/{id}",
       [&app, store](const httplib::Request& request, httplib::Response& response) {
         serve_delete(app, *store, request, response);
       }},
  };
}

}  // namespace siesta::server
