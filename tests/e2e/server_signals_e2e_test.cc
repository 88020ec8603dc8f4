// siesta-server's stop signals on the real binary: SIGTERM during a long prefill stops it
// within a step instead of after the whole prompt, and SIGHUP (a closed terminal, a
// supervisor) is the same clean stop as SIGTERM: exit 0, this process's snapshot and the
// directory's lock removed.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/raw_http.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

TEST(ServerSignalsE2eTest, SigtermDuringALongPrefillStopsWithinAStep) {
  // synthetic:large saves a checkpoint every 1024 tokens, so a prompt shorter than that is
  // queued on the device whole unless the engine paces its prefill, and a block of 64 of its
  // tokens takes seconds on the host kernels of a 2-core machine (more under ASan) unless the
  // pacer keeps blocks short; its 900 tokens take tens of seconds.
  Result<std::unique_ptr<ServerProcess>> server = ServerProcess::start(
      {"--backend", "sim", "--model", "synthetic:large", "--ctx", "2048"}, milliseconds(60000));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  Result<RawConnection> client = RawConnection::connect((*server)->port());
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  const std::string body = json({{"prompt", std::string(900, 'p')}, {"max_tokens", 4}}).dump();
  ASSERT_TRUE(client->send_all(http_request_text("POST", "/v1/completions", body)).ok());
  Result<json> busy = (*server)->wait_for_status(
      [](const json& status) { return status["engine"]["busy"] == true; }, "the prefill running");
  ASSERT_TRUE(busy.ok()) << busy.status().to_string();

  // Well under the prefill's length, even under a sanitizer.
  Result<ProcessExit> exit = (*server)->stop(SIGTERM, milliseconds(10000));
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\n" << exit->stderr_text;
  EXPECT_THAT(exit->stderr_text, HasSubstr("stopped on SIGTERM"));
  // The client was told, not dropped.
  Result<std::string> answer = client->read_to_end(milliseconds(5000));
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  EXPECT_THAT(*answer, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(*answer, HasSubstr("\"cancelled\""));
}

TEST(ServerSignalsE2eTest, SighupIsACleanStop) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  Result<std::unique_ptr<ServerProcess>> server = ServerProcess::start(
      {"--backend", "sim", "--model", "synthetic:tiny", "--cache-idle-seconds", "600",
       "--cache-expire-seconds", "1200", "--cache-ram-mib", "0", "--cache-disk-dir", dir});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  httplib::Result answer =
      (*server)->post_json("/v1/completions", {{"prompt", "Keep this"}, {"max_tokens", 4}});
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  ASSERT_EQ(answer->status, 200) << answer->body;
  httplib::Result offload = (*server)->post("/v1/cache/offload", "");
  ASSERT_TRUE(offload) << httplib::to_string(offload.error());
  ASSERT_EQ(offload->status, 200) << offload->body;
  ASSERT_TRUE((*server)->wait_for_cache_state("disk").ok());
  ASSERT_GE(list_dir(dir).size(), 2u) << "a snapshot and the lock";

  Result<ProcessExit> exit = (*server)->stop(SIGHUP);
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\n" << exit->stderr_text;
  EXPECT_THAT(exit->stderr_text, HasSubstr("stopped on SIGHUP"));
  EXPECT_THAT(list_dir(dir), IsEmpty()) << "no snapshot, temporary or lock file is left";
}

}  // namespace
}  // namespace siesta::testing
