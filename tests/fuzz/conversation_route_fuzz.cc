// Fuzz target: the route a restart decodes from a snapshot header (engine/conversation_route.h).
// Any bytes: a typed refusal (Corrupt, with a message) or a route that encodes back to exactly
// those bytes (one encoding per route, so no two byte strings mean the same conversation).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "engine/conversation_route.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  siesta::Result<siesta::engine::ConversationRoute> route = siesta::engine::decode_route(bytes);
  if (!route.ok()) {
    if (route.status().code() != siesta::StatusCode::kCorrupt || route.status().message().empty()) {
      std::abort();
    }
    return 0;
  }
  const std::vector<uint8_t> again = siesta::engine::encode_route(*route);
  if (again.size() != size || !std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
  return 0;
}
