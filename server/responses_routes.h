// OpenAI's Responses API routes: POST /v1/responses (a generation, kept for
// previous_response_id and GET unless "store": false), GET /v1/responses/{id} (the stored
// response object) and DELETE /v1/responses/{id} (the record removed and its conversation
// forgotten by the engine: history discarded, snapshot deleted). The routes own the
// conversations' store (response_store.h), shared by their handlers.
//
// A new stored chain gets a conversation key of its own (a random secret, hashed at once), so
// the engine keeps it apart from every other conversation and reaches it only through its
// responses; an unstored response without a previous one or a prompt_cache_key is routed by
// its prompt's prefix, as chat is. An unknown, deleted or evicted id answers 404
// (previous_response_id: code "previous_response_not_found").
//
// Thread rule: the handlers run on the HTTP workers; the store is thread-safe.
#pragma once

#include <vector>

#include "server/route.h"
#include "server/server_app.h"

namespace siesta::server {

std::vector<Route> responses_routes(ServerApp& app);

}  // namespace siesta::server
