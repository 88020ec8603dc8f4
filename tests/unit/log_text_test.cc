#include "core/base/log_text.h"

#include <gtest/gtest.h>

namespace siesta {
namespace {

TEST(QuoteForLogTest, QuotesPlainText) { EXPECT_EQ(quote_for_log("abc"), "\"abc\""); }

TEST(QuoteForLogTest, KeepsMessagesOnOneLineWhateverTheInput) {
  EXPECT_EQ(quote_for_log("a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
  EXPECT_EQ(quote_for_log(std::string_view("\0\x1b\x7f", 3)), "\"\\x00\\x1b\\x7f\"");
  EXPECT_EQ(quote_for_log("say \"hi\" \\o/"), "\"say \\\"hi\\\" \\\\o/\"");
}

TEST(QuoteForLogTest, PassesUtf8Through) {
  EXPECT_EQ(quote_for_log("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

}  // namespace
}  // namespace siesta
