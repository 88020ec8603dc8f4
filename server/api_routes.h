// The OpenAI-compatible API routes and llama.cpp's slot actions, on top of ServerApp's engine.
//
//   GET  /v1/models                200 {"object":"list","data":[{"id","object":"model",
//                                       "created","owned_by":"siesta"}]}
//   GET  /v1/models/{model}        200 that model object (the OpenAI client's
//                                  models.retrieve); 404 model_not_found for another id
//   POST /v1/completions           200 a "text_completion" (openai_json.h has the fields);
//                                  with "stream": true, 200 text/event-stream chunks
//   POST /v1/chat/completions      the same, "chat.completion" / "chat.completion.chunk"; the
//                                  prompt is chat_template.h's
//   GET /models, GET /models/{model}, POST /chat/completions: the same without "/v1"
//                                  (llama-server's twins; its /completions is its native
//                                  API, llama_routes.h)
//   POST /slots/0?action=save      body {"filename": NAME}: the conversation exported as NAME
//                                  under --slot-save-path.
//                                  200 {"id_slot":0,"filename","n_saved":tokens,
//                                       "n_written":bytes,"timings":{"save_ms"}}
//   POST /slots/0?action=restore   body {"filename": NAME}: the conversation replaced by NAME.
//                                  200 {"id_slot":0,"filename","n_restored":tokens,
//                                       "n_read":file bytes,"timings":{"restore_ms"}}
//   POST /slots/0?action=erase     without a filename (llama.cpp's meaning): the slot's
//                                  history forgotten (Engine::reset),
//                                  200 {"id_slot":0,"n_erased":tokens it held};
//                                  with {"filename": NAME}: the export NAME removed
//                                  (Engine::erase_export), 200 {"id_slot":0,"filename"}.
// Every slot file operation goes through the engine; the timings use the app's clock.
// Errors are api_error.h's mapping: 400 bad JSON, wrong type or value (param names the
// field), bad file name, context exceeded (code "context_length_exceeded"), a slot action
// without --slot-save-path (the message names the flag); 404 another model (code
// "model_not_found"); 503 + Retry-After when the session cannot be restored for lack of
// memory, or "cancelled" while the server shuts down; 500 otherwise. A slot file's failure
// is slot_error.h's: 400 for a damaged, cut, foreign, other-version or non-regular file, 404
// missing, 507 no space, 503 memory, 500 otherwise, and no message names a server path.
//
// Streaming (generation_stream.h, shared by every API that generates): the response is
// committed (200 and SSE headers) only once the generation has produced its first piece of
// text or ended, so a request the engine refuses up front (bad request, 503 for memory) gets a
// normal error response. An error after the stream began is sent as one event
// `data: {"error": {...}}` and the stream ends without [DONE].
//
// Client disconnects cancel the generation (the engine stops between tokens): each request's
// cancel flag is ServerApp::new_request_token() (also raised at shutdown), and it is raised
// when the client is seen gone (current_client(), connection_probe.h: polled every 10 ms
// while the handler waits, non-streaming and streaming alike) or when writing a streamed
// chunk fails. A client that only shut down its sending side still gets its answer.
//
// Every handler returns only once its generation has ended, so a server that stops waits for
// them (and ServerApp::cancel_all() makes that quick).
#pragma once

#include <vector>

#include "server/route.h"

namespace siesta::server {

class ServerApp;

// The API routes, for register_routes() (routes.h) to register with the others (it answers
// other methods on these paths with 405). `app` must outlive the server's last request.
// Thread rule: call before the server listens; handlers then run on httplib's worker threads.
std::vector<Route> api_routes(ServerApp& app);

}  // namespace siesta::server
