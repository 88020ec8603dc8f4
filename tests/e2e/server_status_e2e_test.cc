// The real binary on a loopback port: /health, /v1/status (cache state from the very first
// request), the error shapes, and a clean exit on SIGTERM and SIGINT.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The names in `dir`, sorted.
std::vector<std::string> list_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

json get_json(const ServerProcess& server, const std::string& path, int expected_status) {
  httplib::Result response = server.get(path);
  EXPECT_TRUE(response) << "GET " << path << ": " << httplib::to_string(response.error());
  if (!response) return json();
  EXPECT_EQ(response->status, expected_status) << "GET " << path << ": " << response->body;
  EXPECT_THAT(response->get_header_value("Content-Type"), HasSubstr("application/json"));
  json body = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(body.is_discarded()) << response->body;
  return body;
}

void expect_status_shape(const json& body) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> shape = {
      {"server", {"version", "uptime_seconds"}},
      {"backend",
       {"name", "granularity", "reserved_bytes", "committed_bytes", "device_total_bytes",
        "device_free_bytes"}},
      {"cache",
       {"state", "idle_seconds", "expire_seconds", "disk_bytes", "released_vram_bytes",
        "released_host_bytes", "tokens", "operation_ms"}},
  };
  for (const auto& [section, keys] : shape) {
    ASSERT_TRUE(body.contains(section) && body[section].is_object()) << body.dump();
    for (const std::string& key : keys) {
      ASSERT_TRUE(body[section].contains(key)) << section << "." << key << " in " << body.dump();
      const json& value = body[section][key];
      const bool text = key == "version" || key == "name" || key == "state";
      EXPECT_TRUE(text ? value.is_string() : value.is_number()) << section << "." << key;
    }
  }
}

void expect_api_error(const json& body, const std::string& code) {
  ASSERT_TRUE(body.contains("error") && body["error"].is_object()) << body.dump();
  const json& error = body["error"];
  ASSERT_TRUE(error.contains("message") && error["message"].is_string()) << body.dump();
  EXPECT_FALSE(error["message"].get<std::string>().empty());
  ASSERT_TRUE(error.contains("type") && error["type"].is_string()) << body.dump();
  ASSERT_TRUE(error.contains("code")) << body.dump();
  EXPECT_EQ(error["code"], code);
}

void expect_clean_exit(ServerProcess& server, int signal_number) {
  Result<ProcessExit> exit = server.stop(signal_number);
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\nstderr:\n" << exit->stderr_text;
}

TEST(ServerStatusE2eTest, OffloadOffIsDisabled) {
  auto server = start_or_die({"--backend", "sim"});
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->listening_line(), "siesta-server listening on " + server->base_url());
  const json body = get_json(*server, "/v1/status", 200);
  expect_status_shape(body);
  EXPECT_EQ(body["cache"]["state"], "disabled");
  EXPECT_EQ(body["cache"]["idle_seconds"], 0);
  EXPECT_EQ(body["cache"]["expire_seconds"], 3600);
  EXPECT_EQ(body["backend"]["name"], "sim");
  EXPECT_GT(body["backend"]["granularity"].get<uint64_t>(), 0u);
  EXPECT_THAT(body["server"]["version"].get<std::string>(), ::testing::Not(""));
  expect_clean_exit(*server, SIGTERM);
}

TEST(ServerStatusE2eTest, OffloadOnIsResidentFromTheFirstRequest) {
  TempDir temp;
  const std::string dir = temp.file("snapshots");
  auto server =
      start_or_die({"--backend", "sim", "--cache-idle-seconds", "30", "--cache-expire-seconds",
                    "90", "--cache-ram-mib", "0", "--cache-disk-dir", dir});
  ASSERT_NE(server, nullptr);
  // The very first /v1/status request: the seed said "disabled" until the first save.
  const json body = get_json(*server, "/v1/status", 200);
  expect_status_shape(body);
  EXPECT_EQ(body["cache"]["state"], "resident");
  EXPECT_EQ(body["cache"]["idle_seconds"], 30);
  EXPECT_EQ(body["cache"]["expire_seconds"], 90);

  struct stat info {};
  ASSERT_EQ(::lstat(dir.c_str(), &info), 0) << "the server creates --cache-disk-dir";
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_THAT(server->stderr_text(), HasSubstr("created " + dir));
  expect_clean_exit(*server, SIGTERM);
}

// The snapshot store from start-up on: it removes what stopped servers left, holds its own
// owner lock while running, and leaves the directory empty of its files after a clean stop.
TEST(ServerStatusE2eTest, OwnsTheSnapshotDirectoryFromStartToStop) {
  TempDir temp;
  const std::string dir = temp.file("snapshots");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  // A stopped server's leftovers: its lock file (no one holds it), a snapshot and a
  // temporary. And a file that is not siesta's, which must never be touched.
  const std::string dead = "siesta-00000000000000000000000000000001";
  for (const std::string& name :
       {dead + ".lock", dead + "-main.snap", dead + "-main.snap.tmp-1", std::string("notes.txt")}) {
    ASSERT_EQ(::close(::creat((dir + "/" + name).c_str(), 0600)), 0) << name;
  }

  auto server = start_or_die({"--backend", "sim", "--cache-idle-seconds", "30", "--cache-ram-mib",
                              "0", "--cache-disk-dir", dir});
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->stderr_text(), HasSubstr("removed 3 files of stopped servers"));
  std::vector<std::string> running = list_names(dir);
  ASSERT_EQ(running.size(), 2u) << ::testing::PrintToString(running);
  EXPECT_EQ(running[0], "notes.txt");
  EXPECT_THAT(running[1], ::testing::MatchesRegex("siesta-[0-9a-f]{32}\\.lock"));
  EXPECT_EQ(get_json(*server, "/v1/status", 200)["cache"]["disk_bytes"], 0);

  expect_clean_exit(*server, SIGTERM);
  EXPECT_EQ(list_names(dir), std::vector<std::string>{"notes.txt"});
}

TEST(ServerStatusE2eTest, HealthAndErrors) {
  auto server = start_or_die({"--backend", "sim"});
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(get_json(*server, "/health", 200), json({{"status", "ok"}}));

  expect_api_error(get_json(*server, "/no/such/path", 404), "not_found");
  expect_api_error(get_json(*server, "/v1/statusx", 404), "not_found");

  auto client = server->client();
  for (const std::string path : {"/health", "/v1/status"}) {
    httplib::Result post = client->Post(path, "{}", "application/json");
    ASSERT_TRUE(post) << httplib::to_string(post.error());
    EXPECT_EQ(post->status, 405) << path;
    EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
    json body = json::parse(post->body, nullptr, false);
    expect_api_error(body, "method_not_allowed");

    httplib::Result del = client->Delete(path);
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 405) << path;

    httplib::Result head = client->Head(path);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200) << path;
    EXPECT_EQ(head->body, "");
  }
  httplib::Result post_unknown = client->Post("/nowhere", "", "text/plain");
  ASSERT_TRUE(post_unknown);
  EXPECT_EQ(post_unknown->status, 404);
  expect_clean_exit(*server, SIGTERM);
}

TEST(ServerStatusE2eTest, StatusDoesNotChangeOnRepeatedReads) {
  // Reading status is a pure read: many reads leave the cache as it was.
  TempDir temp;
  auto server = start_or_die({"--backend", "sim", "--cache-idle-seconds", "30", "--cache-ram-mib",
                              "0", "--cache-disk-dir", temp.file("d")});
  ASSERT_NE(server, nullptr);
  // Each conversation's seconds_idle grows with the clock, not with the reads.
  const auto cache_of = [](json status) {
    for (json& session : status["cache"]["sessions"]) session.erase("seconds_idle");
    return status["cache"];
  };
  const json first = get_json(*server, "/v1/status", 200);
  ASSERT_TRUE(first["cache"].contains("sessions")) << "many conversations by default";
  for (int i = 0; i < 20; ++i) {
    json again = get_json(*server, "/v1/status", 200);
    EXPECT_EQ(cache_of(again), cache_of(first));
    EXPECT_EQ(again["backend"]["committed_bytes"], first["backend"]["committed_bytes"]);
  }
  expect_clean_exit(*server, SIGTERM);
}

TEST(ServerStatusE2eTest, SigtermExitsZero) {
  auto server = start_or_die({"--backend", "sim"});
  ASSERT_NE(server, nullptr);
  expect_clean_exit(*server, SIGTERM);
}

TEST(ServerStatusE2eTest, SigintExitsZero) {
  auto server = start_or_die({"--backend", "sim"});
  ASSERT_NE(server, nullptr);
  expect_clean_exit(*server, SIGINT);
}

TEST(ServerStatusE2eTest, StopsWhileAKeepAliveConnectionIsOpen) {
  // A client holding its connection open must not keep the server from stopping.
  auto server = start_or_die({"--backend", "sim"});
  ASSERT_NE(server, nullptr);
  auto client = server->client();
  client->set_keep_alive(true);
  httplib::Result first = client->Get("/health");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  expect_clean_exit(*server, SIGTERM);
}

TEST(ServerStatusE2eTest, APortInUseFailsWithStatus1) {
  // Not a second listener sharing the port (cpp-httplib's SO_REUSEPORT default would allow
  // that, and clients would reach either server at random).
  auto server = start_or_die({"--backend", "sim"});
  ASSERT_NE(server, nullptr);
  Result<ProcessExit> second = ServerProcess::run_to_exit(
      {"--backend", "sim", "--host", "127.0.0.1", "--port", std::to_string(server->port())});
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->exit_code, 1) << second->describe();
  EXPECT_EQ(second->stdout_text, "");
  EXPECT_THAT(second->stderr_text,
              HasSubstr("siesta-server: cannot listen on " + server->base_url()));
  expect_clean_exit(*server, SIGTERM);
}

TEST(ServerStatusE2eTest, AutoBackendSaysWhatItChose) {
  auto server = start_or_die({"--backend", "auto"});
  ASSERT_NE(server, nullptr);
  const json body = get_json(*server, "/v1/status", 200);
  const std::string name = body["backend"]["name"];
  if (name == "sim") {
    EXPECT_THAT(server->stderr_text(), HasSubstr("using the simulator"));
  }
  EXPECT_THAT(server->stderr_text(), HasSubstr("backend " + name));
  expect_clean_exit(*server, SIGTERM);
}

}  // namespace
}  // namespace siesta::testing
