// Requests racing the idle deadline on the real binary (a request arriving just as the idle
// timer fires hung, 32 tries of 32, or crashed, 41 of 41, in llama.cpp). With
// --cache-idle-seconds 1, each round lets the server go idle and then fires a burst from
// several client threads at a moment spread around the deadline: shortly before it (the
// save must not start, or must be cancelled), at it (the save is starting or running), after
// it (a restore), or the moment /v1/status first shows the save begun. Every request must be
// answered 200 with the bytes an offload-off server gives for the same prompt; no crash, no
// hang (every request has a 30 s read timeout), and the server is alive at the end.
//
// Timing: the only waits for time are those aiming a burst at the server's wall-clock idle
// deadline (sleep_until a moment measured from the last answer) and the status polling of
// ServerProcess::wait_for_status; the offsets are fixed, so every run aims at the same spots.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kRaceModel = {"--backend",      "sim",   "--model",
                                             "synthetic:tiny", "--ctx", "1024"};
constexpr int kThreads = 6;
constexpr int kRequestsPerThread = 3;
constexpr int kMaxTokens = 8;
// Milliseconds after the last answer of the previous round; -1: when /v1/status first shows
// the session leaving "resident" (a save begun or done).
const std::vector<int> kOffsetsMs = {850,  950,  980,  990,  995,  1000, 1003,
                                     1006, 1010, 1020, 1050, 1150, -1,   -1};

std::string prompt_for(int thread, int request) {
  return "Client " + std::to_string(thread) + " asks question " + std::to_string(request % 2) + ":";
}

TEST(ServerRaceE2eTest, HundredsOfRequestsAroundTheIdleDeadline) {
  TempDir temp;
  std::vector<std::string> args = kRaceModel;
  for (const char* arg : {"--cache-idle-seconds", "1", "--cache-expire-seconds", "600",
                          "--cache-ram-mib", "0", "--cache-disk-dir"}) {
    args.push_back(arg);
  }
  args.push_back(temp.file("cache"));
  std::unique_ptr<ServerProcess> server = start_or_die(args);
  std::unique_ptr<ServerProcess> reference = start_or_die(kRaceModel);
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);

  // The expected bytes of every prompt, from the offload-off server.
  std::map<std::string, std::string> expected;
  for (int thread = 0; thread < kThreads; ++thread) {
    for (int request = 0; request < 2; ++request) {
      const std::string prompt = prompt_for(thread, request);
      Result<Completion> answer = complete(*reference, completion_request(prompt, kMaxTokens));
      ASSERT_TRUE(answer.ok()) << answer.status().to_string();
      ASSERT_EQ(answer->http_status, 200) << answer->body.dump();
      expected[prompt] = answer->text;
    }
  }
  ASSERT_TRUE(reference->stop(SIGTERM).ok());

  std::mutex mutex;
  std::vector<std::string> failures;
  std::atomic<int> answered{0};
  Clock::time_point last_answer = Clock::now();
  Result<Completion> warm = complete(*server, completion_request(prompt_for(0, 0), kMaxTokens));
  ASSERT_TRUE(warm.ok() && warm->http_status == 200);
  last_answer = Clock::now();

  for (size_t round = 0; round < kOffsetsMs.size(); ++round) {
    if (kOffsetsMs[round] < 0) {
      Result<json> leaving = server->wait_for_status(
          [](const json& body) {
            return body.contains("cache") && body["cache"].value("state", "") != "resident";
          },
          "the session leaving resident", std::chrono::seconds(10), std::chrono::milliseconds(1));
      ASSERT_TRUE(leaving.ok()) << leaving.status().to_string();
    } else {
      std::this_thread::sleep_until(last_answer + std::chrono::milliseconds(kOffsetsMs[round]));
    }
    std::vector<std::thread> clients;
    for (int thread = 0; thread < kThreads; ++thread) {
      clients.emplace_back([&, thread, round] {
        for (int request = 0; request < kRequestsPerThread; ++request) {
          const std::string prompt = prompt_for(thread, request);
          const json body = completion_request(prompt, kMaxTokens);
          // Every third request is streamed, so the SSE path races the deadline too.
          const bool streamed = (thread + request) % 3 == 0;
          Result<Completion> answer =
              streamed ? complete_streamed(*server, body) : complete(*server, body);
          std::string failure;
          if (!answer.ok()) {
            failure = answer.status().to_string();
          } else if (answer->http_status != 200) {
            failure = "status " + std::to_string(answer->http_status) + ": " + answer->body.dump();
          } else if (answer->text != expected.at(prompt)) {
            failure = "text \"" + answer->text + "\" instead of \"" + expected.at(prompt) + "\"";
          }
          if (failure.empty()) {
            answered.fetch_add(1);
          } else {
            std::lock_guard<std::mutex> lock(mutex);
            failures.push_back("round " + std::to_string(round) + ", client " +
                               std::to_string(thread) + (streamed ? " (streamed)" : "") + ": " +
                               failure);
          }
        }
      });
    }
    for (std::thread& client : clients) client.join();
    last_answer = Clock::now();
    ASSERT_TRUE(server->running()) << "the server died in round " << round << ":\n"
                                   << server->stderr_text();
  }

  EXPECT_THAT(failures, ::testing::IsEmpty());
  EXPECT_EQ(answered.load(), static_cast<int>(kOffsetsMs.size()) * kThreads * kRequestsPerThread);
  httplib::Result health = server->get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  Result<json> status = server->status();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  std::cout << "counters after the race: " << status->at("cache").value("counters", json()) << "\n";
  // The race really happened: the session went to disk and came back.
  EXPECT_GE(cache_counter(*status, "saves"), 1) << status->dump();
  EXPECT_GE(cache_counter(*status, "restore_hits"), 1) << status->dump();

  Result<ProcessExit> exit = server->stop(SIGTERM);
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\n" << exit->stderr_text;
}

}  // namespace
}  // namespace siesta::testing
