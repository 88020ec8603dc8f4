#include "server/anthropic_routes.h"

#include <string>
#include <utility>

#include "server/anthropic_json.h"
#include "server/api_error.h"
#include "server/generation_stream.h"

namespace siesta::server {
namespace {

void serve_messages(ServerApp& app, const httplib::Request& request, httplib::Response& response) {
  const ServedModel served = served_model(app.config(), app.engine().config());
  ErrorDetail detail;
  Result<ParsedMessages> parsed = parse_messages_request(request.body, served, &detail);
  if (!parsed.ok()) {
    return set_anthropic_error(response, api_error_from_status(parsed.status(), detail));
  }
  const std::string id = new_message_id();
  const std::string model = app.config().model_id();
  const uint64_t prompt_tokens = parsed->request.prompt.size();
  GenerationReply reply;
  reply.complete = [id, model](httplib::Response& answer, const engine::GenerateResult& result) {
    set_json(answer, message_json(id, model, result));
  };
  reply.fail = set_anthropic_error;
  reply.begin = [id, model, prompt_tokens] {
    return anthropic_stream_begin(id, model, prompt_tokens);
  };
  reply.piece = [](std::string_view piece, bool) { return anthropic_stream_piece(piece); };
  reply.finish = [](const engine::GenerateResult& result, bool) {
    return anthropic_stream_end(result);
  };
  reply.error = [](const ApiError& error) {
    return anthropic_event("error", anthropic_error_json(error));
  };
  serve_generation(app, std::move(parsed->request), parsed->stream, reply, response);
}

}  // namespace

void set_anthropic_error(httplib::Response& response, const ApiError& error) {
  response.status = error.http_status;
  if (error.retry_after_seconds > 0) {
    response.set_header("Retry-After", std::to_string(error.retry_after_seconds));
  }
  set_json(response, anthropic_error_json(error));
  response.status = error.http_status;
}

bool is_anthropic_path(std::string_view path) {
  return path == "/v1/messages" || path.starts_with("/v1/messages/");
}

std::vector<Route> anthropic_routes(ServerApp& app) {
  return {
      {"POST", "/v1/messages",
       [&app](const httplib::Request& request, httplib::Response& response) {
         serve_messages(app, request, response);
       }},
      {"POST", "/v1/messages/count_tokens",
       [](const httplib::Request& request, httplib::Response& response) {
         ErrorDetail detail;
         Result<uint64_t> tokens = count_message_tokens(request.body, &detail);
         if (!tokens.ok()) {
           return set_anthropic_error(response, api_error_from_status(tokens.status(), detail));
         }
         set_json(response, {{"input_tokens", *tokens}});
       }},
  };
}

}  // namespace siesta::server
