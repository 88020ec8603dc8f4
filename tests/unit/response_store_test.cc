// ResponseStore (server/response_store.h): records kept by id, handed out as copies, counted in
// bytes within a budget; past it the least recently used (put or got) go first; a record
// larger than the whole budget is not kept; and, under threads, the byte count and every
// record stay consistent (run under TSan by the `concurrency` label).
#include "server/response_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <latch>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/session_table.h"
#include "server/chat_template.h"

namespace siesta::server {
namespace {

// A record whose parts all derive from `tag`, so a copy can be checked whole: a conversation of
// one user message and the answer, the conversation's key, and the answer's JSON, padded to
// `padding` bytes.
StoredResponse record_of(const std::string& tag, size_t padding = 0) {
  return {{{ChatRole::kUser, "question of " + tag}, {ChatRole::kAssistant, "answer of " + tag}},
          engine::session_key_of(tag),
          R"({"tag":")" + tag + R"("})" + std::string(padding, ' ')};
}

// Whether `record` is exactly record_of(tag, padding).
bool is_record_of(const StoredResponse& record, const std::string& tag, size_t padding) {
  const StoredResponse want = record_of(tag, padding);
  return record.messages.size() == 2 && record.messages[0].role == ChatRole::kUser &&
         record.messages[0].content == want.messages[0].content &&
         record.messages[1].role == ChatRole::kAssistant &&
         record.messages[1].content == want.messages[1].content && record.key == want.key &&
         record.answer == want.answer;
}

// Whether `record` is whole: record_of(tag, padding) for the tag its question names, whose
// last two digits are the padding ("question of t<k>-<iiiii>-<pp>").
bool is_whole(const StoredResponse& record) {
  const std::string prefix = "question of ";
  if (record.messages.empty() || record.messages[0].content.rfind(prefix, 0) != 0) return false;
  const std::string tag = record.messages[0].content.substr(prefix.size());
  if (tag.size() < 2 || std::isdigit(static_cast<unsigned char>(tag[tag.size() - 1])) == 0 ||
      std::isdigit(static_cast<unsigned char>(tag[tag.size() - 2])) == 0) {
    return false;
  }
  return is_record_of(record, tag, std::stoul(tag.substr(tag.size() - 2)));
}

// The bytes one record of `tag` counts (tags of one length count alike), measured on a store.
uint64_t bytes_of(const std::string& id, const std::string& tag, size_t padding = 0) {
  ResponseStore probe;
  EXPECT_TRUE(probe.put(id, record_of(tag, padding)));
  return probe.bytes();
}

TEST(ResponseStoreTest, PutGetEraseAndTheirCounts) {
  ResponseStore store;
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_FALSE(store.get("resp_a").has_value());

  ASSERT_TRUE(store.put("resp_a", record_of("a")));
  EXPECT_EQ(store.size(), 1u);
  const uint64_t one = store.bytes();
  EXPECT_GT(one, 0u);
  ASSERT_TRUE(store.put("resp_b", record_of("b", 100)));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.bytes(), one + (one + 100)) << "the answer's bytes count";

  std::optional<StoredResponse> a = store.get("resp_a");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(is_record_of(*a, "a", 0));
  std::optional<StoredResponse> b = store.get("resp_b");
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(is_record_of(*b, "b", 100));
  EXPECT_FALSE(store.get("resp_c").has_value());

  // A copy: changing it leaves the store's record as it was.
  a->messages.clear();
  a->answer = "changed";
  std::optional<StoredResponse> again = store.get("resp_a");
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(is_record_of(*again, "a", 0));

  EXPECT_TRUE(store.erase("resp_a"));
  EXPECT_FALSE(store.get("resp_a").has_value());
  EXPECT_FALSE(store.erase("resp_a")) << "erased already";
  EXPECT_FALSE(store.erase("resp_never"));
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), one + 100);
  EXPECT_TRUE(store.erase("resp_b"));
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

TEST(ResponseStoreTest, EveryMessagesBytesCount) {
  StoredResponse longer = record_of("a");
  const uint64_t base = bytes_of("resp_a", "a");
  longer.messages[0].content += std::string(50, 'x');
  ResponseStore store;
  ASSERT_TRUE(store.put("resp_a", longer));
  EXPECT_EQ(store.bytes(), base + 50);
  longer.messages.push_back({ChatRole::kUser, std::string(70, 'y')});
  ASSERT_TRUE(store.put("resp_a", longer));
  EXPECT_GE(store.bytes(), base + 50 + 70) << "a third message counts at least its text";
}

TEST(ResponseStoreTest, ReplacingAnIdKeepsOneRecordCountedOnce) {
  ResponseStore store;
  ASSERT_TRUE(store.put("resp_a", record_of("a")));
  const uint64_t one = store.bytes();
  ASSERT_TRUE(store.put("resp_a", record_of("z", 40)));
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), one + 40);
  std::optional<StoredResponse> got = store.get("resp_a");
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(is_record_of(*got, "z", 40));
  ASSERT_TRUE(store.put("resp_a", record_of("a")));
  EXPECT_EQ(store.bytes(), one);
}

// Three records of one size fill the budget exactly; a fourth evicts one.
class ResponseStoreBudgetTest : public ::testing::Test {
 protected:
  const uint64_t one_ = bytes_of("resp_a", "a");
  ResponseStore store_{3 * one_};

  void put(const char* name) {
    ASSERT_TRUE(store_.put(std::string("resp_") + name, record_of(name)));
    EXPECT_LE(store_.bytes(), 3 * one_);
  }
  // (A get: it refreshes the record, so the tests call it only where the order no longer
  // matters.)
  bool kept(const char* name) { return store_.get(std::string("resp_") + name).has_value(); }
};

TEST_F(ResponseStoreBudgetTest, TheLeastRecentlyPutGoesFirst) {
  put("a");
  put("b");
  put("c");
  EXPECT_EQ(store_.size(), 3u);
  EXPECT_EQ(store_.bytes(), 3 * one_) << "exactly the budget is kept";
  put("d");
  EXPECT_EQ(store_.size(), 3u);
  EXPECT_EQ(store_.bytes(), 3 * one_);
  EXPECT_FALSE(store_.get("resp_a").has_value()) << "the oldest went";
  // (The gets below refresh each record in turn; their order is checked by the next test.)
  EXPECT_TRUE(store_.get("resp_b").has_value());
  EXPECT_TRUE(store_.get("resp_c").has_value());
  EXPECT_TRUE(store_.get("resp_d").has_value());
}

TEST_F(ResponseStoreBudgetTest, AGetMakesARecordTheMostRecentlyUsed) {
  put("a");
  put("b");
  put("c");
  ASSERT_TRUE(store_.get("resp_a").has_value());  // order now: a, c, b (most recent first)
  put("d");
  EXPECT_EQ(store_.size(), 3u);
  EXPECT_FALSE(store_.get("resp_b").has_value()) << "b was the least recently used";
  ASSERT_TRUE(store_.get("resp_c").has_value());  // order now: c, d, a
  put("e");
  EXPECT_FALSE(store_.get("resp_a").has_value()) << "a was the least recently used";
  EXPECT_TRUE(store_.get("resp_c").has_value());
  EXPECT_TRUE(store_.get("resp_d").has_value());
  EXPECT_TRUE(store_.get("resp_e").has_value());
}

TEST_F(ResponseStoreBudgetTest, ReplacingARecordMakesItTheMostRecentlyUsed) {
  put("a");
  put("b");
  put("c");
  ASSERT_TRUE(store_.put("resp_a", record_of("x")));  // order now: a, c, b
  EXPECT_EQ(store_.size(), 3u);
  put("d");
  EXPECT_FALSE(store_.get("resp_b").has_value());
  std::optional<StoredResponse> a = store_.get("resp_a");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(is_record_of(*a, "x", 0));
}

TEST_F(ResponseStoreBudgetTest, ALargerRecordEvictsAsManyAsItNeeds) {
  put("a");
  put("b");
  put("c");
  // A record of two records' bytes: a and b go, c stays.
  const uint64_t two = bytes_of("resp_g", "g", one_);
  ASSERT_EQ(two, 2 * one_);
  ASSERT_TRUE(store_.put("resp_g", record_of("g", one_)));
  EXPECT_EQ(store_.size(), 2u);
  EXPECT_EQ(store_.bytes(), 3 * one_);
  EXPECT_FALSE(kept("a"));
  EXPECT_FALSE(kept("b"));
  EXPECT_TRUE(kept("c"));
  EXPECT_TRUE(kept("g"));
}

TEST_F(ResponseStoreBudgetTest, ARecordLargerThanTheBudgetIsNotKeptAndEvictsNothing) {
  put("a");
  put("b");
  const uint64_t before = store_.bytes();
  EXPECT_FALSE(store_.put("resp_huge", record_of("h", 3 * one_)));
  EXPECT_FALSE(store_.get("resp_huge").has_value());
  EXPECT_EQ(store_.size(), 2u);
  EXPECT_EQ(store_.bytes(), before);
  EXPECT_TRUE(kept("a"));
  EXPECT_TRUE(kept("b"));
  // One of exactly the budget is kept, alone.
  const uint64_t exact = bytes_of("resp_x", "x");
  ASSERT_TRUE(store_.put("resp_x", record_of("x", 3 * one_ - exact)));
  EXPECT_EQ(store_.bytes(), 3 * one_);
  EXPECT_EQ(store_.size(), 1u);
  EXPECT_TRUE(kept("x"));
}

// Several threads put, get and erase the same ids at once, with records of several sizes in a
// budget that holds only some of them. Every record a get returns is whole (one put's record,
// never a mix), the byte count stays within the budget, and after everything is erased the
// store counts nothing: no byte was counted twice or lost.
TEST(ResponseStoreConcurrencyTest, ThreadsPutGetAndEraseConsistently) {
  constexpr int kThreads = 4;
  constexpr int kOps = 3000;
  constexpr int kIds = 12;
  const uint64_t budget = 5 * bytes_of("resp_00", "t0-00000", 0) + 200;
  ResponseStore store(budget);
  std::latch start(kThreads);
  std::atomic<int> torn{0};
  std::atomic<int> over_budget{0};
  std::atomic<int> found{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      uint32_t state = 0x9e3779b9u * static_cast<uint32_t>(t + 1);
      for (int i = 0; i < kOps; ++i) {
        state = state * 1664525u + 1013904223u;  // a fixed sequence per thread
        const int n = static_cast<int>((state >> 8) % kIds);
        const std::string id = "resp_" + std::to_string(10 + n);
        const int op = static_cast<int>((state >> 20) % 8);
        if (op < 3) {
          // The tag tells the padding, so a reader can check the whole record.
          const size_t padding = (state >> 4) % 64;
          char tag[32];
          std::snprintf(tag, sizeof tag, "t%d-%05d-%02zu", t, i, padding);
          store.put(id, record_of(tag, padding));
        } else if (op < 7) {
          std::optional<StoredResponse> got = store.get(id);
          if (got) {
            ++found;
            if (!is_whole(*got)) ++torn;
          }
        } else {
          store.erase(id);
        }
        if (store.bytes() > budget) ++over_budget;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(torn.load(), 0) << "a get returned a record no put made";
  EXPECT_EQ(over_budget.load(), 0);
  EXPECT_GT(found.load(), 0) << "the gets found records (the test exercised something)";
  EXPECT_LE(store.bytes(), budget);
  EXPECT_LE(store.size(), static_cast<size_t>(kIds));
  // What is left is whole, and erasing it all leaves nothing counted.
  for (int n = 0; n < kIds; ++n) {
    const std::string id = "resp_" + std::to_string(10 + n);
    if (std::optional<StoredResponse> got = store.get(id)) {
      EXPECT_TRUE(is_whole(*got)) << id;
    }
    store.erase(id);
  }
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

}  // namespace
}  // namespace siesta::server
