// Several conversations with the real binary: 8 conversations taking turns over 2 resident
// sessions (--parallel 2 --max-sessions 8, idle offload on), each routed by the OpenAI
// client's prompt_cache_key, get their history back (cached_tokens) and answers equal to a
// server that never offloads and keeps all 8 resident (routed by id_slot). Status lists them
// without prompts or keys; GET /slots too; bad routing fields get 400; --max-sessions above
// --parallel without offload is refused at start-up. Started as scripts/serve starts it (the
// default model, idle offload on, nothing else), the server keeps 256 conversations: two
// users taking turns, without any routing field, each get their own history back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/spin_until.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::vector<std::string> kTiny = {"--backend",      "sim",    "--model",
                                        "synthetic:tiny", "--port", "0"};

TEST(ServerSessionsE2eTest, EightConversationsTakeTurnsOverTwoSessions) {
  constexpr int kConversations = 8;
  constexpr int kTurns = 3;
  TempDir temp;
  auto server = start_or_die(
      with(kTiny, {"--parallel", "2", "--max-sessions", "8", "--cache-idle-seconds", "600",
                   "--cache-ram-mib", "0", "--cache-disk-dir", temp.file("cache")}));
  auto reference = start_or_die(with(kTiny, {"--parallel", "8"}));
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);
  std::vector<std::string> history(kConversations);
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int c = 0; c < kConversations; ++c) {
      const std::string prompt =
          history[c] + " user " + std::to_string(c) + " says " + std::to_string(turn);
      json request = completion_request(prompt, 6);
      request["prompt_cache_key"] = "conversation-secret-" + std::to_string(c);
      Result<Completion> got = complete(*server, request);
      json alone = completion_request(prompt, 6);
      alone["id_slot"] = c;
      Result<Completion> want = complete(*reference, alone);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      ASSERT_EQ(got->http_status, 200) << got->body.dump();
      ASSERT_EQ(want->http_status, 200) << want->body.dump();
      EXPECT_EQ(got->text, want->text) << "turn " << turn << " conversation " << c;
      EXPECT_EQ(got->cached_tokens, want->cached_tokens) << "turn " << turn << " conv " << c;
      if (turn > 0) {
        EXPECT_EQ(got->cached_tokens, static_cast<int64_t>(history[c].size()) - 1)
            << "conversation " << c << " got its history back";
      }
      history[c] = prompt + got->text;
    }
  }
  // The last conversation's snapshot is written ahead in the background (the other six are on
  // disk already): its state says "saving" until the write ends, on its own.
  Result<json> status = server->status();
  auto nothing_saving = [&] {
    status = server->status();
    if (!status.ok() || !(*status)["cache"].contains("sessions")) return false;
    for (const json& s : (*status)["cache"]["sessions"]) {
      if (s["state"] == "saving") return false;
    }
    return true;
  };
  ASSERT_TRUE(siesta::testing::spin_until(nothing_saving, std::chrono::seconds(60)))
      << "a write ahead never ended";
  ASSERT_TRUE(status.ok());
  const json& cache = (*status)["cache"];
  ASSERT_TRUE(cache.contains("sessions")) << cache.dump();
  ASSERT_EQ(cache["sessions"].size(), 8u) << cache.dump();
  int resident = 0;
  for (const json& s : cache["sessions"]) {
    EXPECT_EQ(s.size(), 9u) << s.dump();  // session_json(): never a prompt or a key
    if (s["state"] == "resident") ++resident;
  }
  EXPECT_EQ(resident, 2) << cache.dump();
  EXPECT_GE(cache["counters"]["restore_hits"].get<int64_t>(), 2 * (kConversations - 2));
  const std::string dumped = status->dump();
  EXPECT_THAT(dumped, ::testing::Not(HasSubstr("conversation-secret")));
  EXPECT_THAT(dumped, ::testing::Not(HasSubstr("says")));

  httplib::Result slots = server->get("/slots");
  ASSERT_TRUE(slots);
  EXPECT_EQ(slots->status, 200);
  const json listed = json::parse(slots->body);
  ASSERT_EQ(listed.size(), 8u);
  EXPECT_EQ(listed[0]["n_ctx"], 256);
  EXPECT_FALSE(listed[0]["is_processing"].get<bool>());
  EXPECT_THAT(slots->body, ::testing::Not(HasSubstr("conversation-secret")));

  httplib::Result metrics = server->get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("siesta_sessions{state=\"resident\"} 2"));
  EXPECT_THAT(metrics->body, HasSubstr("siesta_session_evictions_total"));
  EXPECT_THAT(metrics->body, HasSubstr("siesta_engine_queue_wait_seconds_count"));

  // Per-session erase: conversation 5's history goes, the others keep theirs.
  httplib::Result erased = server->post("/slots/5?action=erase", "{}", "application/json");
  ASSERT_TRUE(erased);
  EXPECT_EQ(erased->status, 200) << erased->body;
  EXPECT_EQ(json::parse(erased->body)["id_slot"], 5);
  httplib::Result missing = server->post("/slots/8?action=erase", "{}", "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400) << missing->body;

  for (const json& bad :
       {json({{"prompt", "x"}, {"prompt_cache_key", 3}}),
        json({{"prompt", "x"}, {"prompt_cache_key", std::string(300, 'k')}}),
        json({{"prompt", "x"}, {"id_slot", 8}}), json({{"prompt", "x"}, {"id_slot", "0"}})}) {
    Result<Completion> refused = complete(*server, bad);
    ASSERT_TRUE(refused.ok());
    EXPECT_EQ(refused->http_status, 400) << bad.dump() << " " << refused->body.dump();
    EXPECT_EQ(refused->body["error"]["type"], "invalid_request_error");
  }
  EXPECT_EQ(server->stop(SIGTERM).value().exit_code, 0);
  EXPECT_EQ(reference->stop(SIGTERM).value().exit_code, 0);
}

TEST(ServerSessionsE2eTest, StartedAsScriptsServeStartsItTwoUsersTakingTurnsKeepTheirHistories) {
  TempDir temp;
  // scripts/serve's flags (the CPU machine's --backend auto is the simulator).
  auto server = start_or_die({"--backend", "auto", "--port", "0", "--cache-idle-seconds", "300",
                              "--cache-disk-dir", temp.file("cache")});
  auto reference = start_or_die({"--backend", "auto", "--port", "0", "--parallel", "2"});
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);
  EXPECT_THAT(server->stderr_text(), HasSubstr("keeping up to 256 conversations"));
  std::vector<std::string> history = {"Alice asks about the tides.",
                                      "Bob wants a recipe for bread."};
  for (int turn = 0; turn < 3; ++turn) {
    for (size_t user = 0; user < history.size(); ++user) {
      SCOPED_TRACE("turn " + std::to_string(turn) + " user " + std::to_string(user));
      const std::string prompt = history[user] + " And then " + std::to_string(turn) + "?";
      Result<Completion> got = complete(*server, completion_request(prompt, 6));
      json alone = completion_request(prompt, 6);
      alone["id_slot"] = static_cast<int>(user);
      Result<Completion> want = complete(*reference, alone);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      ASSERT_EQ(got->http_status, 200) << got->body.dump();
      EXPECT_EQ(got->text, want->text);
      if (turn > 0) {
        EXPECT_EQ(got->cached_tokens, want->cached_tokens) << "the user's own history is kept";
        EXPECT_GT(got->cached_tokens, static_cast<int64_t>(history[user].size()) / 2);
      }
      history[user] = prompt + got->text;
    }
  }
  Result<json> status = server->status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["cache"]["sessions"].size(), 2u) << status->dump();
}

TEST(ServerSessionsE2eTest, MoreConversationsThanSessionsNeedOffload) {
  Result<ProcessExit> exit =
      ServerProcess::run_to_exit(with(kTiny, {"--parallel", "2", "--max-sessions", "4"}));
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 2) << exit->describe();
  EXPECT_THAT(exit->stderr_text, HasSubstr("--max-sessions 4"));
  EXPECT_THAT(exit->stderr_text, HasSubstr("--cache-disk-dir"));
}

}  // namespace
}  // namespace siesta::testing
