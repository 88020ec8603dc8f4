// The route a snapshot file carries for a restart (engine/conversation_route.h): what is
// encoded comes back equal, with and without a key, and bytes that are not a route are refused
// as Corrupt, whichever way they are wrong.
#include "engine/conversation_route.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace siesta::engine {
namespace {

ConversationRoute keyed_route() {
  ConversationRoute route;
  route.slot = 4095;
  SessionKey key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i * 7 + 1);
  route.key = key;
  route.history = {'h', 'e', 'l', 'l', 'o', 0, 255};
  return route;
}

TEST(ConversationRouteTest, WhatIsEncodedComesBackEqual) {
  const ConversationRoute keyed = keyed_route();
  Result<ConversationRoute> back = decode_route(encode_route(keyed));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, keyed);

  ConversationRoute keyless;
  keyless.slot = 3;
  keyless.history = {'a', 'b'};
  back = decode_route(encode_route(keyless));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, keyless);
  EXPECT_FALSE(back->key.has_value());

  back = decode_route(encode_route(ConversationRoute{}));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->history.empty());
}

TEST(ConversationRouteTest, TheKeyAndTheSlotAreWhereTheLayoutSays) {
  const std::vector<uint8_t> bytes = encode_route(keyed_route());
  ASSERT_EQ(bytes.size(), 4u + 1 + 4 + 32 + 4 + 7);
  EXPECT_EQ(bytes[4], 1) << "flags: keyed";
  EXPECT_EQ(bytes[5], 0xff);  // 4095, little-endian
  EXPECT_EQ(bytes[6], 0x0f);
  EXPECT_EQ(bytes[9], 1) << "the key's first byte";
  EXPECT_EQ(bytes[41], 7) << "the history's length";
}

TEST(ConversationRouteTest, BytesThatAreNotARouteAreCorrupt) {
  const std::vector<uint8_t> good = encode_route(keyed_route());
  std::vector<std::vector<uint8_t>> bad;
  bad.push_back({});               // nothing
  bad.push_back({'S', 'C', 'R'});  // a cut magic
  bad.push_back(good);
  bad.back()[0] = 'X';  // another magic
  bad.push_back(good);
  bad.back()[4] = 3;                                                     // an unknown flag
  bad.push_back(std::vector<uint8_t>(good.begin(), good.begin() + 20));  // cut in the key
  bad.push_back(std::vector<uint8_t>(good.begin(), good.end() - 1));     // one token short
  bad.push_back(good);
  bad.back().push_back(0);  // one byte too many
  bad.push_back(good);
  bad.back()[41] = 200;  // a length beyond the record
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("malformed record " + std::to_string(i));
    Result<ConversationRoute> decoded = decode_route(bad[i]);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorrupt) << decoded.status().to_string();
  }
}

}  // namespace
}  // namespace siesta::engine
