// Model-based property test of several conversations over fewer sessions (synthetic:tiny on
// the simulator): RapidCheck generates K conversations (2..4) over P sessions (1..K-1) with N
// = K kept, and random interleavings of
//   - turns, each continuing its own conversation, diverging inside it, or starting over;
//   - batches: turns of 2 or 3 different conversations submitted at once, so that they wait
//     for sessions, evict one another and take turns on the engine thread;
//   - idle gaps (a ManualClock moved past the idle time and the timers run) and forced
//     offloads (the engine's offload_now, as POST /v1/cache/offload);
//   - injected faults: a file-system fault plan (FsFaultPlan::from_seed: any operation of the
//     snapshot store, I/O error, no space or short write, once or sticky), the device taken by
//     "another process" (SimBackend::set_external_usage), and the step that heals both;
//   - tampering: two conversations' snapshot files (whole or delta segments) swapped, or one
//     renamed over the other's, as someone with write access to the cache directory could.
// The reference is one engine that never offloads and keeps every conversation resident (P =
// N = K), each turn sent to that conversation's own session, so it replays each conversation
// alone; where the offloading engine reports that it discarded a conversation's history (a
// snapshot it could not read back), the reference forgets that conversation too, first.
//
// Invariants:
//   - every answer is byte-identical to the reference's, and so is cached_tokens;
//   - a history is discarded only while a fault is injected or after files were tampered with
//     (a file put under another conversation's name is refused, never restored), and a
//     returning conversation whose prompt extends its last turn otherwise gets its whole kept
//     history back (cached_tokens = its history);
//   - a turn fails only while a fault is injected (or when the disk budget has no room for the
//     conversation that must leave the device), and then with Unavailable or OutOfMemory
//     (retry later), leaving its conversation as it was: the next turn after healing gets the
//     same answer and history as if the failed one had never been sent;
//   - never more than P sessions committed (the backend's committed bytes after every step);
//   - with a RAM tier (a random budget: none, smaller than one conversation, or room for some
//     of them, so that saves spill the least recently used copies to disk), every offloaded
//     conversation is restorable from exactly one place after every step: a copy in RAM and
//     no file, or a file and no copy (a resident one may keep either as its next delta's base,
//     never both); the tier never holds more than its budget and exactly what the sessions
//     say they hold;
//   - with a disk budget (none, 96 KiB, 256 KiB or 4 MiB), the directory's files never pass it;
//     a conversation whose snapshot was deleted for room starts afresh, as the reference does
//     once reset, with the same answer.
//
// Case count and seed: RC_PARAMS (ctest sets max_success=1000 max_size=30: a case is a few
// dozen generations of a tiny model, and CI has 2 cores); printed at start-up. Each injected
// fault is logged with the case (RC_LOG), and the cases are tagged by what fired.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "core/base/posix_file_system.h"
#include "engine/engine.h"
#include "testing/faulty_file_system.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;

enum StepKind : int { kTurn, kBatch, kIdle, kOffload, kFileFault, kMemoryTaken, kHeal, kTamper };

struct Step {
  int kind = kTurn;
  uint32_t conversation = 0;
  int how = 0;
  int arg = 0;
  uint64_t seed = 0;  // a fault plan's
};

std::string word(int arg) {
  static const char* const words[] = {" alpha", " beta", " gamma", " delta", " eps"};
  return std::string(words[arg % 5]) + std::to_string(arg % 7);
}

// What the test knows of one conversation, and the faults in force.
struct SessionsWorld {
  uint32_t k = 0;
  std::vector<std::string> history;  // what each conversation's next prompt extends
  bool file_fault = false;           // a plan is set on the faulty file system
  bool memory_taken = false;         // the device is full of another process's memory
  // Snapshot files were moved between conversations: any conversation may lose its history at
  // a later restore (the test does not know which session holds which conversation).
  bool tampered = false;
  // The snapshot directory has a budget: a conversation released to disk may have its snapshot
  // deleted for room, and then starts afresh (fresh_after_expiry) at its next turn.
  bool disk_budget = false;
  bool faulty() const { return file_fault || memory_taken; }
  bool may_discard() const { return faulty() || tampered; }
  // What happened in the case, for its tags (each once, so that the distribution stays short).
  bool refused_for_memory = false;
  bool refused_otherwise = false;
  bool discarded = false;
  bool file_fault_fired = false;
  bool tamper_refused = false;
  bool spilled = false;
  bool spilled_or_kept_in_ram = false;
  bool deleted_for_room = false;
  bool refused_for_disk_room = false;
};

// The snapshot files in `dir` by session number ("siesta-<nonce>-<session>[.<k>].snap").
std::map<uint32_t, std::vector<std::string>> snapshots_by_session(const std::string& dir) {
  static const std::regex name("siesta-[0-9a-f]{32}-([0-9]+)(\\.[0-9]+)?\\.snap");
  std::map<uint32_t, std::vector<std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    std::smatch match;
    if (std::regex_match(file, match, name)) {
      out[static_cast<uint32_t>(std::stoul(match[1]))].push_back(entry.path().string());
    }
  }
  for (auto& [session, files] : out) std::sort(files.begin(), files.end());
  return out;
}

// What the regular files directly in `dir` hold: snapshots, their temporaries and retired
// names (the exports live in a subdirectory).
uint64_t snapshot_bytes_in(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

// Tampering: one file of a session and one of another, swapped (`how` even) or the first
// renamed over the second. Returns what was done, or an empty string when fewer than two
// sessions have files.
std::string tamper(const std::string& dir, int how, int arg) {
  const auto by_session = snapshots_by_session(dir);
  if (by_session.size() < 2) return {};
  auto pick = [&](size_t n) {
    auto it = by_session.begin();
    std::advance(it, static_cast<long>(n % by_session.size()));
    return it->second[static_cast<size_t>(arg) % it->second.size()];
  };
  const std::string a = pick(static_cast<size_t>(arg));
  const std::string b = pick(static_cast<size_t>(arg) + 1);
  if (how % 2 == 0) {
    const std::string aside = a + ".aside";
    std::filesystem::rename(a, aside);
    std::filesystem::rename(b, a);
    std::filesystem::rename(aside, b);
    return "swapped " + std::filesystem::path(a).filename().string() + " and " +
           std::filesystem::path(b).filename().string();
  }
  std::filesystem::rename(a, b);
  return "renamed " + std::filesystem::path(a).filename().string() + " over " +
         std::filesystem::path(b).filename().string();
}

// One conversation's turn: the prompt and what the test expects of its answer.
struct Turn {
  uint32_t conversation = 0;
  std::string prompt;
  bool continues = false;  // the prompt extends the conversation's history
};

Turn make_turn(const SessionsWorld& world, uint32_t c, int how, int arg, uint32_t context) {
  Turn turn;
  turn.conversation = c;
  const std::string& history = world.history[c];
  switch (how) {
    case 0:
    case 1: turn.prompt = history + word(arg); break;  // continues
    case 2:
      turn.prompt = history.substr(0, history.size() * (arg % 10) / 10) + word(arg);
      break;  // diverges inside it
    default: turn.prompt = "conversation " + std::to_string(c) + word(arg); break;
  }
  turn.continues = how < 2 && !history.empty();
  if (turn.prompt.size() + 8 > context) {
    turn.prompt = word(arg);  // the context is full: start over
    turn.continues = false;
  }
  return turn;
}

GenerateRequest request_for(const Turn& turn, SessionRoute route) {
  GenerateRequest request;
  request.prompt = turn.prompt;
  request.max_tokens = 8;
  request.route = route;
  return request;
}

// Checks one answer of the offloading engine against the reference and records the turn.
void check_answer(SessionsWorld& world, const Turn& turn, Result<GenerateResult> got,
                  OffloadEngineRig& reference) {
  const uint32_t c = turn.conversation;
  if (!got.ok()) {
    RC_LOG() << "conversation " << c << " refused: " << got.status().to_string() << "\n";
    // A budget too small for the conversation leaving the device refuses the newcomer (503).
    const bool no_disk_room = world.disk_budget && got.status().message().find(
                                                       "--cache-disk-max-mib") != std::string::npos;
    RC_ASSERT(world.faulty() || no_disk_room);
    RC_ASSERT(got.status().code() == StatusCode::kUnavailable ||
              got.status().code() == StatusCode::kOutOfMemory);
    if (no_disk_room) {
      world.refused_for_disk_room = true;
    } else {
      (world.memory_taken ? world.refused_for_memory : world.refused_otherwise) = true;
    }
    return;  // as if never sent: the reference does not see it either
  }
  // Deleted for room in the directory's budget: the conversation starts afresh, as the
  // reference does once told to forget it.
  const bool deleted_for_room = got->admission.fresh_after_expiry;
  if (deleted_for_room) {
    RC_ASSERT(world.disk_budget);
    world.deleted_for_room = true;
  }
  const bool discarded = got->admission.fallback.has_value() || deleted_for_room;
  if (discarded && !deleted_for_room) {
    RC_ASSERT(world.may_discard());
    if (!world.faulty()) {
      // Only tampering can explain it: the file under this conversation's name was another
      // conversation's (foreign) or was moved away (not found).
      const FallbackReason reason = *got->admission.fallback;
      RC_ASSERT(reason == FallbackReason::kForeign || reason == FallbackReason::kNotFound);
      world.tamper_refused = true;
    }
    world.discarded = true;
  }
  if (discarded) RC_ASSERT(reference.engine->reset(c).get().ok());
  Result<GenerateResult> want =
      reference.engine->generate(request_for(turn, route_by_slot(c))).get();
  RC_ASSERT(want.ok());
  RC_ASSERT(got->text == want->text);
  RC_ASSERT(got->cached_tokens == want->cached_tokens);
  if (turn.continues && !discarded) RC_ASSERT(got->cached_tokens == world.history[c].size() - 1);
  world.history[c] = turn.prompt + got->text;
}

SessionRoute route_of(uint32_t c) { return route_by_key("user-" + std::to_string(c)); }

RC_GTEST_PROP(EngineSessionsProperty, ConversationsOverFewerSessionsAnswerAsIfAlone, ()) {
  const uint32_t k = *rc::gen::inRange<uint32_t>(2, 5);
  const uint32_t p = *rc::gen::inRange<uint32_t>(1, k);
  const auto steps = *rc::gen::container<std::vector<Step>>(rc::gen::build<Step>(
      rc::gen::set(&Step::kind, rc::gen::weightedElement<int>({{8, kTurn},
                                                               {2, kBatch},
                                                               {1, kIdle},
                                                               {1, kOffload},
                                                               {2, kFileFault},
                                                               {1, kMemoryTaken},
                                                               {1, kHeal},
                                                               {1, kTamper}})),
      rc::gen::set(&Step::conversation, rc::gen::inRange<uint32_t>(0, k)),
      rc::gen::set(&Step::how, rc::gen::inRange(0, 4)),
      rc::gen::set(&Step::arg, rc::gen::inRange(0, 100)),
      rc::gen::set(&Step::seed, rc::gen::arbitrary<uint64_t>())));

  // The tiny model's conversations take 4 to 80 KiB in the tier (their used tokens): 0 (no
  // tier), 8 KiB (few fit), and 32 to 160 KiB (some fit, the rest spill or go to disk).
  const uint64_t ram_budget = *rc::gen::weightedElement<uint64_t>({{2, 0},
                                                                   {1, uint64_t{8} << 10},
                                                                   {3, uint64_t{32} << 10},
                                                                   {2, uint64_t{64} << 10},
                                                                   {1, uint64_t{160} << 10}});
  RC_LOG() << "RAM tier budget: " << ram_budget << " bytes\n";
  // The snapshot directory's budget: none, a few tiny conversations' files, or roomy.
  const uint64_t disk_budget = *rc::gen::weightedElement<uint64_t>(
      {{3, 0}, {2, uint64_t{96} << 10}, {1, uint64_t{256} << 10}, {1, uint64_t{4} << 20}});
  RC_LOG() << "disk budget: " << disk_budget << " bytes\n";
  PosixFileSystem posix;
  FaultyFileSystem files(posix);
  siesta::testing::OffloadEngineRigOptions options =
      siesta::testing::rig_with_sessions(p, k, /*offload=*/true);
  options.fs = &files;
  options.ram_tier_bytes = ram_budget;
  options.disk_budget_bytes = disk_budget;
  OffloadEngineRig on(std::move(options));
  OffloadEngineRig reference(siesta::testing::rig_with_sessions(k, k, /*offload=*/false));
  SessionsWorld world;
  world.k = k;
  world.disk_budget = disk_budget > 0;
  world.history.resize(k);
  const uint32_t context = on.engine->config().context;
  uint64_t one_session = 0;  // committed bytes of one session, once measured
  uint32_t created = 1;
  for (const Step& step : steps) {
    switch (step.kind) {
      case kIdle:
        on.clock.advance(std::chrono::seconds(OffloadEngineRig::kIdleSeconds));
        on.executor.run_due();
        break;
      case kOffload:
        RC_ASSERT(on.engine->offload_now().ok());
        on.executor.run_due();
        break;
      case kFileFault: {
        const FsFaultPlan plan = FsFaultPlan::from_seed(step.seed, 3);
        RC_LOG() << "injected: " << plan.describe() << "\n";
        files.set_plan(plan);
        world.file_fault = true;
        break;
      }
      case kMemoryTaken:
        RC_LOG() << "injected: the device taken by another process\n";
        on.backend->set_external_usage(on.backend->stats().device_total_bytes);
        world.memory_taken = true;
        break;
      case kTamper: {
        const std::string done = tamper(on.dir.path(), step.how, step.arg);
        if (!done.empty()) {
          RC_LOG() << "injected: " << done << "\n";
          world.tampered = true;
        }
        break;
      }
      case kHeal:
        if (files.counters().faults_fired > 0) world.file_fault_fired = true;
        files.set_plan(FsFaultPlan::none());
        on.backend->set_external_usage(0);
        world.file_fault = world.memory_taken = false;
        break;
      case kTurn: {
        const Turn turn = make_turn(world, step.conversation, step.how, step.arg, context);
        check_answer(world, turn,
                     on.engine->generate(request_for(turn, route_of(turn.conversation))).get(),
                     reference);
        break;
      }
      default: {  // kBatch: 2 or 3 conversations at once, all submitted before any answer
        const uint32_t size = std::min<uint32_t>(k, 2 + static_cast<uint32_t>(step.arg % 2));
        std::vector<Turn> turns;
        std::vector<std::future<Result<GenerateResult>>> answers;
        for (uint32_t i = 0; i < size; ++i) {
          turns.push_back(make_turn(world, (step.conversation + i) % k, (step.how + i) % 4,
                                    step.arg + static_cast<int>(i), context));
          answers.push_back(
              on.engine->generate(request_for(turns.back(), route_of(turns.back().conversation))));
        }
        for (uint32_t i = 0; i < size; ++i)
          check_answer(world, turns[i], answers[i].get(), reference);
        break;
      }
    }
    const std::vector<SessionStatus> sessions = on.engine->sessions();
    const uint32_t now_created = static_cast<uint32_t>(sessions.size());
    // One session's bytes: measured while exactly two sessions exist and both are resident (with
    // session 0 released, the difference would be the second's bytes less the first's: a bound
    // too tight, or, below zero, wrapped round).
    const bool both_resident =
        std::all_of(sessions.begin(), sessions.end(),
                    [](const SessionStatus& s) { return s.state == OffloadState::kResident; });
    const uint64_t committed_now = on.backend->stats().committed_bytes;
    if (one_session == 0 && now_created == 2 && p >= 2 && both_resident &&
        committed_now > on.resident_committed) {
      one_session = committed_now - on.resident_committed;
    }
    created = now_created;
    // Each offloaded conversation in exactly one place; the tier within its budget.
    uint64_t in_ram = 0;
    for (const SessionStatus& session : on.engine->sessions()) {
      if (session.state == OffloadState::kRam) {
        RC_ASSERT(session.ram_bytes > 0u);
        RC_ASSERT(session.disk_bytes == 0u);
        world.spilled_or_kept_in_ram = true;
      } else if (session.state == OffloadState::kDisk) {
        RC_ASSERT(session.ram_bytes == 0u);
        RC_ASSERT(session.disk_bytes > 0u);
      } else {
        // Resident: a copy in RAM (written ahead, or kept as the next delta's base) or files
        // kept as a base, never both.
        RC_ASSERT(session.ram_bytes == 0u || session.disk_bytes == 0u);
      }
      in_ram += session.ram_bytes;
    }
    RC_ASSERT(in_ram <= ram_budget);
    if (const RamTier* tier = on.stack->ram_tier()) {
      RC_ASSERT(tier->stats().used_bytes == in_ram);
      if (tier->stats().spills > 0) world.spilled = true;
    }
    // The directory within its budget, on the budget's account and in its files.
    if (const DiskBudget* budget = on.stack->disk_budget()) {
      const DiskBudgetStats disk = budget->stats();
      RC_ASSERT(disk.used_bytes <= disk.budget_bytes);
      if (!world.tampered) RC_ASSERT(snapshot_bytes_in(on.dir.path()) <= disk.budget_bytes);
    }
    // Never more than P sessions committed: the weights and session 0 are resident_committed,
    // and every other committed session adds one session's bytes. Without a measurement of
    // one session (P = 1), the committed bytes must stay at the first session's.
    const uint64_t committed = on.backend->stats().committed_bytes;
    if (p == 1) {
      RC_ASSERT(committed <= on.resident_committed);
    } else if (one_session != 0) {
      RC_ASSERT(committed <= on.resident_committed + (p - 1) * one_session);
    }
  }
  RC_ASSERT(created <= k);
  if (world.refused_for_memory) RC_TAG("a turn refused with the device taken");
  if (world.refused_otherwise) RC_TAG("a turn refused under a file fault");
  if (world.discarded) RC_TAG("a history discarded under a fault");
  if (world.deleted_for_room) RC_TAG("a snapshot deleted for room");
  if (world.refused_for_disk_room) RC_TAG("a turn refused: no room in the disk budget");
  if (world.file_fault_fired || files.counters().faults_fired > 0) RC_TAG("a file fault fired");
  if (world.tamper_refused) RC_TAG("a tampered snapshot refused");
  if (world.spilled) RC_TAG("a RAM copy spilled to disk");
  if (world.spilled_or_kept_in_ram) RC_TAG("a conversation in RAM");
}

}  // namespace
}  // namespace siesta::engine
