// The conversations OpenAI's Responses API keeps: each stored response (POST /v1/responses
// with "store": true, the default) under its id "resp_<24 hex>", holding what the next turn
// needs to continue from it (previous_response_id): the conversation's messages up to and
// including the response's own answer, and the engine's key for the conversation, so the
// next turn is routed to the same session (resident, offloaded or in any tier) and reads only
// its new input. The answer a GET returns is kept too.
//
// A record is self-contained: a chain is not walked, so deleting or evicting one response
// never breaks another that continued from it. Records are kept in process memory only (a
// restart forgets them) within a byte budget (every message's bytes and the answer's JSON);
// past it the least recently used go first, and their ids answer 404 as unknown ones do.
//
// Thread rule: every member is thread-safe (one mutex; nothing runs under it but the map's
// own work); the records handed out are copies.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "engine/session_table.h"
#include "server/chat_template.h"

namespace siesta::server {

inline constexpr uint64_t kDefaultResponseStoreBytes = uint64_t{64} << 20;

struct StoredResponse {
  std::vector<ChatMessage> messages;  // the conversation, the response's answer last
  engine::SessionKey key{};           // the engine's conversation (route.key)
  std::string answer;                 // the response object's JSON, as GET returns it
};

class ResponseStore {
 public:
  explicit ResponseStore(uint64_t budget_bytes = kDefaultResponseStoreBytes);

  // Keeps `record` under `id` (replacing a record of that id), then evicts the least recently
  // used others until the store fits its budget. A record larger than the whole budget is not
  // kept (put() returns false); every other put() returns true.
  bool put(const std::string& id, StoredResponse record);

  // A copy of the record of `id`, now the most recently used; nullopt for an id never kept,
  // deleted or evicted.
  std::optional<StoredResponse> get(const std::string& id);

  // Removes the record of `id`; false when there was none.
  bool erase(const std::string& id);

  // The bytes the records count now, and how many there are.
  uint64_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    StoredResponse record;
    uint64_t bytes = 0;
    std::list<std::string>::iterator use;  // position in uses_
  };
  static uint64_t bytes_of(const std::string& id, const StoredResponse& record);
  void erase_locked(std::unordered_map<std::string, Entry>::iterator it) SIESTA_REQUIRES(mutex_);

  const uint64_t budget_bytes_;
  mutable Mutex mutex_;
  std::unordered_map<std::string, Entry> entries_ SIESTA_GUARDED_BY(mutex_);
  std::list<std::string> uses_ SIESTA_GUARDED_BY(mutex_);  // most recently used first
  uint64_t bytes_ SIESTA_GUARDED_BY(mutex_) = 0;
};

}  // namespace siesta::server
