// Races between a command and the Offloader's own work.
//   - Deterministic: a command arrives at every step of a save (every file-system call the
//     save makes), and timers fire at every step of a restore; the FaultyFileSystem's call
//     hook is where the test steps in.
//   - Threaded (label concurrency, run under ThreadSanitizer): commands fired around the idle
//     deadline thousands of times against a real executor thread.
// Invariants everywhere: the command runs on memory that holds every byte (verify()), no
// history is lost while the snapshot was valid, and nothing touches released memory (on the
// simulator that would fault).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "core/offload/offloader.h"
#include "testing/hooked_backend.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/spin_until.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;
using test_util::OffloaderSetup;

// The file-system calls one save makes, by operation, counted on a clean run.
std::vector<std::pair<FsOp, uint64_t>> steps_of_one_save() {
  OffloaderFixture f;
  std::vector<std::pair<FsOp, uint64_t>> steps;
  EXPECT_TRUE(f.command(40).ok());
  f.fs_.set_call_hook([&](FsOp op, uint64_t call) { steps.emplace_back(op, call); });
  f.pass(OffloaderFixture::kIdle);
  f.fs_.set_call_hook({});
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  return steps;
}

// Blocks until the command either waits for the save or has been let in (a real condition,
// polled; the save thread is the one polling, so the command cannot get ahead of it). Fails the
// test if neither happens within the bound.
void wait_for_command(const Offloader& offloader, const std::atomic<bool>& admitted) {
  EXPECT_TRUE(siesta::testing::spin_until(
      [&] { return offloader.status().command_waiting || admitted.load(); },
      std::chrono::seconds(30)))
      << "the command neither waited for the save nor was let in";
}

// The steps after the save's last read of the session's memory -- the trailer (the last
// write), fdatasync, rename, directory fsync: a command waiting there would wait for the disk,
// not for one chunk.
bool after_last_read(FsOp op, uint64_t call, uint64_t last_write_call) {
  return op == FsOp::kSync || op == FsOp::kRename || op == FsOp::kSyncDirectory ||
         (op == FsOp::kWrite && call == last_write_call);
}

TEST(OffloaderRaceTest, ACommandArrivingAtEveryStepOfASaveRunsOnIntactMemory) {
  const auto steps = steps_of_one_save();
  ASSERT_GT(steps.size(), 10u) << "the save should take many file-system calls";
  size_t cancelled = 0, completed_then_restored = 0;
  uint64_t last_write_call = 0;
  for (const auto& [op, call] : steps) {
    if (op == FsOp::kWrite) last_write_call = std::max(last_write_call, call);
  }
  for (const auto& [step_op, step_call] : steps) {
    SCOPED_TRACE(std::string("command arrives at ") + std::string(fs_op_name(step_op)) + " call " +
                 std::to_string(step_call));
    OffloaderFixture f;
    ASSERT_TRUE(f.command(40).ok());
    std::thread command;
    Result<Admission> admitted = FailedPrecondition("not run");
    std::atomic<bool> let_in{false};
    bool let_in_during_step = false;
    f.fs_.set_call_hook([&, op = step_op, nth = step_call](FsOp o, uint64_t call) {
      if (o != op || call != nth || command.joinable()) return;
      command = std::thread([&] {
        Result<Offloader::Lease> lease = f.offloader_->acquire();
        admitted = lease.ok() ? Result<Admission>(lease->admission()) : lease.status();
        let_in = true;
        if (lease.ok()) f.target_->advance(1);
      });
      wait_for_command(*f.offloader_, let_in);
      let_in_during_step = let_in.load();
    });
    f.pass(OffloaderFixture::kIdle);  // the save runs here, on this thread
    command.join();
    f.fs_.set_call_hook({});
    ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
    EXPECT_TRUE(admitted->cancelled_save);
    EXPECT_FALSE(admitted->fallback.has_value());
    EXPECT_EQ(f.target_->length(), 41u);
    EXPECT_EQ(f.target_->verify(), "");
    const OffloadStatus status = f.offloader_->status();
    EXPECT_EQ(status.state, OffloadState::kResident);
    EXPECT_EQ(status.counters.cancelled_saves, 1u);
    EXPECT_EQ(status.counters.saves, 0u) << "memory was never released";
    EXPECT_FALSE(f.snapshot_exists()) << "a cancelled save leaves no file";
    // Before the last chunk, the command waits for the save to stop reading; after it, the
    // command runs at once while the save's file-system step is still in progress.
    EXPECT_EQ(let_in_during_step, after_last_read(step_op, step_call, last_write_call));
    EXPECT_EQ(f.fs_.counters().open_files, 0);
    ++cancelled;
    // And the session still offloads normally afterwards.
    f.pass(OffloaderFixture::kIdle);
    EXPECT_EQ(f.state(), OffloadState::kDisk);
    completed_then_restored += f.command(1).ok() ? 1 : 0;
    EXPECT_EQ(f.target_->verify(), "");
  }
  std::printf("commands injected at %zu save steps: %zu cancelled, %zu later restored\n",
              steps.size(), cancelled, completed_then_restored);
}

TEST(OffloaderRaceTest, TimersDuringARestoreNeitherSaveNorExpire) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(30).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  std::vector<OffloadState> seen;
  std::vector<Status> offload_now_answers;
  std::mutex hook_mutex;  // chunk records are read on the reader's worker threads
  f.fs_.set_call_hook([&](FsOp op, uint64_t call) {
    if (op != FsOp::kRead) return;
    std::lock_guard lock(hook_mutex);
    // Past the idle deadline again (not past the file's expiry, which the reader checks), an
    // operator's offload request, and every due timer run, at every read of the restore.
    if (call == 1) f.clock_.advance(std::chrono::seconds(2 * OffloaderFixture::kIdle));
    offload_now_answers.push_back(f.offloader_->offload_now());
    f.executor_.run_due();
    seen.push_back(f.offloader_->status().state);
  });
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  f.fs_.set_call_hook({});
  ASSERT_FALSE(seen.empty());
  for (OffloadState s : seen) EXPECT_EQ(s, OffloadState::kRestoring);
  for (const Status& s : offload_now_answers) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << "a command is running";
  }
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
  EXPECT_EQ(f.offloader_->status().counters.saves, 1u);
}

// Asks status() on a thread of its own and waits for the answer at most `bound` (a bound on a
// condition, not a sleep: a status() that waits for the caller would never answer). The
// thread is joined by the destructor, once whatever blocked it has let go.
class StatusProbe {
 public:
  explicit StatusProbe(const Offloader& offloader) {
    std::future<OffloadStatus> answer = promise_.get_future();
    thread_ = std::thread([this, &offloader] { promise_.set_value(offloader.status()); });
    if (answer.wait_for(std::chrono::seconds(10)) == std::future_status::ready) {
      status_ = answer.get();
    }
  }
  ~StatusProbe() { thread_.join(); }
  StatusProbe(const StatusProbe&) = delete;
  StatusProbe& operator=(const StatusProbe&) = delete;

  // The answer, or nullopt when status() did not answer within the bound.
  const std::optional<OffloadStatus>& status() const { return status_; }

 private:
  std::promise<OffloadStatus> promise_;
  std::thread thread_;
  std::optional<OffloadStatus> status_;
};

// Label concurrency: status() is asked, on another thread, while the save releases the memory
// (a decommit is in progress on the save's thread). It must answer at once: the release runs
// without the Offloader's mutex.
TEST(OffloaderConcurrencyTest, StatusAnswersWhileTheMemoryIsReleased) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  std::vector<std::unique_ptr<StatusProbe>> probes;
  f.hooked_backend_->set_decommit_hooks(
      [&](DeviceRange) { probes.push_back(std::make_unique<StatusProbe>(*f.offloader_)); }, {});
  f.pass(OffloaderFixture::kIdle);  // the save and its release run here, on this thread
  f.hooked_backend_->set_decommit_hooks({}, {});
  ASSERT_FALSE(probes.empty()) << "the save released nothing";
  for (const auto& probe : probes) {
    ASSERT_TRUE(probe->status().has_value()) << "status() waited for the release";
    EXPECT_EQ(probe->status()->state, OffloadState::kSaving) << "mid-release is still saving";
  }
  EXPECT_EQ(f.state(), OffloadState::kDisk);
}

// Label concurrency: status() asked while the log callback runs answers at once (the line is
// written after the mutex is released).
TEST(OffloaderConcurrencyTest, StatusAnswersWhileALogLineIsWritten) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  std::vector<std::unique_ptr<StatusProbe>> probes;
  f.log_hook_ = [&](const std::string&) {
    probes.push_back(std::make_unique<StatusProbe>(*f.offloader_));
  };
  f.pass(OffloaderFixture::kIdle);  // "offload: saved ..."
  ASSERT_TRUE(f.command(1).ok());   // "offload: restored ..."
  f.log_hook_ = {};
  ASSERT_GE(probes.size(), 2u);
  for (const auto& probe : probes) {
    EXPECT_TRUE(probe->status().has_value()) << "status() waited for the log callback";
  }
}

// Label concurrency: a command that arrives while the memory is being released waits for the
// release to end (never running on half-released memory), then restores every byte.
TEST(OffloaderConcurrencyTest, ACommandArrivingDuringTheReleaseWaitsThenRestores) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(30).ok());
  std::thread command;
  Result<Admission> admitted = FailedPrecondition("not run");
  std::string bytes_seen = "not run";
  bool saw_it_wait = false;
  std::vector<std::unique_ptr<StatusProbe>> probes;  // joined last, after the release
  f.hooked_backend_->set_decommit_hooks(
      [&](DeviceRange) {
        if (command.joinable()) return;
        command = std::thread([&] {
          Result<Offloader::Lease> lease = f.offloader_->acquire();
          admitted = lease.ok() ? Result<Admission>(lease->admission()) : lease.status();
          bytes_seen = f.target_->verify();
        });
        // Bounded: the command must be seen waiting for the release to end. Each look is a
        // probe, so that a status() stuck behind the release ends the loop instead of the test.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!saw_it_wait && std::chrono::steady_clock::now() < deadline) {
          probes.push_back(std::make_unique<StatusProbe>(*f.offloader_));
          if (!probes.back()->status()) break;
          saw_it_wait = probes.back()->status()->command_waiting;
        }
      },
      {});
  f.pass(OffloaderFixture::kIdle);  // the save; the release lets the command go on its end
  ASSERT_TRUE(command.joinable());
  command.join();
  f.hooked_backend_->set_decommit_hooks({}, {});
  EXPECT_TRUE(saw_it_wait) << "the command did not wait for the release";
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->restored) << "the release completed, so the command restored";
  EXPECT_FALSE(admitted->cancelled_save);
  EXPECT_EQ(bytes_seen, "");
  EXPECT_EQ(f.target_->length(), 30u);
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.saves, 1u);
  EXPECT_EQ(status.counters.restore_hits, 1u);
  EXPECT_EQ(status.state, OffloadState::kResident);
}

// Label concurrency: commands race the idle deadline on a real executor thread.
TEST(OffloaderConcurrencyTest, CommandsAroundTheIdleDeadlineNeverHangCrashOrLoseBytes) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 draws(seed);
  OffloaderSetup setup;
  setup.positions = 64;
  setup.chunk_bytes = 4096;
  ManualClock clock;
  ThreadExecutor executor(clock);
  OffloaderFixture f(setup);
  OffloaderOptions options;
  options.config.idle_seconds = OffloaderFixture::kIdle;
  options.config.expire_seconds = OffloaderFixture::kExpire;
  options.chunk_bytes = setup.chunk_bytes;
  options.log = [](const std::string&) {};
  f.offloader_.reset();
  f.offloader_ = Offloader::create({*f.target_, *f.faulty_backend_, f.host_, f.fs_, clock,
                                    &executor, f.store_.get(), f.key_.get()},
                                   options)
                     .value();
  const int kRounds = 1000;
  uint32_t expected_length = 0;
  for (int round = 0; round < kRounds; ++round) {
    clock.advance(std::chrono::seconds(OffloaderFixture::kIdle));
    executor.post([] {});  // wake the executor: the idle deadline has passed
    // Arrive somewhere around the save: before it starts, during it, or after it released,
    // after a random 0-5 ms of busy waiting. Bounded by the clock, not by a count of yields:
    // on a loaded machine (ctest -j2 under ASan) each yield hands the core away for a whole
    // time slice, and 20,000 of them made one round take seconds (the test ran past its 300 s).
    const auto arrive_at =
        std::chrono::steady_clock::now() + std::chrono::microseconds(draws() % 5000);
    while (std::chrono::steady_clock::now() < arrive_at) {
    }
    Result<Offloader::Lease> admitted = f.offloader_->acquire();
    ASSERT_TRUE(admitted.ok()) << "round " << round << ": " << admitted.status().to_string();
    ASSERT_FALSE(admitted->admission().fallback.has_value()) << "round " << round;
    ASSERT_EQ(f.target_->length(), expected_length) << "round " << round;
    f.target_->advance(1);
    expected_length =
        (expected_length + 1 < setup.positions) ? expected_length + 1 : setup.positions;
    ASSERT_EQ(f.target_->verify(), "") << "round " << round;
    admitted->release();
    if (f.target_->length() == setup.positions) {
      Result<Offloader::Lease> again = f.offloader_->acquire();
      ASSERT_TRUE(again.ok());
      ASSERT_TRUE(f.target_->discard_history().ok());
      expected_length = 0;
    }
  }
  const OffloadStatus status = f.offloader_->status();
  std::printf("%d rounds: %llu saves, %llu cancelled, %llu restores\n", kRounds,
              static_cast<unsigned long long>(status.counters.saves),
              static_cast<unsigned long long>(status.counters.cancelled_saves),
              static_cast<unsigned long long>(status.counters.restores));
  EXPECT_EQ(status.counters.restores, status.counters.restore_hits);
  EXPECT_EQ(status.counters.write_failures, 0u);
  f.offloader_.reset();  // before the executor it posts to
}

}  // namespace
}  // namespace siesta
