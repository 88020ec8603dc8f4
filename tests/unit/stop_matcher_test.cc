// StopMatcher: hold-back never releases a byte that could start a stop string, the final text
// excludes the stop (OpenAI semantics), overlapping and repeated prefixes are handled, and
// flush() releases what was held when generation ends otherwise.
#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace siesta::engine {
namespace {

struct Outcome {
  std::vector<std::string> pieces;  // non-empty pushes' outputs, in order
  std::string text;                 // everything emitted, flush included
  bool finished = false;
  size_t consumed = 0;  // bytes pushed before finishing (or all)
};

// Pushes `generated` byte by byte as the engine does; stops pushing once finished.
Outcome run(std::vector<std::string> stops, std::string_view generated) {
  StopMatcher m(std::move(stops));
  Outcome r;
  for (char c : generated) {
    ++r.consumed;
    std::string piece = m.push(c);
    if (!piece.empty()) r.pieces.push_back(piece);
    r.text += piece;
    if (m.finished()) break;
  }
  r.finished = m.finished();
  std::string rest = m.flush();
  if (!rest.empty()) r.pieces.push_back(rest);
  r.text += rest;
  return r;
}

TEST(StopMatcherTest, NoStopStringsReleasesEveryByteAtOnce) {
  StopMatcher m({});
  for (char c : std::string("hello")) {
    EXPECT_EQ(m.push(c), std::string(1, c));
    EXPECT_EQ(m.held_bytes(), 0u);
  }
  EXPECT_FALSE(m.finished());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcherTest, TextBeforeTheStopIsReturnedAndTheStopIsNot) {
  Outcome r = run({"END"}, "abcENDxyz");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(r.consumed, 6u);  // the 'D' completed it
}

TEST(StopMatcherTest, BytesThatMightStartAStopAreHeldBack) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push('a'), "a");
  EXPECT_EQ(m.push('E'), "");
  EXPECT_EQ(m.held_bytes(), 1u);
  EXPECT_EQ(m.push('N'), "");
  EXPECT_EQ(m.held_bytes(), 2u);
  EXPECT_EQ(m.push('x'), "ENx");  // no longer a match: released together
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_FALSE(m.finished());
}

TEST(StopMatcherTest, FlushReleasesAPartialMatchAtTheEnd) {
  Outcome r = run({"END"}, "abEN");
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.text, "abEN");
  EXPECT_EQ(r.pieces.back(), "EN");
}

TEST(StopMatcherTest, FailedPartialMatchKeepsTheLongestLiveSuffix) {
  // "aab" with stop "aab": after "aa" then 'a', the held text must become "aa" again, not
  // be released, or "aaab" would miss the stop.
  Outcome r = run({"aab"}, "xaaab!");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "xa");
}

TEST(StopMatcherTest, OverlappingSelfPrefix) {
  Outcome r = run({"abab"}, "abababX");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "");
  Outcome r2 = run({"abac"}, "ababac");
  EXPECT_TRUE(r2.finished);
  EXPECT_EQ(r2.text, "ab");
}

TEST(StopMatcherTest, EarliestCompletionWinsAmongSeveralStops) {
  // "c" completes before "abcd" could.
  Outcome r = run({"abcd", "c"}, "xabcd");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "xab");
}

TEST(StopMatcherTest, StopsEndingTogetherCutAtTheEarliestStart) {
  StopMatcher m({"d", "bcd"});
  std::string out;
  for (char c : std::string("abcd")) out += m.push(c);
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(out, "a");
  EXPECT_EQ(m.matched(), "bcd");
}

TEST(StopMatcherTest, StopAtTheVeryStartGivesEmptyText) {
  Outcome r = run({"\n"}, "\nmore");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.pieces.empty());
}

TEST(StopMatcherTest, SingleByteStopIsNeverHeld) {
  StopMatcher m({"."});
  EXPECT_EQ(m.push('a'), "a");
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(m.push('.'), "");
  EXPECT_TRUE(m.finished());
}

TEST(StopMatcherTest, NothingAfterFinishing) {
  StopMatcher m({"x"});
  EXPECT_EQ(m.push('x'), "");
  ASSERT_TRUE(m.finished());
  EXPECT_EQ(m.push('y'), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  Outcome r = run({"", "z"}, "abz");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "ab");
}

TEST(StopMatcherTest, MultiByteUtf8StopMatchesBytes) {
  Outcome r = run({"\xc3\xa9t\xc3\xa9"}, "l'\xc3\xa9t\xc3\xa9!");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "l'");
}

// Against a brute-force reference: the emitted text is the text up to the earliest occurrence
// of any stop, and at every point the emitted text plus the held bytes is the pushed text.
TEST(StopMatcherTest, AgreesWithBruteForceOnManySmallCases) {
  const std::vector<std::vector<std::string>> stop_sets = {
      {"ab"}, {"aab", "b"}, {"aba", "bab"}, {"aaa"}, {"abc", "bcd", "cd"}};
  uint64_t x = 12345;
  for (int round = 0; round < 2000; ++round) {
    const auto& stops = stop_sets[round % stop_sets.size()];
    std::string generated;
    for (int i = 0; i < 12; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      generated.push_back(static_cast<char>('a' + (x >> 60) % 4));
    }
    size_t cut = std::string::npos;
    for (size_t end = 1; end <= generated.size() && cut == std::string::npos; ++end) {
      for (const auto& s : stops) {
        if (s.size() <= end && generated.compare(end - s.size(), s.size(), s) == 0) {
          cut = std::min(cut, end - s.size());
        }
      }
    }
    StopMatcher m(stops);
    std::string emitted;
    size_t pushed = 0;
    for (char c : generated) {
      emitted += m.push(c);
      ++pushed;
      if (m.finished()) break;
      ASSERT_EQ(emitted.size() + m.held_bytes(), pushed) << generated;
    }
    emitted += m.flush();
    const std::string want = cut == std::string::npos ? generated : generated.substr(0, cut);
    ASSERT_EQ(emitted, want) << "generated " << generated << " round " << round;
    EXPECT_EQ(m.finished(), cut != std::string::npos);
  }
}

}  // namespace
}  // namespace siesta::engine
