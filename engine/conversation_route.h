// ConversationRoute: what a snapshot file carries so that a server started after a restart can
// route requests to the conversation again (SnapshotHeader::route, sealed with the header and
// encrypted under the file key): the conversation's number (id_slot), its key's stand-in
// (the SessionTable's key: with persistence on, an HMAC under the snapshot key, never the
// prompt_cache_key) and its history's tokens (for prefix routing and status).
//
// Encoding, little-endian: "SCR1", flags (u8: bit 0 keyed), slot (u32), the key (32 bytes,
// when keyed), the history's length (u32) and its tokens (one byte each). Nothing else; a
// decoder refuses any other length.
//
// Thread rule: none (pure functions).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/base/status.h"

namespace siesta::engine {

// What the SessionTable keeps instead of a prompt_cache_key: its SHA-256, or with persistence
// on an HMAC under the snapshot key (Engine), so that a restart under the same key finds it.
using SessionKey = std::array<uint8_t, 32>;

struct ConversationRoute {
  uint32_t slot = 0;
  std::optional<SessionKey> key;
  std::vector<uint8_t> history;  // one byte per token (engine/session.h's Token)
  friend bool operator==(const ConversationRoute&, const ConversationRoute&) = default;
};

std::vector<uint8_t> encode_route(const ConversationRoute& route);

// Failure: Corrupt for bytes that are not an encode_route() result (another magic, a
// truncated or overlong record, unknown flags). The header that holds it was authenticated,
// so that is a writer's bug or another program's route, never an attacker's.
Result<ConversationRoute> decode_route(std::span<const uint8_t> bytes);

}  // namespace siesta::engine
