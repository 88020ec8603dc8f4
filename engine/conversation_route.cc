#include "engine/conversation_route.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace siesta::engine {
namespace {

constexpr std::string_view kMagic = "SCR1";
constexpr uint8_t kKeyed = 1;

// Reads the record front to back; every take fails once the bytes run out.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool take(std::span<uint8_t> out) {
    if (bytes_.size() < out.size()) return false;
    std::copy_n(bytes_.begin(), out.size(), out.begin());
    bytes_ = bytes_.subspan(out.size());
    return true;
  }
  bool take_u32(uint32_t& value) {
    uint8_t raw[4];
    if (!take(raw)) return false;
    value = 0;
    for (int i = 3; i >= 0; --i) value = (value << 8) | raw[i];
    return true;
  }
  size_t left() const { return bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
};

Status not_a_route(std::string_view what) {
  return Corrupt("a snapshot's conversation route is malformed: " + std::string(what));
}

}  // namespace

std::vector<uint8_t> encode_route(const ConversationRoute& route) {
  const size_t key_bytes = route.key ? route.key->size() : 0;
  std::vector<uint8_t> out(kMagic.size() + 1 + 4 + key_bytes + 4 + route.history.size());
  // Written by index into the sized record (GCC 12 misreads insert() after reserve() here).
  size_t at = 0;
  auto put = [&](std::span<const uint8_t> bytes) {
    std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<ptrdiff_t>(at));
    at += bytes.size();
  };
  auto put_u32 = [&](uint32_t value) {
    for (int shift = 0; shift < 32; shift += 8) out[at++] = static_cast<uint8_t>(value >> shift);
  };
  put(std::span(reinterpret_cast<const uint8_t*>(kMagic.data()), kMagic.size()));
  out[at++] = route.key ? kKeyed : 0;
  put_u32(route.slot);
  if (route.key) put(*route.key);
  put_u32(static_cast<uint32_t>(route.history.size()));
  put(route.history);
  return out;
}

Result<ConversationRoute> decode_route(std::span<const uint8_t> bytes) {
  Cursor cursor(bytes);
  uint8_t magic[kMagic.size()];
  if (!cursor.take(magic) || std::memcmp(magic, kMagic.data(), kMagic.size()) != 0) {
    return not_a_route("not an \"SCR1\" record");
  }
  uint8_t flags = 0;
  ConversationRoute route;
  uint32_t length = 0;
  if (!cursor.take(std::span(&flags, 1)) || !cursor.take_u32(route.slot)) {
    return not_a_route("truncated");
  }
  if ((flags & ~kKeyed) != 0) return not_a_route("unknown flags");
  if ((flags & kKeyed) != 0) {
    SessionKey key{};
    if (!cursor.take(key)) return not_a_route("truncated");
    route.key = key;
  }
  if (!cursor.take_u32(length)) return not_a_route("truncated");
  if (cursor.left() != length) return not_a_route("the history's length disagrees");
  route.history.resize(length);
  if (!cursor.take(route.history)) return not_a_route("truncated");
  return route;
}

}  // namespace siesta::engine
