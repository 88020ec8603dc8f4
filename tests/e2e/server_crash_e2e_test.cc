// kill -9 of the real binary around a save, then a new server on the same snapshot
// directory: it removes what the dead one left (its lock, its snapshot or the temporary of
// the save it was killed in), says so in its log, and serves correct bytes.
//
// What is injected, and when: the dead server is asked to offload now (POST
// /v1/cache/offload, which starts the save and answers), and is killed with SIGKILL the
// moment that answer arrives, so the kill lands during the save (a temporary file left) or
// just after it (the snapshot left); a second test kills it once /v1/status says "disk"
// (the snapshot is certainly there). Which of the two the first test hit is printed; both
// must be cleaned up. The session is a synthetic:tiny one with a 4096-token context (1 KiB of
// KV per token) and about 2000 tokens of history, so the save has megabytes to seal and sync
// (the offload answer comes back as soon as the save has started; the kill follows within a
// millisecond). tiny has the most KV bytes per unit of computation of the named sizes, which
// keeps the prefill quick under the sanitizers too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::IsEmpty;

const std::vector<std::string> kCrashModel = {"--backend",      "sim",   "--model",
                                              "synthetic:tiny", "--ctx", "4096"};

std::vector<std::string> offload_args(const std::string& dir, const std::string& idle) {
  std::vector<std::string> args = kCrashModel;
  for (const std::string& arg :
       {std::string("--cache-idle-seconds"), idle, std::string("--cache-expire-seconds"),
        std::string("3600"), std::string("--cache-ram-mib"), std::string("0"),
        std::string("--cache-disk-dir"), dir}) {
    args.push_back(arg);
  }
  return args;
}

// A prompt of about 2000 bytes (tokens), the same every run: about 2 MiB of KV to save.
std::string long_prompt() {
  std::string prompt;
  for (int i = 0; prompt.size() < 2000; ++i) {
    prompt += "Line " + std::to_string(i) + " of the notes the session must keep. ";
  }
  return prompt;
}

// The files of `dir` whose names carry `nonce` (the dead server's).
std::vector<std::string> files_of(const std::string& dir, const std::string& nonce) {
  std::vector<std::string> names;
  for (const std::string& name : list_dir(dir)) {
    if (name.find(nonce) != std::string::npos) names.push_back(name);
  }
  return names;
}

// The nonce of the server's lock file "siesta-<nonce>.lock" in `dir` ("" when none).
std::string lock_nonce(const std::string& dir) {
  static const std::regex kLock("siesta-([0-9a-f]{32})\\.lock");
  for (const std::string& name : list_dir(dir)) {
    std::smatch match;
    if (std::regex_match(name, match, kLock)) return match[1].str();
  }
  return "";
}

// The restart: a new server on `dir` removes exactly the dead server's files and logs it;
// then it generates the same bytes as an offload-off server.
void expect_restart_cleans_up(const std::string& dir, const std::string& dead_nonce,
                              const std::vector<std::string>& dead_files) {
  std::unique_ptr<ServerProcess> restarted = start_or_die(offload_args(dir, "600"));
  ASSERT_NE(restarted, nullptr);
  EXPECT_THAT(files_of(dir, dead_nonce), IsEmpty()) << "the dead server's files are removed";

  const std::string log = restarted->stderr_text();
  static const std::regex kRemoved("removed (\\d+) files? of stopped servers");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log, match, kRemoved)) << "the log says nothing of the clean-up:\n"
                                                       << log;
  EXPECT_EQ(std::stoul(match[1].str()), dead_files.size())
      << "removed vs. left: " << ::testing::PrintToString(dead_files) << "\n"
      << log;

  Result<json> status = restarted->status();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_EQ(status->at("cache").value("state", ""), "resident") << status->dump();

  std::unique_ptr<ServerProcess> reference = start_or_die(kCrashModel);
  ASSERT_NE(reference, nullptr);
  const json request = completion_request("After the crash:", 16);
  Result<Completion> got = complete(*restarted, request);
  Result<Completion> want = complete(*reference, request);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_EQ(got->http_status, 200) << got->body.dump();
  EXPECT_EQ(got->cached_tokens, 0) << "a new process never reads a dead one's snapshot";
  EXPECT_EQ(got->text, want->text);

  Result<ProcessExit> exit = restarted->stop(SIGTERM);
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\n" << exit->stderr_text;
}

TEST(ServerCrashE2eTest, KillNineDuringASaveThenRestartRemovesTheLeftovers) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  std::unique_ptr<ServerProcess> server = start_or_die(offload_args(dir, "600"));
  ASSERT_NE(server, nullptr);
  Result<Completion> first = complete(*server, completion_request(long_prompt(), 16));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->http_status, 200) << first->body.dump();
  const std::string nonce = lock_nonce(dir);
  ASSERT_FALSE(nonce.empty()) << ::testing::PrintToString(list_dir(dir));

  httplib::Result offload = server->post("/v1/cache/offload", "");
  // Injected: SIGKILL the moment the offload was answered (the save is under way).
  Result<ProcessExit> killed = server->kill_hard();
  ASSERT_TRUE(offload) << httplib::to_string(offload.error());
  EXPECT_TRUE(offload->status == 200 || offload->status == 202) << offload->body;
  ASSERT_TRUE(killed.ok()) << killed.status().to_string();
  EXPECT_EQ(killed->signal, SIGKILL) << killed->describe();

  const std::vector<std::string> left = files_of(dir, nonce);
  const bool temporary = std::any_of(left.begin(), left.end(), [](const std::string& name) {
    return name.find(".tmp") != std::string::npos;
  });
  const bool snapshot = !snapshot_files(dir).empty();
  std::cout << "killed "
            << (temporary  ? "during the save (temporary file left)"
                : snapshot ? "after the save (snapshot left)"
                           : "before the save wrote a file")
            << "; left: " << ::testing::PrintToString(left) << "\n";
  EXPECT_THAT(left, ::testing::Contains("siesta-" + nonce + ".lock"));
  expect_restart_cleans_up(dir, nonce, left);
}

TEST(ServerCrashE2eTest, KillNineWhileAsleepThenRestartRemovesTheSnapshot) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  std::unique_ptr<ServerProcess> server = start_or_die(offload_args(dir, "1"));
  ASSERT_NE(server, nullptr);
  Result<Completion> first = complete(*server, completion_request("A short history.", 16));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->http_status, 200) << first->body.dump();
  Result<json> asleep = server->wait_for_cache_state("disk");
  ASSERT_TRUE(asleep.ok()) << asleep.status().to_string();
  const std::string nonce = lock_nonce(dir);
  ASSERT_FALSE(nonce.empty()) << ::testing::PrintToString(list_dir(dir));

  // Injected: SIGKILL while the session sleeps on disk.
  Result<ProcessExit> killed = server->kill_hard();
  ASSERT_TRUE(killed.ok()) << killed.status().to_string();
  EXPECT_EQ(killed->signal, SIGKILL) << killed->describe();
  const std::vector<std::string> left = files_of(dir, nonce);
  EXPECT_THAT(left, ::testing::UnorderedElementsAre("siesta-" + nonce + ".lock",
                                                    "siesta-" + nonce + "-0.snap"));
  expect_restart_cleans_up(dir, nonce, left);
}

}  // namespace
}  // namespace siesta::testing
