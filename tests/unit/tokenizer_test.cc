// The byte tokenizer and the strict UTF-8 check.
#include "engine/tokenizer.h"

#include <gtest/gtest.h>

#include <string>

namespace siesta::engine {
namespace {

TEST(Tokenizer, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<Token> tokens = encode(all);
  ASSERT_EQ(tokens.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokens[b], b);
  EXPECT_EQ(decode(tokens), all);
  EXPECT_TRUE(encode("").empty());
  EXPECT_EQ(decode({}), "");
}

TEST(Tokenizer, PrintableIsTheAsciiRange) {
  EXPECT_FALSE(is_printable(0x1f));
  EXPECT_TRUE(is_printable(' '));
  EXPECT_TRUE(is_printable('~'));
  EXPECT_FALSE(is_printable(0x7f));
  EXPECT_FALSE(is_printable(0x80));
  EXPECT_FALSE(is_printable('\n'));
}

TEST(Utf8, AcceptsWellFormedText) {
  for (const char* text : {"", "hello", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                           "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
                           "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(is_valid_utf8(text)) << text;
  }
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3))) << "NUL is a valid code point";
}

TEST(Utf8, RejectsMalformedText) {
  const char* cases[] = {
      "\x80",                  // continuation without a lead
      "\xbf",                  //
      "\xc0\x80",              // overlong NUL
      "\xc1\xbf",              // overlong
      "\xe0\x80\x80",          // overlong 3-byte
      "\xe0\x9f\xbf",          // overlong 3-byte (U+07FF)
      "\xf0\x8f\xbf\xbf",      // overlong 4-byte (U+FFFF)
      "\xed\xa0\x80",          // U+D800, a surrogate
      "\xed\xbf\xbf",          // U+DFFF
      "\xf4\x90\x80\x80",      // U+110000
      "\xf5\x80\x80\x80",      // lead beyond U+10FFFF
      "\xf8\x88\x80\x80\x80",  // 5-byte form
      "\xff",                  //
      "\xc3",                  // truncated
      "\xe2\x82",              // truncated
      "\xf0\x9f\x98",          // truncated
      "\xc3(",                 // bad continuation
      "ok\xe2\x28\xa1",        // bad continuation after valid text
  };
  for (const char* text : cases) {
    EXPECT_FALSE(is_valid_utf8(text)) << ::testing::PrintToString(std::string(text));
  }
}

}  // namespace
}  // namespace siesta::engine
