// llama-server's own endpoints, with its request and response fields, so that its users'
// scripts and front ends work (README of ggml-org/llama.cpp's tools/server):
//   POST /completion      llama-server's native generation (also POST /completions, as in
//                         llama-server, where OpenAI's is /v1/completions): the request and
//                         answer fields in llama_json.h; streamed as server-sent events
//                         `data: {"content", "tokens", "stop": false, "id_slot"}` per piece and
//                         a last event with "stop": true and the whole answer's fields (content
//                         ""), no "[DONE]"; an error after the stream began is one event
//                         `data: {"error": {...}}`. Timings are the server's (llama_routes.cc)
//   POST /tokenize        {"content": text, "add_special"?, "parse_special"?, "with_pieces"?}
//                         -> {"tokens": [ids]} or, with_pieces, [{"id", "piece"}]; the
//                         tokenizer is one token per byte, so a piece that is not valid UTF-8
//                         on its own is its bytes as an array (llama-server's rule)
//   POST /detokenize      {"tokens": [ids]} -> {"content": text}
//   POST /apply-template  {"messages": [...]} (as /v1/chat/completions) -> {"prompt": text}
//   GET  /props           default_generation_settings (the /completion defaults), total_slots
//                         (the conversation numbers, 0..N-1, that id_slot and /slots take),
//                         model_path and model_alias, the chat template, modalities,
//                         build_info, and is_sleeping: true while offload is on and no
//                         conversation holds device memory (every one offloaded or expired),
//                         which is llama-server's sleep contract for siesta's idle offload
//   GET  /slots           every conversation number 0..N-1 with llama-server's fields (id,
//                         id_task, n_ctx, speculative, is_processing, params, next_token) and
//                         siesta's conversation view beside them (state, tokens, disk_bytes,
//                         seconds_idle, restores, fallbacks); a number no conversation used yet
//                         is "empty"
// None of them but /completion wakes a conversation: they read the tables the engine keeps in
// host memory.
//
// Thread rule: the handlers run on the HTTP workers; `app` must outlive the routes.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "server/route.h"
#include "server/server_app.h"

namespace siesta::server {

std::vector<Route> llama_routes(ServerApp& app);

// GET /slots's body (exposed for the tests).
nlohmann::json llama_slots_json(ServerApp& app);

// GET /props's body (exposed for the tests).
nlohmann::json llama_props_json(ServerApp& app);

}  // namespace siesta::server
