// Model-based property test of several conversations over fewer sessions (synthetic:tiny on
// the simulator): RapidCheck generates K conversations (2..4) over P sessions (1..K-1) with N
// = K kept, and random interleavings of their turns (each continuing its own conversation,
// diverging inside it, or starting over), idle gaps (a ManualClock moved past the idle time
// and the timers run), and forced offloads (POST /v1/cache/offload). The reference is one
// engine that never offloads and keeps every conversation resident (P = N = K), each turn sent
// to that conversation's own session, so it replays each conversation alone.
//
// Invariants:
//   - every answer is byte-identical to the reference's, and so is cached_tokens (N = K: no
//     conversation is forgotten, so every kept history is used);
//   - a returning conversation whose prompt extends its last turn gets its whole kept history
//     back (cached_tokens = its history);
//   - never more than P sessions committed (the backend's committed bytes after every step).
//
// Case count and seed: RC_PARAMS (ctest sets max_success=1000 max_size=30: a case is a few
// dozen generations of a tiny model, and CI has 2 cores); printed at start-up.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/support/offload_engine_rig.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta::engine {
namespace {

using siesta::testing::OffloadEngineRig;

enum Kind : int { kTurn, kIdle, kOffload };

struct Step {
  int kind = kTurn;
  uint32_t conversation = 0;
  int how = 0;
  int arg = 0;
};

std::string word(int arg) {
  static const char* const words[] = {" alpha", " beta", " gamma", " delta", " eps"};
  return std::string(words[arg % 5]) + std::to_string(arg % 7);
}

RC_GTEST_PROP(EngineSessionsProperty, ConversationsOverFewerSessionsAnswerAsIfAlone, ()) {
  const uint32_t k = *rc::gen::inRange<uint32_t>(2, 5);
  const uint32_t p = *rc::gen::inRange<uint32_t>(1, k);
  const auto steps = *rc::gen::container<std::vector<Step>>(rc::gen::build<Step>(
      rc::gen::set(&Step::kind,
                   rc::gen::weightedElement<int>({{8, kTurn}, {1, kIdle}, {1, kOffload}})),
      rc::gen::set(&Step::conversation, rc::gen::inRange<uint32_t>(0, k)),
      rc::gen::set(&Step::how, rc::gen::inRange(0, 4)),
      rc::gen::set(&Step::arg, rc::gen::inRange(0, 100))));

  OffloadEngineRig on(siesta::testing::rig_with_sessions(p, k, /*offload=*/true));
  OffloadEngineRig reference(siesta::testing::rig_with_sessions(k, k, /*offload=*/false));
  std::vector<std::string> history(k);  // what each conversation's next prompt extends
  uint64_t one_session = 0;             // committed bytes of one session, once measured
  uint32_t created = 1;
  for (const Step& step : steps) {
    if (step.kind == kIdle) {
      on.clock.advance(std::chrono::seconds(OffloadEngineRig::kIdleSeconds));
      on.executor.run_due();
    } else if (step.kind == kOffload) {
      RC_ASSERT(on.engine->offload_now().ok());
      on.executor.run_due();
    } else {
      const uint32_t c = step.conversation;
      std::string prompt;
      switch (step.how) {
        case 0:
        case 1: prompt = history[c] + word(step.arg); break;  // continues
        case 2:
          prompt = history[c].substr(0, history[c].size() * (step.arg % 10) / 10) + word(step.arg);
          break;  // diverges inside it
        default: prompt = "conversation " + std::to_string(c) + word(step.arg); break;
      }
      bool continues = step.how < 2 && !history[c].empty();
      if (prompt.size() + 8 > on.engine->config().context) {
        prompt = word(step.arg);  // the context is full: start over
        continues = false;
      }
      GenerateRequest request;
      request.prompt = prompt;
      request.max_tokens = 8;
      request.route = route_by_key("user-" + std::to_string(c));
      Result<GenerateResult> got = on.engine->generate(request).get();
      request.route = route_by_slot(c);
      Result<GenerateResult> want = reference.engine->generate(request).get();
      RC_ASSERT(got.ok());
      RC_ASSERT(want.ok());
      RC_ASSERT(got->text == want->text);
      RC_ASSERT(got->cached_tokens == want->cached_tokens);
      if (continues) RC_ASSERT(got->cached_tokens == history[c].size() - 1);
      history[c] = prompt + got->text;
      const uint32_t now_created = static_cast<uint32_t>(on.engine->sessions().size());
      if (one_session == 0 && now_created == 2 && p >= 2) {
        one_session = on.backend->stats().committed_bytes - on.resident_committed;
      }
      created = now_created;
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
}

}  // namespace
}  // namespace siesta::engine
