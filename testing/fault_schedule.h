// FaultSchedule: on which calls of an operation an injected fault fires -- the one rule both
// fault plans (FaultPlan for MemoryBackend, FsFaultPlan for FileSystem) share. Calls are
// counted from 1; the fault fires on call `nth_call` and, when `sticky`, on every call after
// it. nth_call 0 never fires.
//
// Thread rule: a value type; read-only use from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "testing/seeded_draws.h"

namespace siesta {

struct FaultSchedule {
  uint64_t nth_call = 0;  // 1-based; 0: never fires
  bool sticky = false;    // also fire on every later call

  bool fires_on(uint64_t call) const {
    return nth_call != 0 && (call == nth_call || (sticky && call > nth_call));
  }
  bool never() const { return nth_call == 0; }

  // "on <operation> call 3" or "on <operation> call 3 and every later one".
  std::string describe(std::string_view operation) const {
    std::string text = "on " + std::string(operation) + " call " + std::to_string(nth_call);
    if (sticky) text += " and every later one";
    return text;
  }

  // nth_call in [1, max_nth_call] (0 is taken as 1), sticky one time in four: the draws every
  // seeded fault plan makes, in this order, after choosing what fails.
  static FaultSchedule draw(SeededDraws& draws, uint64_t max_nth_call) {
    if (max_nth_call == 0) max_nth_call = 1;
    FaultSchedule schedule;
    schedule.nth_call = 1 + draws.below(max_nth_call);
    schedule.sticky = draws.one_in(4);
    return schedule;
  }

  friend bool operator==(const FaultSchedule&, const FaultSchedule&) = default;
};

}  // namespace siesta
