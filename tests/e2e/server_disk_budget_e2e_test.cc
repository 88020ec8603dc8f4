// The snapshot directory's budget with the real binary (--cache-disk-max-mib,
// docs/IDLE_SESSION.md "The disk budget"): ten conversations taking turns over one resident
// session, with a budget of a few snapshots. After every request the directory holds no more
// than the budget; the conversations whose snapshots were deleted for room read their prompt
// again and answer as a server that never offloads; the others come back with their history.
// The default budget is half the free space at start, printed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::vector<std::string> kSmallSim = {"--backend", "sim", "--model", "synthetic:small"};

uint64_t cache_dir_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

TEST(ServerDiskBudgetE2eTest, TenConversationsOverABudgetOfAFewSnapshotsStayWithinIt) {
  constexpr int kConversations = 10;
  constexpr uint64_t kBudget = uint64_t{1} << 20;
  TempDir temp;
  const std::string dir = temp.file("cache");
  auto server = start_or_die(
      with(kSmallSim, {"--cache-idle-seconds", "600", "--cache-ram-mib", "0", "--max-sessions",
                       "10", "--cache-disk-max-mib", "1", "--cache-disk-dir", dir}));
  auto reference = start_or_die(with(kSmallSim, {"--parallel", "10"}));
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);
  EXPECT_THAT(server->stderr_text(), HasSubstr("snapshot directory budget: 1 MiB"));
  std::vector<std::string> history(kConversations);
  int restored = 0;
  int read_again = 0;
  for (int turn = 0; turn < 2; ++turn) {
    // The second turn returns the most recently used first: those still have their snapshots.
    for (int i = 0; i < kConversations; ++i) {
      const int c = turn == 0 ? i : kConversations - 1 - i;
      SCOPED_TRACE("turn " + std::to_string(turn) + " conversation " + std::to_string(c));
      const std::string prompt = history[c] + " Conversation " + std::to_string(c) +
                                 " asks about the tides, the moon and the bread, turn " +
                                 std::to_string(turn) + ".";
      json request = completion_request(prompt, 6);
      request["prompt_cache_key"] = "user-" + std::to_string(c);
      Result<Completion> got = complete(*server, request);
      json alone = completion_request(prompt, 6);
      alone["id_slot"] = c;
      Result<Completion> want = complete(*reference, alone);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      ASSERT_EQ(got->http_status, 200) << got->body.dump();
      EXPECT_EQ(got->text, want->text) << "never a wrong answer";
      if (turn > 0) {
        if (got->cached_tokens > 0) {
          EXPECT_EQ(got->cached_tokens, want->cached_tokens);
          ++restored;
        } else {
          ++read_again;
        }
      }
      EXPECT_LE(cache_dir_bytes(dir), kBudget) << "after a request";
      history[c] = prompt + got->text;
    }
  }
  Result<json> status = server->status();
  ASSERT_TRUE(status.ok());
  const json& disk = (*status)["cache"]["disk_tier"];
  EXPECT_EQ(disk.value("budget_bytes", 0), static_cast<int64_t>(kBudget)) << disk.dump();
  EXPECT_LE(disk.value("used_bytes", kBudget + 1), kBudget);
  EXPECT_GT(disk.value("deleted_for_room", 0), 0) << disk.dump();
  EXPECT_EQ(cache_counter(*status, "disk_drops"), disk.value("deleted_for_room", -1));
  EXPECT_GT(read_again, 0) << "some snapshots were deleted for room";
  EXPECT_GT(restored, 0) << "the most recently used came back";
  httplib::Result metrics = server->get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("siesta_disk_tier_budget_bytes 1048576\n"));
  EXPECT_THAT(metrics->body, HasSubstr("siesta_disk_tier_deleted_for_room_total "));
}

TEST(ServerDiskBudgetE2eTest, TheDefaultBudgetIsHalfTheFreeSpaceAtStart) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  auto server =
      start_or_die(with(kSmallSim, {"--cache-idle-seconds", "600", "--cache-disk-dir", dir}));
  ASSERT_NE(server, nullptr);
  const std::filesystem::space_info space = std::filesystem::space(temp.path());
  Result<json> status = server->status();
  ASSERT_TRUE(status.ok());
  const int64_t budget = (*status)["cache"]["disk_tier"].value("budget_bytes", int64_t{0});
  const auto half = static_cast<int64_t>(space.available / 2);
  // Within 1 % of half of what is free now (other programs write meanwhile), whole MiB.
  EXPECT_NEAR(static_cast<double>(budget), static_cast<double>(half), half * 0.01);
  EXPECT_EQ(budget % (1 << 20), 0);
  EXPECT_THAT(server->stderr_text(),
              HasSubstr("snapshot directory budget: " + std::to_string(budget >> 20) + " MiB"));
}

}  // namespace
}  // namespace siesta::testing
