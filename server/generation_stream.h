// Serving one generation over HTTP, whatever API it follows: starting it on the engine,
// waiting for its result (or, streamed, its pieces) while watching the client, cancelling it
// when the client goes, and writing the answer. What differs between the APIs (OpenAI's
// completions and chat, llama-server's /completion, Anthropic's Messages, OpenAI's Responses)
// is only the shape of the answer: a GenerationReply says it, and serve_generation() does the
// rest for all of them.
//
// The response is committed (200 and the stream's headers) only once the generation has
// produced its first piece of text or ended, so a request the engine refuses up front (a bad
// request, 503 for memory) gets a normal error answer. An error after the stream began is the
// reply's error event, and the stream ends there. A client that goes away (polled every 10 ms
// through current_client(), connection_probe.h, or a failed write) cancels the generation, and
// the connection's thread waits for the engine before it lets go of the request.
//
// Thread rule: serve_generation() on the request's worker thread; the reply's functions run on
// that thread too (the streamed ones from cpp-httplib's content provider, still within the
// request).
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <string_view>

#include "engine/generate_request.h"
#include "server/api_error.h"
#include "server/server_app.h"

namespace siesta::server {

// How one API answers a generation.
struct GenerationReply {
  // The whole answer of a request that was not streamed.
  std::function<void(httplib::Response&, const engine::GenerateResult&)> complete;
  // An error answer before anything was committed (the API's error shape and status).
  std::function<void(httplib::Response&, const ApiError&)> fail;
  // Streamed: the content type of the stream ("text/event-stream").
  std::string stream_content_type = "text/event-stream";
  // The events that open the stream, sent before the first piece (empty: none).
  std::function<std::string()> begin;
  // The events carrying one piece of text; `first` for the first piece of the stream.
  std::function<std::string(std::string_view piece, bool first)> piece;
  // The events that end a stream whose generation succeeded (`pieces_sent`: whether any
  // piece was sent before).
  std::function<std::string(const engine::GenerateResult&, bool pieces_sent)> finish;
  // The event that reports an error after the stream began.
  std::function<std::string(const ApiError&)> error;
};

// The error a generation cancelled by the server's shutdown answers: 503, code "cancelled".
ApiError shutting_down();

// Runs `request` on the app's engine and answers `response` through `reply`, streamed when
// `stream`. The request's cancel is set here, and, streamed, its on_text (which calls the
// request's own on_text first, when it has one).
void serve_generation(ServerApp& app, engine::GenerateRequest request, bool stream,
                      const GenerationReply& reply, httplib::Response& response);

}  // namespace siesta::server
