#include "server/response_store.h"

#include <utility>

namespace siesta::server {

ResponseStore::ResponseStore(uint64_t budget_bytes) : budget_bytes_(budget_bytes) {}

uint64_t ResponseStore::bytes_of(const std::string& id, const StoredResponse& record) {
  // The text a record holds; the containers' own overhead is a constant per message.
  constexpr uint64_t kPerMessage = sizeof(ChatMessage);
  uint64_t bytes = id.size() + record.answer.size() + sizeof(StoredResponse);
  for (const ChatMessage& message : record.messages) bytes += message.content.size() + kPerMessage;
  return bytes;
}

void ResponseStore::erase_locked(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  uses_.erase(it->second.use);
  entries_.erase(it);
}

bool ResponseStore::put(const std::string& id, StoredResponse record) {
  const uint64_t bytes = bytes_of(id, record);
  MutexLock lock(mutex_);
  if (auto it = entries_.find(id); it != entries_.end()) erase_locked(it);
  if (bytes > budget_bytes_) return false;
  while (bytes_ + bytes > budget_bytes_) erase_locked(entries_.find(uses_.back()));
  uses_.push_front(id);
  entries_.emplace(id, Entry{std::move(record), bytes, uses_.begin()});
  bytes_ += bytes;
  return true;
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  MutexLock lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  uses_.splice(uses_.begin(), uses_, it->second.use);
  return it->second.record;
}

bool ResponseStore::erase(const std::string& id) {
  MutexLock lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  erase_locked(it);
  return true;
}

uint64_t ResponseStore::bytes() const {
  MutexLock lock(mutex_);
  return bytes_;
}

size_t ResponseStore::size() const {
  MutexLock lock(mutex_);
  return entries_.size();
}

}  // namespace siesta::server
