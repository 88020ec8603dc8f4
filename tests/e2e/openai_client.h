// The OpenAI-shaped requests the e2e tests send, and what they read back: completions (plain
// or streamed over SSE, read event by event), the error body, snapshot files on disk.
//
// Thread rule: free functions; safe on several threads for the same server.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "tests/e2e/server_process.h"

namespace siesta::testing {

// One answer to POST /v1/completions or /v1/chat/completions.
// Its implicit moves are nlohmann::json's and std::string's, both noexcept; clang-tidy 14
// flags the implicit member functions anyway.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct Completion {
  int http_status = 0;
  nlohmann::json body;        // the whole answer (the last chunk's, when streamed)
  std::string text;           // choices[0].text, or choices[0].message.content for chat
  std::string finish_reason;  // choices[0].finish_reason
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens; -1 when absent
  size_t chunks = 0;           // streamed: data events before [DONE]
};

// A /v1/completions request: greedy (temperature 0).
nlohmann::json completion_request(const std::string& prompt, int max_tokens);

// POSTs `request` to `path` and reads the answer.
// Success: the answer, any HTTP status (a 200 is checked for its shape: Internal when text,
// finish_reason or usage is missing or of the wrong type).
// Failure: Internal for a transport error or a body that is not JSON.
Result<Completion> complete(const ServerProcess& server, const nlohmann::json& request,
                            const std::string& path = "/v1/completions");

// Same, with "stream": true, read over SSE: every data event before "data: [DONE]" must be a
// JSON chunk; the texts are concatenated; usage is read from the chunk that carries it.
// Failure: Internal when the stream does not end with [DONE], a chunk is not JSON, or the
// status is not 200 (the message then has the body).
Result<Completion> complete_streamed(const ServerProcess& server, nlohmann::json request,
                                     const std::string& path = "/v1/completions");

// The names of the files in `dir` (sorted); empty when it does not exist.
std::vector<std::string> list_dir(const std::string& dir);
// The names in `dir` that are snapshots "siesta-<32 hex>-0.snap" (session 0's whole one).
std::vector<std::string> snapshot_files(const std::string& dir);
// The same with session 0's delta segments, "siesta-<32 hex>-0.<k>.snap" (sorted).
std::vector<std::string> snapshot_segment_files(const std::string& dir);

// A counter of /v1/status: cache.counters.<name> or, with `reason`, cache.counters.fallbacks.
// <reason>. -1 when absent (the caller's assertion says what was expected).
int64_t cache_counter(const nlohmann::json& status, const std::string& name,
                      const std::string& reason = "");

// An "Authorization: Bearer <key>" header pair (none when key is empty).
std::vector<std::pair<std::string, std::string>> bearer(const std::string& key);

}  // namespace siesta::testing
