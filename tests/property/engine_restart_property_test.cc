// Model-based property test of conversations kept across restarts (--cache-persist on;
// synthetic:tiny on the simulator). RapidCheck generates K conversations (2..4) over P sessions
// (1..K) with N = K kept, a RAM tier or none, and random interleavings of
//   - turns, each continuing its own conversation (by prompt_cache_key or by slot) or
//     starting it over;
//   - idle gaps (a ManualClock moved past the idle time, the timers run) and forced offloads;
//   - restarts: the engine's stack closed and opened again on the same directory and key file,
//     either cleanly (the close saves every conversation not on disk: exit save limit 30 s on a
//     clock that does not move) or as a crash (the exit save limit 0: nothing saved at the
//     close, as after kill -9: what was on disk stays, the rest is gone).
// The reference is one engine that never offloads and never restarts (P = N = K), each
// conversation on its own session.
//
// Invariants:
//   - every answer is byte-identical to the reference's, whatever came back;
//   - after a clean restart, and after a crash for a conversation whose state was `disk` at
//     the crash, a continuing turn gets its whole history back (cached_tokens = the
//     reference's);
//   - otherwise (a crash while it was resident or in RAM) cached_tokens is 0 or at most what
//     the prompt shares with one of the conversation's earlier histories: a history that comes
//     back is one that was saved, never anything else;
//   - every restart adopts without refusals (same key, same fingerprint, nothing expired).
//
// Case count and seed: RC_PARAMS (ctest sets max_success and max_size=30); printed at start-up.
// Each restart is logged with the case (RC_LOG).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/executor.h"
#include "engine/engine.h"
#include "runtime/engine_stack.h"
#include "tests/support/engine_test_device.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/support/rapidcheck_params.h"
#include "tests/support/temp_dir.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;

enum RestartStepKind : int { kRestartTurn, kRestartIdle, kRestartOffload, kCleanStop, kCrash };

struct RestartStep {
  int kind = kRestartTurn;
  uint32_t conversation = 0;
  int how = 0;
  int arg = 0;
};

std::string restart_word(int arg) {
  static const char* const words[] = {" uno", " dos", " tres", " cuatro", " cinco"};
  return std::string(words[arg % 5]) + std::to_string(arg % 7);
}

// The persisting engine: its stack, opened again after each restart on the same directory, key
// file, clock and executor.
class PersistingStack {
 public:
  static constexpr int64_t kIdleSeconds = 60;

  PersistingStack(uint32_t parallel, uint32_t conversations, uint64_t ram_bytes)
      : parallel_(parallel), conversations_(conversations), ram_bytes_(ram_bytes) {}

  // Opens the stack; a close after it saves (clean) or not (crash). Failure: the stack's.
  Status open(bool clean_close) {
    runtime::EngineStackOptions options;
    options.device = siesta::testing::engine_test_device();
    options.model = model_config_from_spec("synthetic:tiny").value();
    options.offload.config.idle_seconds = kIdleSeconds;
    options.offload.config.expire_seconds = kMaxOffloadSeconds;  // nothing expires in a case
    options.offload.config.disk_dir = dir_.file("cache");
    options.offload.config.ram_bytes = ram_bytes_;
    options.offload.persist = true;
    options.offload.key_file = dir_.file("key");
    options.offload.exit_save_limit = std::chrono::seconds(clean_close ? 30 : 0);
    options.sessions.parallel = parallel_;
    options.sessions.max_sessions = conversations_;
    options.log = [](const std::string&) {};
    options.executor = &executor_;
    SIESTA_ASSIGN_OR_RETURN(stack_, runtime::EngineStack::open(std::move(options), clock_));
    return Status::Ok();
  }
  void close() { stack_.reset(); }

  Engine& engine() const { return stack_->engine(); }
  ManualClock& clock() { return clock_; }
  ManualExecutor& executor() { return executor_; }

 private:
  const uint32_t parallel_;
  const uint32_t conversations_;
  const uint64_t ram_bytes_;
  siesta::testing::TempDir dir_;
  ManualClock clock_;
  ManualExecutor executor_{clock_};
  std::unique_ptr<runtime::EngineStack> stack_;  // last: closed first
};

// What the test knows of one conversation.
struct Kept {
  std::string history;           // what its next continuing prompt extends
  std::set<std::string> before;  // its earlier histories (what a crash may bring back)
  // A crash found it resident or in RAM since its last turn: what comes back is not known.
  bool uncertain = false;
  std::optional<uint32_t> number;  // its conversation number, once an answer said it
};

// Even conversations by key, odd ones by slot: both must route again after a restart. The
// slots are the highest numbers (k-1, k-2), so that the keyed ones, which take the lowest
// unused numbers, never take a slot's.
SessionRoute restart_route(uint32_t c, uint32_t k) {
  return c % 2 == 0 ? route_by_key("restart-user-" + std::to_string(c))
                    : route_by_slot(k - 1 - c / 2);
}

// How many leading bytes `a` and `b` share.
size_t shared_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

RC_GTEST_PROP(EngineRestartProperty, AnswersAreAsIfTheServerNeverStopped, ()) {
  const uint32_t k = *rc::gen::inRange<uint32_t>(2, 5);
  const uint32_t p = *rc::gen::inRange<uint32_t>(1, k + 1);
  const uint64_t ram_bytes = *rc::gen::weightedElement<uint64_t>({{2, 0}, {1, uint64_t{64} << 10}});
  const auto steps = *rc::gen::container<std::vector<RestartStep>>(rc::gen::build<RestartStep>(
      rc::gen::set(&RestartStep::kind, rc::gen::weightedElement<int>({{8, kRestartTurn},
                                                                      {1, kRestartIdle},
                                                                      {1, kRestartOffload},
                                                                      {2, kCleanStop},
                                                                      {2, kCrash}})),
      rc::gen::set(&RestartStep::conversation, rc::gen::inRange<uint32_t>(0, k)),
      rc::gen::set(&RestartStep::how, rc::gen::inRange(0, 4)),
      rc::gen::set(&RestartStep::arg, rc::gen::inRange(0, 100))));
  RC_LOG() << k << " conversations over " << p << " sessions, RAM tier " << ram_bytes << " bytes\n";

  // The close that ends each stack is the next restart step's kind; the last one's is clean.
  auto next_close_is_clean = [&](size_t from) {
    for (size_t i = from; i < steps.size(); ++i) {
      if (steps[i].kind == kCleanStop || steps[i].kind == kCrash) {
        return steps[i].kind == kCleanStop;
      }
    }
    return true;
  };
  PersistingStack on(p, k, ram_bytes);
  Status opened = on.open(next_close_is_clean(0));
  RC_LOG() << opened.to_string() << "\n";
  RC_ASSERT(opened.ok());
  OffloadEngineRig reference(siesta::testing::rig_with_sessions(k, k, /*offload=*/false));
  std::vector<Kept> kept(k);
  const uint32_t context = on.engine().config().context;
  bool lost_to_a_crash = false;
  bool older_history_back = false;
  bool adopted_any = false;

  for (size_t s = 0; s < steps.size(); ++s) {
    const RestartStep& step = steps[s];
    switch (step.kind) {
      case kRestartIdle:
        RC_LOG() << "idle\n";
        on.clock().advance(std::chrono::seconds(PersistingStack::kIdleSeconds));
        on.executor().run_due();
        break;
      case kRestartOffload:
        RC_LOG() << "offload now\n";
        RC_ASSERT(on.engine().offload_now().ok());
        on.executor().run_due();
        break;
      case kCleanStop:
      case kCrash: {
        const bool crash = step.kind == kCrash;
        if (crash) {
          std::vector<OffloadState> state_of(k, OffloadState::kResident);
          for (const SessionStatus& session : on.engine().sessions()) {
            if (session.id < k) state_of[session.id] = session.state;
          }
          for (Kept& one : kept) {
            if (one.number && state_of[*one.number] != OffloadState::kDisk) one.uncertain = true;
          }
        }
        RC_LOG() << (crash ? "crash" : "clean stop") << " and restart\n";
        on.close();
        Status reopened = on.open(next_close_is_clean(s + 1));
        RC_LOG() << reopened.to_string() << "\n";
        RC_ASSERT(reopened.ok());
        const AdoptionReport adoption = on.engine().status().adoption;
        RC_LOG() << "adopted " << adoption.adopted << " of " << adoption.offered << " (refused "
                 << adoption.foreign << " foreign, " << adoption.unreadable << " unreadable, "
                 << adoption.expired << " expired, " << adoption.no_room << " without room, "
                 << adoption.failed << " failed)\n";
        RC_ASSERT(adoption.refused() == 0u);
        if (adoption.adopted > 0) adopted_any = true;
        break;
      }
      default: {  // kRestartTurn
        const uint32_t c = step.conversation;
        Kept& one = kept[c];
        std::string prompt = step.how < 3
                                 ? one.history + restart_word(step.arg)
                                 : "conversation " + std::to_string(c) + restart_word(step.arg);
        bool continues = step.how < 3 && !one.history.empty();
        if (prompt.size() + 8 > context) {
          prompt = restart_word(step.arg);
          continues = false;
        }
        GenerateRequest request;
        request.prompt = prompt;
        request.max_tokens = 8;
        request.route = restart_route(c, k);
        Result<GenerateResult> got = on.engine().generate(std::move(request)).get();
        RC_LOG() << "turn of conversation " << c << (continues ? " (continues)" : " (fresh)")
                 << ": "
                 << (got.ok() ? "cached " + std::to_string(got->cached_tokens)
                              : got.status().to_string())
                 << "\n";
        RC_ASSERT(got.ok());
        GenerateRequest twin;
        twin.prompt = prompt;
        twin.max_tokens = 8;
        twin.route = route_by_slot(c);
        Result<GenerateResult> want = reference.engine->generate(std::move(twin)).get();
        RC_ASSERT(want.ok());
        RC_ASSERT(got->text == want->text);
        if (continues && !one.uncertain) {
          RC_ASSERT(got->cached_tokens == want->cached_tokens);
        } else if (continues && got->cached_tokens != want->cached_tokens) {
          // After a crash: nothing, or (at most) what the prompt shares with a history the
          // conversation had before.
          if (got->cached_tokens == 0) {
            lost_to_a_crash = true;
          } else {
            bool earlier = false;
            for (const std::string& before : one.before) {
              earlier = earlier || got->cached_tokens <= shared_prefix(prompt, before);
            }
            RC_ASSERT(earlier);
            older_history_back = true;
          }
        }
        if (!one.history.empty()) one.before.insert(one.history);
        one.history = prompt + got->text;
        one.uncertain = false;
        one.number = got->session;
        break;
      }
    }
  }
  on.close();
  if (adopted_any) RC_TAG("conversations adopted after a restart");
  if (lost_to_a_crash) RC_TAG("a conversation lost to a crash, read again");
  if (older_history_back) RC_TAG("an earlier saved history back after a crash");
}

}  // namespace
}  // namespace siesta::engine
