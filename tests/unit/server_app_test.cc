// ServerApp over the simulator: it opens the engine the config names, reports it in its
// status without waking the session, offloads on request, hands out cancel flags that
// cancel_all() raises, and closes cleanly (this process's snapshot removed).
#include "server/server_app.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "server/cache_dir.h"
#include "tests/support/temp_dir.h"

namespace siesta::server {
namespace {

using ::siesta::testing::TempDir;
using ::testing::HasSubstr;

ServerConfig sim_config() {
  ServerConfig config;
  config.backend = runtime::BackendKind::kSim;
  config.model = "synthetic:tiny";
  return config;
}

std::unique_ptr<ServerApp> start_or_fail(ServerConfig config, const Clock& clock,
                                         std::vector<std::string>* log = nullptr) {
  auto mutex = std::make_shared<std::mutex>();
  Result<std::unique_ptr<ServerApp>> app =
      ServerApp::start(std::move(config), clock, [log, mutex](const std::string& line) {
        std::lock_guard lock(*mutex);
        if (log != nullptr) log->push_back(line);
      });
  EXPECT_TRUE(app.ok()) << app.status().to_string();
  return app.ok() ? std::move(app).value() : nullptr;
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    n += entry.path().extension() == ".snap";
  }
  return n;
}

TEST(ServerAppTest, StatusNamesTheModelAndEngine) {
  ManualClock clock;
  ServerConfig config = sim_config();
  config.context = 128;
  config.kv_type = KvType::kInt8;
  auto app = start_or_fail(config, clock);
  ASSERT_NE(app, nullptr);
  StatusSnapshot status = app->status();
  EXPECT_EQ(status.backend_name, "sim");
  EXPECT_EQ(status.kernels_name, "host");
  EXPECT_EQ(status.model.name, "synthetic:tiny");
  EXPECT_EQ(status.model.context, 128u);
  EXPECT_EQ(status.model.kv_type, KvType::kInt8);
  EXPECT_EQ(status.model.layers, 2u);
  EXPECT_EQ(status.model.dim, 64u);
  EXPECT_GT(status.memory.committed_bytes, 0u);
  EXPECT_EQ(status.cache.state, OffloadState::kDisabled);
  EXPECT_EQ(status.cache.expire_seconds, 3600) << "the configured expiry, offload off too";
  EXPECT_FALSE(status.engine.busy);
  EXPECT_EQ(status.engine.commands_run, 0u);

  engine::GenerateRequest request;
  request.prompt = "hello";
  request.max_tokens = 3;
  Result<engine::GenerateResult> result = app->engine().generate(request).get();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  status = app->status();
  EXPECT_EQ(status.engine.commands_run, 1u);
  EXPECT_EQ(status.engine.history_tokens, 7u);  // prompt + generated but the last
  EXPECT_THAT(app->metrics_text(), HasSubstr("siesta_engine_commands_total 1\n"));
}

// With offload off the engine still has its Offloader, which reports the configured times:
// the server adds nothing of its own to the status.
TEST(ServerAppTest, OffloadOffReportsTheConfiguredTimesFromTheOffloader) {
  ManualClock clock;
  ServerConfig config = sim_config();
  config.offload.expire_seconds = 90;
  auto app = start_or_fail(config, clock);
  ASSERT_NE(app, nullptr);
  const OffloadStatus cache = app->engine().cache_status();
  EXPECT_EQ(cache.state, OffloadState::kDisabled);
  EXPECT_EQ(cache.idle_seconds, 0);
  EXPECT_EQ(cache.expire_seconds, 90);
  EXPECT_EQ(app->status().cache.expire_seconds, 90);
  EXPECT_EQ(app->engine().offload_now().code(), StatusCode::kFailedPrecondition);
}

// A lost session is the server's to handle, not core's: one line, exit status 70.
TEST(ServerAppDeathTest, ALostSessionEndsTheServerWithTheDocumentedStatus) {
  EXPECT_EXIT(exit_on_session_memory_lost(DeviceError("injected commit failure")),
              ::testing::ExitedWithCode(kSessionMemoryLostExitCode),
              "siesta: fatal: the session's memory could not be mapped back at its addresses "
              "\\(device_error: injected commit failure\\); exiting with status 70");
  EXPECT_EQ(kSessionMemoryLostExitCode, 70);
}

TEST(ServerAppTest, UnknownModelFailsToStart) {
  ManualClock clock;
  ServerConfig config = sim_config();
  config.model = "synthetic:huge";
  Result<std::unique_ptr<ServerApp>> app = ServerApp::start(config, clock, nullptr);
  ASSERT_FALSE(app.ok());
  EXPECT_THAT(app.status().message(), HasSubstr("synthetic:huge"));
}

TEST(ServerAppTest, CudaWithoutAGpuFailsWithAReason) {
  if (getenv("SIESTA_EXPECT_GPU") != nullptr) GTEST_SKIP() << "a GPU is expected here";
  ManualClock clock;
  ServerConfig config = sim_config();
  config.backend = runtime::BackendKind::kCuda;
  Result<std::unique_ptr<ServerApp>> app = ServerApp::start(config, clock, nullptr);
  if (app.ok()) GTEST_SKIP() << "this machine has a usable GPU";
  EXPECT_THAT(app.status().message(), HasSubstr("--backend cuda"));
}

TEST(ServerAppTest, OffloadNowReleasesAndCloseRemovesTheSnapshot) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  ASSERT_TRUE(prepare_cache_dir(dir, nullptr).ok());
  ServerConfig config = sim_config();
  config.offload.idle_seconds = 600;  // the timer never fires in this test
  config.offload.expire_seconds = 3600;
  config.offload.disk_dir = dir;
  config.offload.encrypt = false;
  config.offload.ram_bytes = 0;  // the disk tier's files are what this test follows
  std::vector<std::string> log;
  auto app = start_or_fail(config, SystemClock::instance(), &log);
  ASSERT_NE(app, nullptr);
  EXPECT_EQ(app->status().cache.state, OffloadState::kResident);

  engine::GenerateRequest request;
  request.prompt = "abc";
  request.max_tokens = 2;
  ASSERT_TRUE(app->engine().generate(request).get().ok());
  ASSERT_TRUE(app->engine().offload_now().ok());
  // offload_now() posted the save; it has run once the executor is idle.
  ASSERT_TRUE(app->stack().wait_offload_idle(std::chrono::seconds(20)));
  const StatusSnapshot status = app->status();
  ASSERT_EQ(status.cache.state, OffloadState::kDisk);
  EXPECT_EQ(status.cache.counters.saves, 1u);
  EXPECT_GT(status.cache.disk_bytes, 0u);
  EXPECT_GT(status.cache.released_vram_bytes, 0u);
  EXPECT_EQ(files_in(dir), 1u);
  // Reading the status did not wake it.
  EXPECT_EQ(app->status().cache.state, OffloadState::kDisk);
  EXPECT_THAT(app->metrics_text(), HasSubstr("siesta_cache_state{state=\"disk\"} 1\n"));

  app.reset();
  EXPECT_EQ(files_in(dir), 0u) << "a normal close removes this process's snapshot";
}

TEST(ServerAppTest, CancelAllRaisesHeldAndLaterTokens) {
  ManualClock clock;
  auto app = start_or_fail(sim_config(), clock);
  ASSERT_NE(app, nullptr);
  auto first = app->new_request_token();
  auto second = app->new_request_token();
  { auto dropped = app->new_request_token(); }
  EXPECT_FALSE(first->load());
  app->cancel_all();
  EXPECT_TRUE(first->load());
  EXPECT_TRUE(second->load());
  EXPECT_TRUE(app->new_request_token()->load()) << "a stopping server starts nothing new";
}

TEST(ServerAppTest, CancelledTokenEndsAGeneration) {
  ManualClock clock;
  auto app = start_or_fail(sim_config(), clock);
  ASSERT_NE(app, nullptr);
  auto token = app->new_request_token();
  engine::GenerateRequest request;
  request.prompt = "a long enough prompt";
  request.max_tokens = 100;
  request.cancel = token;
  request.on_text = [&app](std::string_view) { app->cancel_all(); };
  Result<engine::GenerateResult> result = app->engine().generate(request).get();
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->finish, engine::FinishReason::kCancelled);
  EXPECT_LT(result->completion_tokens, 100u);
}

}  // namespace
}  // namespace siesta::server
