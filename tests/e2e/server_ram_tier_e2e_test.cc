// The RAM tier with the real binary (--cache-ram-mib, docs/IDLE_SESSION.md "The RAM tier"):
// with a budget, an offloaded conversation's snapshot is kept in host memory (state "ram", no
// snapshot file), comes back with its history and the same answer as a server that never
// offloads, keeps its copy as the base of the next save, which copies only what changed (a
// delta), and comes back from both; a budget too small for the conversation sends
// it to disk; a full tier moves its least recently used conversation to disk; the tier is on
// by default (a quarter of the machine's memory, at most 8 GiB), 0 turns it off, and a budget
// beyond the machine's memory is refused at start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/offload/ram_tier.h"
#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::vector<std::string> kSmall = {"--backend", "sim", "--model", "synthetic:small"};
constexpr const char* kPrompt =
    "A siesta is a short nap taken in the early afternoon, often after the midday meal. ";

std::vector<std::string> offload_args(const std::string& dir) {
  return with(kSmall, {"--cache-idle-seconds", "600", "--cache-disk-dir", dir});
}

// The second turn: the first one's prompt and answer, and more.
json second_request(const Completion& first) {
  return completion_request(std::string(kPrompt) + first.text + " And then?", 8);
}

TEST(ServerRamTierE2eTest, AnOffloadedConversationWaitsInRamAndReturnsWithItsHistory) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  auto server = start_or_die(with(offload_args(dir), {"--cache-ram-mib", "256"}));
  auto reference = start_or_die(kSmall);  // never offloads
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);
  EXPECT_THAT(server->stderr_text(), HasSubstr("RAM tier: "));

  Result<Completion> first = complete(*server, completion_request(kPrompt, 8));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->http_status, 200) << first->body.dump();
  ASSERT_TRUE(server->post("/v1/cache/offload", ""));
  Result<json> asleep = server->wait_for_cache_state("ram");
  ASSERT_TRUE(asleep.ok()) << asleep.status().to_string();
  const json& cache = (*asleep)["cache"];
  EXPECT_EQ(snapshot_files(dir), std::vector<std::string>{}) << "no file: the snapshot is in RAM";
  EXPECT_EQ(cache.value("disk_bytes", -1), 0) << cache.dump();
  EXPECT_GT(cache.value("ram_bytes", 0), 0) << cache.dump();
  ASSERT_TRUE(cache.contains("ram_tier")) << cache.dump();
  EXPECT_EQ(cache["ram_tier"].value("used_bytes", -1), cache.value("ram_bytes", 0));
  EXPECT_GT(cache["ram_tier"].value("budget_bytes", 0), cache.value("ram_bytes", 0));
  // The simulator copies to registered host memory directly, as CUDA does to pinned memory.
  EXPECT_EQ(cache["ram_tier"].value("direct_copies", false), true) << cache.dump();
  EXPECT_EQ(cache_counter(*asleep, "ram_saves"), 1);
  httplib::Result metrics = server->get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("siesta_cache_state{state=\"ram\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("siesta_ram_tier_direct_copies 1\n"));
  httplib::Result props = server->get("/props");  // llama-server's sleep: no device memory held
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body).value("is_sleeping", false), true) << props->body;

  // The second turn restores it from RAM: its history is reused, its answer the reference's.
  Result<Completion> second = complete(*server, second_request(*first));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  ASSERT_EQ(second->http_status, 200) << second->body.dump();
  Result<Completion> ref_first = complete(*reference, completion_request(kPrompt, 8));
  ASSERT_TRUE(ref_first.ok());
  EXPECT_EQ(ref_first->text, first->text);
  Result<Completion> ref_second = complete(*reference, second_request(*ref_first));
  ASSERT_TRUE(ref_second.ok());
  EXPECT_EQ(second->text, ref_second->text);
  EXPECT_GT(second->cached_tokens, 0) << second->body.dump();
  EXPECT_EQ(second->cached_tokens, ref_second->cached_tokens);

  Result<json> awake = server->status();
  ASSERT_TRUE(awake.ok());
  EXPECT_EQ((*awake)["cache"].value("state", ""), "resident");
  EXPECT_EQ((*awake)["cache"].value("ram_bytes", -1), cache.value("ram_bytes", 0))
      << "the copy stays as the base of the next save";
  EXPECT_EQ((*awake)["cache"]["ram_tier"].value("used_bytes", -1), cache.value("ram_bytes", 0));
  EXPECT_EQ(cache_counter(*awake, "ram_restores"), 1);
  EXPECT_EQ(cache_counter(*awake, "restore_hits"), 1);

  // Offloaded again, it copies only what the second turn changed, beside the copy; the third
  // turn comes back from both with the reference's answer.
  ASSERT_TRUE(server->post("/v1/cache/offload", ""));
  Result<json> again = server->wait_for_cache_state("ram");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(cache_counter(*again, "ram_saves"), 2);
  EXPECT_EQ(cache_counter(*again, "delta_saves"), 1) << again->dump();
  EXPECT_EQ(snapshot_files(dir), std::vector<std::string>{});
  const auto third_request = [](const Completion& first_turn, const Completion& second_turn) {
    return completion_request(
        std::string(kPrompt) + first_turn.text + " And then?" + second_turn.text + " Go on.", 8);
  };
  Result<Completion> third = complete(*server, third_request(*first, *second));
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  Result<Completion> ref_third = complete(*reference, third_request(*ref_first, *ref_second));
  ASSERT_TRUE(ref_third.ok());
  EXPECT_EQ(third->text, ref_third->text);
  EXPECT_EQ(third->cached_tokens, ref_third->cached_tokens);
  Result<json> back = server->status();
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(cache_counter(*back, "ram_restores"), 2);
  EXPECT_EQ(cache_counter(*back, "restore_hits"), 2);
}

TEST(ServerRamTierE2eTest, ABudgetTooSmallForTheConversationSendsItToDisk) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  // One MiB: the small model's KV rows for this prompt and its checkpoints do not fit.
  auto server = start_or_die(with(offload_args(dir), {"--cache-ram-mib", "1"}));
  ASSERT_NE(server, nullptr);
  std::string long_prompt;
  while (long_prompt.size() < 1500) long_prompt += kPrompt;
  Result<Completion> first = complete(*server, completion_request(long_prompt, 4));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(server->post("/v1/cache/offload", ""));
  Result<json> asleep = server->wait_for_cache_state("disk");
  ASSERT_TRUE(asleep.ok()) << asleep.status().to_string();
  EXPECT_GT((*asleep)["cache"].value("disk_bytes", 0), 1 << 20) << "larger than the budget";
  EXPECT_EQ(snapshot_files(dir).size(), 1u);
  EXPECT_EQ(cache_counter(*asleep, "ram_full"), 1);
  EXPECT_EQ((*asleep)["cache"]["ram_tier"].value("refused_full", -1), 1);
  Result<Completion> second =
      complete(*server, completion_request(long_prompt + first->text + " More.", 4));
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->cached_tokens, 1000) << second->body.dump();
}

// The state of the conversation in session `id` in a status body ("" when it is not listed).
std::string session_state(const json& status, int id) {
  for (const json& session : status["cache"]["sessions"]) {
    if (session.value("id", -1) == id) return session.value("state", "");
  }
  return "";
}

TEST(ServerRamTierE2eTest, WhenTheTierIsFullTheLeastRecentlyUsedConversationGoesToDisk) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  // One MiB holds one conversation of about 420 tokens (~860 KiB in the tier), not two.
  auto server = start_or_die(
      with(offload_args(dir), {"--cache-ram-mib", "1", "--parallel", "1", "--max-sessions", "2"}));
  ASSERT_NE(server, nullptr);
  std::string prompt;
  for (int i = 0; i < 5; ++i) prompt += kPrompt;
  auto turn = [&](const std::string& key, const std::string& text) {
    json request = completion_request(text, 4);
    request["prompt_cache_key"] = key;
    return complete(*server, request);
  };
  auto offload = [&] {
    httplib::Result offloaded = server->post("/v1/cache/offload", "{}");
    ASSERT_TRUE(offloaded);
    ASSERT_EQ(offloaded->status, 200) << offloaded->body;
  };
  Result<Completion> a = turn("a", "First: " + prompt);
  ASSERT_TRUE(a.ok() && a->http_status == 200);
  offload();
  ASSERT_TRUE(server
                  ->wait_for_status([](const json& s) { return session_state(s, 0) == "ram"; },
                                    "conversation a in RAM")
                  .ok());
  Result<Completion> b = turn("b", "Second: " + prompt);
  ASSERT_TRUE(b.ok() && b->http_status == 200);
  offload();  // b needs the tier's room: a, used least recently, is spilled to disk
  Result<json> moved = server->wait_for_status(
      [](const json& s) { return session_state(s, 0) == "disk" && session_state(s, 1) == "ram"; },
      "a on disk, b in RAM");
  ASSERT_TRUE(moved.ok()) << moved.status().to_string();
  const json& cache = (*moved)["cache"];
  EXPECT_EQ(cache["ram_tier"].value("spills", -1), 1) << cache.dump();
  EXPECT_EQ(cache["ram_tier"].value("spill_failures", -1), 0) << cache.dump();
  EXPECT_EQ(cache_counter(*moved, "ram_spills"), 1);
  EXPECT_EQ(cache_counter(*moved, "ram_full"), 0);
  EXPECT_EQ(snapshot_files(dir).size(), 1u) << "a's spilled snapshot, and nothing of b's";
  httplib::Result metrics = server->get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("siesta_cache_ram_spills_total 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("siesta_ram_tier_spill_failures_total 0\n"));

  // Both come back with their histories, wherever the tier put them meanwhile (a's return
  // writes a ahead into RAM, which spills b, now the least recently used).
  Result<Completion> a2 = turn("a", "First: " + prompt + a->text + " Again.");
  ASSERT_TRUE(a2.ok() && a2->http_status == 200);
  EXPECT_GT(a2->cached_tokens, 400) << a2->body.dump();
  Result<Completion> b2 = turn("b", "Second: " + prompt + b->text + " Again.");
  ASSERT_TRUE(b2.ok() && b2->http_status == 200);
  EXPECT_GT(b2->cached_tokens, 400) << b2->body.dump();
  Result<json> after = server->status();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(cache_counter(*after, "restore_hits"), 2);
  EXPECT_EQ(cache_counter(*after, "write_failures"), 0);
}

TEST(ServerRamTierE2eTest, OnByDefaultAtAQuarterOfTheMachineZeroTurnsItOffTooMuchIsRefused) {
  TempDir temp;
  auto on = start_or_die(offload_args(temp.file("cache")));
  ASSERT_NE(on, nullptr);
  const uint64_t default_mib = default_ram_tier_bytes() >> 20;  // this machine's, as the server's
  ASSERT_GT(default_mib, 0u);
  EXPECT_LE(default_mib, 8192u);
  EXPECT_THAT(on->stderr_text(), HasSubstr("RAM tier: " + std::to_string(default_mib) + " MiB"));
  Result<json> status = on->status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["cache"]["ram_tier"].value("budget_bytes", uint64_t{0}), default_mib << 20);
  EXPECT_GT((*status)["cache"]["ram_tier"].value("ready_bytes", uint64_t{0}), 0u)
      << "its first chunk is pinned before the server listens";

  auto off = start_or_die(with(offload_args(temp.file("off")), {"--cache-ram-mib", "0"}));
  ASSERT_NE(off, nullptr);
  EXPECT_THAT(off->stderr_text(), HasSubstr("RAM tier off"));
  status = off->status();
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE((*status)["cache"].contains("ram_tier")) << status->dump();

  Result<ProcessExit> refused = ServerProcess::run_to_exit(
      with(offload_args(temp.file("other")), {"--cache-ram-mib", "999999999"}));
  ASSERT_TRUE(refused.ok()) << refused.status().to_string();
  EXPECT_EQ(refused->exit_code, 2) << refused->describe();
  EXPECT_THAT(refused->stderr_text, HasSubstr("--cache-ram-mib"));
}

}  // namespace
}  // namespace siesta::testing
