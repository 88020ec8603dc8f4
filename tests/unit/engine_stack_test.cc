// The runtime's EngineStack: what it opens for each choice of options (the simulator as asked,
// the storage and an executor only with offload on, a lent executor and file system used
// instead of its own), the clean-up it logs, the part it names when opening fails, and what
// closing it leaves (no snapshot of this process).
#include "runtime/engine_stack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/executor.h"
#include "core/base/posix_file_system.h"
#include "engine/model_config.h"
#include "testing/faulty_file_system.h"
#include "tests/support/engine_test_device.h"
#include "tests/support/temp_dir.h"

namespace siesta::runtime {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StartsWith;

EngineStackOptions tiny_stack() {
  EngineStackOptions options;
  options.device = siesta::testing::engine_test_device();
  options.model = engine::model_config_from_spec("synthetic:tiny").value();
  options.log = [](const std::string&) {};
  return options;
}

// Idle offload on after 60 s (of the test's clock), snapshots in `dir`.
void offload_to(const std::string& dir, EngineStackOptions& options) {
  options.offload.config.idle_seconds = 60;
  options.offload.config.expire_seconds = 600;
  options.offload.config.disk_dir = dir;
}

Result<engine::GenerateResult> generate(EngineStack& stack, const std::string& prompt) {
  engine::GenerateRequest request;
  request.prompt = prompt;
  request.max_tokens = 4;
  return stack.engine().generate(std::move(request)).get();
}

TEST(EngineStackTest, OffloadOffOpensTheSimulatorAsAskedAndNoStorage) {
  ManualClock clock;
  Result<std::unique_ptr<EngineStack>> opened = EngineStack::open(tiny_stack(), clock);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EngineStack& stack = **opened;
  ASSERT_NE(stack.simulator(), nullptr);
  EXPECT_EQ(&stack.backend(), static_cast<MemoryBackend*>(stack.simulator()));
  EXPECT_EQ(stack.backend().stats().device_total_bytes, 256ull << 20);
  EXPECT_EQ(stack.backend().granularity(), 64u << 10);
  EXPECT_EQ(stack.store(), nullptr);
  EXPECT_EQ(stack.key(), nullptr);
  EXPECT_EQ(stack.executor(), nullptr);
  EXPECT_EQ(&stack.clock(), &clock);
  EXPECT_EQ(stack.engine().cache_status().state, OffloadState::kDisabled);
  EXPECT_TRUE(stack.wait_offload_idle(std::chrono::milliseconds(0))) << "nothing runs behind";
  EXPECT_TRUE(generate(stack, "hello").ok());
}

TEST(EngineStackTest, OffloadOnOpensTheStoreNamedByTheKeyAndAnExecutorOfItsOwn) {
  siesta::testing::TempDir dir;
  EngineStackOptions options = tiny_stack();
  options.offload.config.idle_seconds = 600;  // only offload_now() saves
  options.offload.config.expire_seconds = 3600;
  options.offload.config.disk_dir = dir.file("cache");
  options.offload.config.encrypt = false;
  Result<std::unique_ptr<EngineStack>> opened =
      EngineStack::open(std::move(options), SystemClock::instance());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  std::unique_ptr<EngineStack> stack = std::move(opened).value();
  ASSERT_NE(stack->store(), nullptr);
  ASSERT_NE(stack->key(), nullptr);
  ASSERT_NE(stack->executor(), nullptr);
  EXPECT_EQ(stack->store()->directory(), dir.file("cache"));
  EXPECT_EQ(stack->store()->nonce(), SnapshotStore::nonce_hex(stack->key()->nonce()));
  const OffloadStatus resident = stack->engine().cache_status();
  EXPECT_EQ(resident.state, OffloadState::kResident);
  EXPECT_EQ(resident.idle_seconds, 600);
  EXPECT_EQ(resident.expire_seconds, 3600);

  ASSERT_TRUE(generate(*stack, "abc").ok());
  ASSERT_TRUE(stack->engine().offload_now().ok());
  ASSERT_TRUE(stack->wait_offload_idle(std::chrono::seconds(30)));
  EXPECT_EQ(stack->engine().cache_status().state, OffloadState::kDisk);
  const std::string snapshot = stack->store()->snapshot_path("0").value();
  EXPECT_TRUE(std::filesystem::exists(snapshot));

  stack.reset();
  EXPECT_FALSE(std::filesystem::exists(snapshot)) << "closing removes this process's snapshot";
}

TEST(EngineStackTest, ALentExecutorAndFileSystemAreTheOnesUsed) {
  siesta::testing::TempDir dir;
  ManualClock clock;
  ManualExecutor executor(clock);
  PosixFileSystem posix;
  FaultyFileSystem fs(posix);
  EngineStackOptions options = tiny_stack();
  offload_to(dir.path(), options);
  options.executor = &executor;
  options.fs = &fs;
  Result<std::unique_ptr<EngineStack>> opened = EngineStack::open(std::move(options), clock);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EngineStack& stack = **opened;
  EXPECT_EQ(stack.executor(), &executor);
  EXPECT_EQ(&stack.fs(), &fs);
  EXPECT_EQ(fs.counters().held_locks, 1) << "the store's owner lock, taken through the lent fs";

  ASSERT_TRUE(generate(stack, "abc").ok());
  EXPECT_FALSE(stack.wait_offload_idle(std::chrono::milliseconds(0)))
      << "a lent executor runs when its owner says";
  const uint64_t writes = fs.counters().of(FsOp::kWrite);
  clock.advance(std::chrono::seconds(60));
  executor.run_due();
  EXPECT_EQ(stack.engine().cache_status().state, OffloadState::kDisk);
  EXPECT_GT(fs.counters().of(FsOp::kWrite), writes) << "the save wrote through the lent fs";
}

TEST(EngineStackTest, LogsTheSnapshotDirectoryCleanUp) {
  siesta::testing::TempDir dir;
  // A snapshot of a process that is gone (no lock held): removed with the lock file that
  // checking for its owner made.
  std::ofstream(dir.file("siesta-0123456789abcdef0123456789abcdef-0.snap")) << "orphan";
  std::vector<std::string> lines;
  EngineStackOptions options = tiny_stack();
  offload_to(dir.path(), options);
  options.log = [&lines](const std::string& line) { lines.push_back(line); };
  ManualClock clock;
  ManualExecutor executor(clock);
  options.executor = &executor;
  Result<std::unique_ptr<EngineStack>> opened = EngineStack::open(std::move(options), clock);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_THAT(lines, Contains("snapshot directory clean-up: removed 2 files of stopped servers, "
                              "0 expired; 0 could not be removed"));
}

TEST(EngineStackTest, AFailureNamesThePartThatCouldNotOpen) {
  siesta::testing::TempDir dir;
  ManualClock clock;
  ManualExecutor executor(clock);
  {
    EngineStackOptions options = tiny_stack();
    options.device.sim.granularity = 12u << 10;  // not a power of two
    StackPart failed = StackPart::kEngine;
    Result<std::unique_ptr<EngineStack>> opened =
        EngineStack::open(std::move(options), clock, &failed);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(failed, StackPart::kDevice);
    EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(opened.status().message(), StartsWith("opening the simulator backend"));
  }
  {
    std::ofstream(dir.file("not-a-directory")) << "x";
    EngineStackOptions options = tiny_stack();
    offload_to(dir.file("not-a-directory"), options);
    options.executor = &executor;
    StackPart failed = StackPart::kEngine;
    Result<std::unique_ptr<EngineStack>> opened =
        EngineStack::open(std::move(options), clock, &failed);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(failed, StackPart::kStorage);
    EXPECT_THAT(opened.status().message(), HasSubstr("not-a-directory"));
  }
  {
    EngineStackOptions options = tiny_stack();
    options.device = siesta::testing::engine_test_device(/*capacity_bytes=*/64u << 10);
    StackPart failed = StackPart::kDevice;
    Result<std::unique_ptr<EngineStack>> opened =
        EngineStack::open(std::move(options), clock, &failed);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(failed, StackPart::kEngine);
    EXPECT_EQ(opened.status().code(), StatusCode::kOutOfMemory) << opened.status().to_string();
    EXPECT_THAT(opened.status().message(), StartsWith("starting the engine: "));
  }
}

}  // namespace
}  // namespace siesta::runtime
