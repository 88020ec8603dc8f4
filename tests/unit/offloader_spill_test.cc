// The RAM tier's spill (core/offload/offloader_spill.cc): when a save needs room in the tier,
// the least recently used sessions' copies are written to disk first (sealed and synced as a
// save), so the newcomer goes to RAM; a spill that fails keeps its copy in RAM and sends the
// newcomer to disk; a command for the session being spilled stops the spill and restores from
// RAM. Whatever happens, each session is restorable from exactly one place and every byte comes
// back. Sessions are the fixture's ("0") and neighbours on the same tier, store and executor
// (tests/support/offloader_fixture.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/offload/offloader.h"
#include "core/offload/ram_snapshot.h"
#include "core/offload/ram_tier.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/ram_tier_scene.h"
#include "tests/support/spin_until.h"

namespace siesta {
namespace {

using test_util::expect_one_place;
using test_util::file_of;
using test_util::NeighbourSession;
using test_util::OffloaderFixture;
using test_util::OffloaderSetup;
using test_util::tier_for;

constexpr uint32_t kLength = test_util::kSceneLength;

// The scene most tests start from, on a tier with room for one copy: the fixture's session
// "0" offloaded into the tier, then the neighbour `b` used for `b_length` positions, so that
// b's save needs the room next. False when any step failed.
bool one_copy_in_ram_and_a_newcomer(OffloaderFixture& f, NeighbourSession& b,
                                    uint32_t b_length = kLength) {
  return f.command(kLength).ok() && f.offloader_->evict().ok() && f.state() == OffloadState::kRam &&
         b.command(b_length).ok();
}

TEST(OffloaderSpillTest, TheNewcomerTakesTheRoomAndTheOldCopyGoesToDisk) {
  OffloaderFixture f(tier_for(1));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(one_copy_in_ram_and_a_newcomer(f, b));

  ASSERT_TRUE(b.offloader->evict().ok());  // needs the tier's only room
  EXPECT_EQ(b.offloader->status().state, OffloadState::kRam);
  EXPECT_EQ(f.state(), OffloadState::kDisk) << "the older copy was spilled";
  expect_one_place(f, *f.offloader_, "0");
  expect_one_place(f, *b.offloader, "1");
  EXPECT_EQ(f.offloader_->status().counters.ram_spills, 1u);
  EXPECT_EQ(b.offloader->status().counters.ram_full, 0u);
  const RamTierStats tier = f.ram_tier_->stats();
  EXPECT_EQ(tier.spills, 1u);
  EXPECT_EQ(tier.spill_failures, 0u);
  EXPECT_EQ(tier.used_bytes, b.offloader->status().ram_bytes);

  // Both come back whole: the spilled one from its file, the newcomer from RAM.
  Result<Admission> a_back = f.command(1);
  ASSERT_TRUE(a_back.ok()) << a_back.status().to_string();
  EXPECT_TRUE(a_back->restored);
  EXPECT_EQ(f.target_->length(), kLength + 1);
  EXPECT_EQ(f.target_->verify(), "");
  EXPECT_EQ(f.offloader_->status().counters.ram_restores, 0u) << "read from disk";
  Result<Admission> b_back = b.command(1);
  ASSERT_TRUE(b_back.ok()) << b_back.status().to_string();
  EXPECT_TRUE(b_back->restored);
  EXPECT_EQ(b.target->verify(), "");
  EXPECT_EQ(b.offloader->status().counters.ram_restores, 1u);
  EXPECT_EQ(f.ram_tier_->stats().used_bytes, 0u);
}

TEST(OffloaderSpillTest, TheLeastRecentlyUsedCopyIsTheOneSpilled) {
  OffloaderFixture f(tier_for(2));
  NeighbourSession b(f, "1", /*seed=*/7);
  NeighbourSession c(f, "2", /*seed=*/9);
  // Used in the order b, a, c (a second apart); b and a go to RAM in the opposite order.
  ASSERT_TRUE(b.command(kLength).ok());
  f.pass(1);
  ASSERT_TRUE(f.command(kLength).ok());
  f.pass(1);
  ASSERT_TRUE(c.command(kLength).ok());
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_TRUE(b.offloader->evict().ok());
  ASSERT_EQ(f.state(), OffloadState::kRam);
  ASSERT_EQ(b.offloader->status().state, OffloadState::kRam);

  ASSERT_TRUE(c.offloader->evict().ok());
  EXPECT_EQ(b.offloader->status().state, OffloadState::kDisk) << "b was used least recently";
  EXPECT_EQ(f.state(), OffloadState::kRam);
  EXPECT_EQ(c.offloader->status().state, OffloadState::kRam);
  for (auto [offloader, name] :
       {std::pair{f.offloader_.get(), "0"}, {b.offloader.get(), "1"}, {c.offloader.get(), "2"}}) {
    expect_one_place(f, *offloader, name);
  }
}

TEST(OffloaderSpillTest, ASpillThatFailsKeepsTheCopyInRamAndTheNewcomerGoesToDisk) {
  OffloaderFixture f(tier_for(1));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(one_copy_in_ram_and_a_newcomer(f, b));
  // Injected: every file write fails from now on, the spill's and then the newcomer's own.
  const FsFaultPlan plan(FsOp::kWrite, 1, FsFaultKind::kIoError, /*sticky=*/true);
  std::printf("fault: %s (the spill's write, then the newcomer's)\n", plan.describe().c_str());
  f.fs_.set_plan(plan);
  EXPECT_FALSE(b.offloader->evict().ok());
  EXPECT_EQ(f.state(), OffloadState::kRam) << "the copy stays where it was";
  expect_one_place(f, *f.offloader_, "0");
  EXPECT_FALSE(file_of(f, "0")) << "no half-written spill is left";
  EXPECT_EQ(b.offloader->status().state, OffloadState::kResident) << "its memory is kept";
  const RamTierStats tier = f.ram_tier_->stats();
  EXPECT_EQ(tier.spills, 0u);
  EXPECT_EQ(tier.spill_failures, 1u);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 1u);

  f.fs_.set_plan(FsFaultPlan::none());
  Result<Admission> a_back = f.command(1);
  ASSERT_TRUE(a_back.ok());
  EXPECT_TRUE(a_back->restored);
  EXPECT_EQ(f.target_->verify(), "");
  EXPECT_EQ(b.target->verify(), "");
  // With the disk back, the next eviction spills normally.
  ASSERT_TRUE(f.offloader_->evict().ok());
  ASSERT_TRUE(b.offloader->evict().ok());
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_EQ(b.offloader->status().state, OffloadState::kRam);
}

TEST(OffloaderSpillTest, ASessionLargerThanTheWholeTierSpillsNobody) {
  OffloaderFixture f(tier_for(1));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(one_copy_in_ram_and_a_newcomer(f, b, 2 * kLength));  // twice the tier's budget
  ASSERT_TRUE(b.offloader->evict().ok());
  EXPECT_EQ(b.offloader->status().state, OffloadState::kDisk);
  EXPECT_EQ(b.offloader->status().counters.ram_full, 1u);
  EXPECT_EQ(f.state(), OffloadState::kRam) << "spilling it would not have made room";
  EXPECT_EQ(f.ram_tier_->stats().spills, 0u);
}

// Where the every-step test starts: session "0" holds a copy in RAM that the neighbour's save
// needs the room of, on a tier made by `setup`. `segments`: the copy's (a whole snapshot, or
// one with a delta beside it: its spill writes two files).
struct SpillScene {
  OffloaderSetup (*setup)() = nullptr;
  bool (*build)(OffloaderFixture& f, NeighbourSession& b) = nullptr;
  uint32_t segments = 1;
};

const SpillScene kWholeCopy{
    [] { return tier_for(1); },
    [](OffloaderFixture& f, NeighbourSession& b) { return one_copy_in_ram_and_a_newcomer(f, b); }};

// Room for two copies: "0" goes to RAM, comes back (its copy kept as a base) and leaves again
// with a delta; the newcomer, twice as long, fits only once that copy is spilled.
const SpillScene kCopyWithADelta{
    [] { return tier_for(2, kDefaultDeltaSegments); },
    [](OffloaderFixture& f, NeighbourSession& b) {
      return f.command(kLength - 4).ok() && f.offloader_->evict().ok() && f.command(4).ok() &&
             f.offloader_->evict().ok() && f.state() == OffloadState::kRam &&
             f.offloader_->status().counters.delta_saves == 1 && b.command(2 * kLength).ok();
    },
    2};

// The file-system calls of one spill, by operation, counted on a clean run.
std::vector<std::pair<FsOp, uint64_t>> steps_of_one_spill(const SpillScene& scene) {
  OffloaderFixture f(scene.setup());
  NeighbourSession b(f, "1", /*seed=*/7);
  EXPECT_TRUE(scene.build(f, b));
  std::vector<std::pair<FsOp, uint64_t>> steps;
  f.fs_.set_call_hook([&](FsOp op, uint64_t call) { steps.emplace_back(op, call); });
  EXPECT_TRUE(b.offloader->evict().ok());
  f.fs_.set_call_hook({});
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_EQ(f.offloader_->status().snapshot_segments, scene.segments);
  return steps;
}

// A command for "0" arrives at every file-system call of its spill, in turn: each time it
// restores from RAM with every byte, and the spill leaves no file behind.
void a_command_at_every_step_of_a_spill(const SpillScene& scene) {
  const auto steps = steps_of_one_spill(scene);
  ASSERT_GT(steps.size(), 5u * scene.segments) << "the spill should take several calls per file";
  uint64_t last_write_call = 0;
  for (const auto& [op, call] : steps) {
    if (op == FsOp::kWrite) last_write_call = std::max(last_write_call, call);
  }
  for (const auto& [step_op, step_call] : steps) {
    SCOPED_TRACE(std::string("command arrives at ") + std::string(fs_op_name(step_op)) + " call " +
                 std::to_string(step_call));
    OffloaderFixture f(scene.setup());
    NeighbourSession b(f, "1", /*seed=*/7);
    ASSERT_TRUE(scene.build(f, b));
    const uint64_t ram_restores = f.offloader_->status().counters.ram_restores;
    std::thread command;
    Result<Admission> admitted = FailedPrecondition("not run");
    std::atomic<bool> let_in{false};
    // Whether the spill went on to fdatasync a file after the command came (before the next
    // file is created: a stopped spill creates none, so that one is the newcomer's own save,
    // should it go to disk).
    bool spill_synced = false;
    bool in_spill = false;
    f.fs_.set_call_hook([&, op = step_op, nth = step_call](FsOp o, uint64_t call) {
      if (o == FsOp::kCreate) in_spill = false;
      if (in_spill && o == FsOp::kSync) spill_synced = true;
      if (o != op || call != nth || command.joinable()) return;
      in_spill = true;
      command = std::thread([&] {
        Result<Offloader::Lease> lease = f.offloader_->acquire();
        admitted = lease.ok() ? Result<Admission>(lease->admission()) : lease.status();
        if (lease.ok()) f.target_->advance(1);
        let_in = true;
      });
      // A real condition, polled on the spilling thread: the command waits for the spill.
      EXPECT_TRUE(siesta::testing::spin_until(
          [&] { return f.offloader_->status().command_waiting || let_in.load(); },
          std::chrono::seconds(30)));
    });
    const Status b_saved = b.offloader->evict();  // the spill runs here, on this thread
    command.join();
    f.fs_.set_call_hook({});
    ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
    EXPECT_TRUE(admitted->restored);
    EXPECT_EQ(f.target_->length(), kLength + 1);
    EXPECT_EQ(f.target_->verify(), "");
    const OffloadStatus a = f.offloader_->status();
    EXPECT_EQ(a.state, OffloadState::kResident);
    EXPECT_EQ(a.counters.ram_restores, ram_restores + 1)
        << "restored from the copy, never a half file";
    EXPECT_EQ(a.counters.ram_spills, 0u);
    for (uint32_t segment = 0; segment < scene.segments; ++segment) {
      EXPECT_FALSE(file_of(f, "0", segment)) << "the stopped spill left no file " << segment;
    }
    if (step_op == FsOp::kWrite && step_call < last_write_call) {
      EXPECT_FALSE(spill_synced) << "the spill stops at its next chunk, not at its end";
    }
    EXPECT_EQ(f.ram_tier_->stats().spill_failures, 0u) << "a stopped spill is no failure";
    // The newcomer went to RAM (the copy restored made room) or to disk; one place either way.
    ASSERT_TRUE(b_saved.ok()) << b_saved.to_string();
    expect_one_place(f, *b.offloader, "1");
    Result<Admission> b_back = b.command(1);
    ASSERT_TRUE(b_back.ok());
    EXPECT_TRUE(b_back->restored);
    EXPECT_EQ(b.target->verify(), "");
    EXPECT_EQ(f.fs_.counters().open_files, 0);
  }
}

TEST(OffloaderSpillTest, ACommandArrivingAtEveryStepOfASpillRestoresFromRamWithEveryByte) {
  a_command_at_every_step_of_a_spill(kWholeCopy);
}

TEST(OffloaderSpillTest, ACommandArrivingAtEveryStepOfASpillOfACopyWithADeltaRestoresItWhole) {
  a_command_at_every_step_of_a_spill(kCopyWithADelta);
}

TEST(OffloaderSpillTest, TheNewcomersCommandStopsTheSpillItAskedFor) {
  OffloaderFixture f(tier_for(1));
  NeighbourSession b(f, "1", /*seed=*/7);
  ASSERT_TRUE(one_copy_in_ram_and_a_newcomer(f, b));
  b.offloader->offload_now().ignore();  // b's save runs on the executor, on this thread
  std::thread command;
  Result<Admission> admitted = FailedPrecondition("not run");
  std::atomic<bool> let_in{false};
  // At the spill's second write (a chunk of a's copy), b's own command arrives.
  f.fs_.set_call_hook([&](FsOp op, uint64_t call) {
    if (op != FsOp::kWrite || call != 2 || command.joinable()) return;
    command = std::thread([&] {
      Result<Offloader::Lease> lease = b.offloader->acquire();
      admitted = lease.ok() ? Result<Admission>(lease->admission()) : lease.status();
      let_in = true;
    });
    EXPECT_TRUE(siesta::testing::spin_until(
        [&] { return b.offloader->status().command_waiting || let_in.load(); },
        std::chrono::seconds(30)));
  });
  f.pass(0);
  command.join();
  f.fs_.set_call_hook({});
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->cancelled_save) << "b's save stopped while it made room";
  EXPECT_EQ(b.target->verify(), "");
  EXPECT_EQ(f.state(), OffloadState::kRam) << "the spill stopped: a's copy stays";
  expect_one_place(f, *f.offloader_, "0");
  const RamTierStats tier = f.ram_tier_->stats();
  EXPECT_EQ(tier.spills, 0u);
  EXPECT_EQ(tier.spill_failures, 0u);
  Result<Admission> a_back = f.command(1);
  ASSERT_TRUE(a_back.ok());
  EXPECT_TRUE(a_back->restored);
  EXPECT_EQ(f.target_->verify(), "");
}

}  // namespace
}  // namespace siesta
