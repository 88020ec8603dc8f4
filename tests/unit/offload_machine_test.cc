// The Offloader's state table (core/offload/internal/offload_machine.h) against the one
// docs/ARCHITECTURE.md documents: every (phase, event) pair is walked, and the code's answer
// must be the document's (a row, or no row: illegal). Then the table's shape: every phase is
// reachable, every save and every command ends, and projected onto the six /v1/status states
// it is the diagram of core/offload/offloader.h.
#include "core/offload/internal/offload_machine.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace siesta::offload {
namespace {

std::optional<Phase> phase_named(const std::string& name) {
  for (size_t i = 0; i < kPhaseCount; ++i) {
    if (phase_name(static_cast<Phase>(i)) == name) return static_cast<Phase>(i);
  }
  return std::nullopt;
}

std::optional<Event> event_named(const std::string& name) {
  for (size_t i = 0; i < kEventCount; ++i) {
    if (event_name(static_cast<Event>(i)) == name) return static_cast<Event>(i);
  }
  return std::nullopt;
}

// The rows of the table under "### The offloader's state table" in docs/ARCHITECTURE.md.
std::vector<std::tuple<std::string, std::string, std::string>> documented_rows() {
  std::ifstream doc(std::string(SIESTA_SOURCE_DIR) + "/docs/ARCHITECTURE.md");
  EXPECT_TRUE(doc.good()) << "cannot read docs/ARCHITECTURE.md";
  const std::regex row(R"(^\| `([a-z_]+)` \| `([a-z_]+)` \| `([a-z_]+)` \|$)");
  std::vector<std::tuple<std::string, std::string, std::string>> rows;
  bool in_section = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.starts_with("#")) {
      in_section = line == "### The offloader's state table";
      continue;
    }
    std::smatch m;
    if (in_section && std::regex_match(line, m, row)) rows.emplace_back(m[1], m[2], m[3]);
  }
  return rows;
}

TEST(OffloadMachineTest, EveryPairIsWhatTheDocumentSays) {
  std::map<std::pair<Phase, Event>, Phase> documented;
  for (const auto& [from, event, to] : documented_rows()) {
    const std::optional<Phase> f = phase_named(from), t = phase_named(to);
    const std::optional<Event> e = event_named(event);
    ASSERT_TRUE(f && e && t) << "unknown name in the document's row " << from << " " << event << " "
                             << to;
    EXPECT_TRUE(documented.emplace(std::make_pair(*f, *e), *t).second)
        << "the document lists " << from << " + " << event << " twice";
  }
  ASSERT_GT(documented.size(), 20u) << "the document's table was not found";
  int legal = 0;
  for (size_t p = 0; p < kPhaseCount; ++p) {
    for (size_t e = 0; e < kEventCount; ++e) {
      const Phase phase = static_cast<Phase>(p);
      const Event event = static_cast<Event>(e);
      const auto it = documented.find({phase, event});
      const std::optional<Phase> expected =
          it == documented.end() ? std::nullopt : std::optional<Phase>(it->second);
      const std::optional<Phase> actual = next_phase(phase, event);
      EXPECT_EQ(actual, expected) << phase_name(phase) << " + " << event_name(event) << ": code "
                                  << (actual ? phase_name(*actual) : "illegal") << ", document "
                                  << (expected ? phase_name(*expected) : "illegal");
      legal += actual.has_value();
    }
  }
  EXPECT_EQ(static_cast<size_t>(legal), transitions().size()) << "a pair listed twice in code";
  std::printf("%zu phases x %zu events: %d legal transitions, all as documented\n", kPhaseCount,
              kEventCount, legal);
}

// One phase's rules as a row of the table under "### The offloader's phases" in
// docs/ARCHITECTURE.md: | `phase` | state | memory | command | timer | offload_now |
// save_ahead | evict | forget |, every action in backquotes.
std::string rules_row(Phase phase) {
  const PhaseRules& r = rules(phase);
  auto quoted = [](std::string_view name) { return "`" + std::string(name) + "` |"; };
  return "| `" + std::string(r.name) + "` | " + std::string(offload_state_name(r.state)) + " | " +
         quoted(memory_name(r.memory)) + " " + quoted(on_command_name(r.command)) + " " +
         quoted(on_timer_name(r.timer)) + " " + quoted(on_request_name(r.offload_now)) + " " +
         quoted(on_request_name(r.save_ahead)) + " " + quoted(on_request_name(r.evict)) + " " +
         quoted(on_request_name(r.forget));
}

// The rows of the section `heading` of docs/ARCHITECTURE.md that start with "| `".
std::vector<std::string> documented_lines(const std::string& heading) {
  std::ifstream doc(std::string(SIESTA_SOURCE_DIR) + "/docs/ARCHITECTURE.md");
  EXPECT_TRUE(doc.good()) << "cannot read docs/ARCHITECTURE.md";
  std::vector<std::string> lines;
  bool in_section = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.starts_with("#")) {
      in_section = line == heading;
      continue;
    }
    if (in_section && line.starts_with("| `")) lines.push_back(line);
  }
  return lines;
}

// The phase table decides what each phase allows; the document shows it, row for row
// (SIESTA_PRINT_PHASE_RULES=1 prints the rows the code holds).
TEST(OffloadMachineTest, EveryPhasesRulesAreWhatTheDocumentSays) {
  const std::vector<std::string> documented = documented_lines("### The offloader's phases");
  ASSERT_EQ(documented.size(), kPhaseCount) << "one row per phase in docs/ARCHITECTURE.md";
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const std::string row = rules_row(static_cast<Phase>(i));
    if (std::getenv("SIESTA_PRINT_PHASE_RULES") != nullptr) std::printf("%s\n", row.c_str());
    EXPECT_EQ(documented[i], row) << "row " << i;
  }
}

// The rules agree with the transitions: an action that applies an event finds it legal.
TEST(OffloadMachineTest, EveryRuleLeadsAlongTheTable) {
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const Phase phase = static_cast<Phase>(i);
    const PhaseRules& r = rules(phase);
    SCOPED_TRACE(phase_name(phase));
    const bool command_moves = r.command != OnCommand::kRefuseBusy &&
                               r.command != OnCommand::kRefuseLost &&
                               r.command != OnCommand::kWaitForRelease;
    EXPECT_EQ(next_phase(phase, Event::kCommandArrives).has_value(), command_moves);
    if (r.command == OnCommand::kWaitForRelease) {
      EXPECT_EQ(r.memory, Memory::kReleasing);
    }
    if (r.command == OnCommand::kRestore || r.command == OnCommand::kStartFresh) {
      EXPECT_EQ(r.memory, Memory::kReleased) << "only released memory is mapped back";
    }
    if (r.command == OnCommand::kRun || r.command == OnCommand::kRunOverSavedFile) {
      EXPECT_EQ(r.memory, Memory::kCommitted) << "a command runs on committed memory";
    }
    if (r.command == OnCommand::kCancelSaveAndWait || r.command == OnCommand::kCancelSaveAndRun) {
      EXPECT_TRUE(r.save_running);
    }
    switch (r.timer) {
      case OnTimer::kSave:
      case OnTimer::kRelease: EXPECT_TRUE(next_phase(phase, Event::kSaveDue)); break;
      case OnTimer::kExpire:
      case OnTimer::kRetryDelete: EXPECT_TRUE(next_phase(phase, Event::kExpiryDue)); break;
      case OnTimer::kNothing: break;
    }
    if (r.evict == OnRequest::kSave || r.evict == OnRequest::kRelease) {
      EXPECT_TRUE(next_phase(phase, Event::kSaveDue));
    }
    if (r.forget == OnRequest::kDelete) {
      EXPECT_TRUE(next_phase(phase, Event::kExpiryDue));
    }
    // A request waits only for a save that ends on its own, and is refused while a command
    // holds the session.
    for (OnRequest request : {r.offload_now, r.save_ahead, r.evict, r.forget}) {
      if (request == OnRequest::kWaitForSave) {
        EXPECT_TRUE(r.save_running);
      }
    }
    if (holds_command(phase) && r.state != OffloadState::kDisabled) {
      EXPECT_EQ(r.offload_now, OnRequest::kRefuseBusy);
      EXPECT_EQ(r.evict, OnRequest::kRefuseBusy);
    }
    if (r.state == OffloadState::kDisabled) {
      EXPECT_EQ(r.offload_now, OnRequest::kRefuseDisabled);
      EXPECT_EQ(r.timer, OnTimer::kNothing);
    }
  }
}

TEST(OffloadMachineTest, NamesAreUniqueAndRoundTrip) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const Phase phase = static_cast<Phase>(i);
    EXPECT_TRUE(names.insert(phase_name(phase)).second) << phase_name(phase);
    EXPECT_EQ(phase_named(std::string(phase_name(phase))), phase);
  }
  names.clear();
  for (size_t i = 0; i < kEventCount; ++i) {
    const Event event = static_cast<Event>(i);
    EXPECT_TRUE(names.insert(event_name(event)).second) << event_name(event);
    EXPECT_EQ(event_named(std::string(event_name(event))), event);
  }
}

// Phases reachable from where an Offloader starts (resident or disabled).
std::set<Phase> reachable_from(std::set<Phase> frontier) {
  std::set<Phase> seen = frontier;
  while (!frontier.empty()) {
    std::set<Phase> next;
    for (const Transition& t : transitions()) {
      if (frontier.count(t.from) && seen.insert(t.to).second) next.insert(t.to);
    }
    frontier = next;
  }
  return seen;
}

TEST(OffloadMachineTest, EveryPhaseIsReachable) {
  const std::set<Phase> seen = reachable_from({Phase::kResident, Phase::kDisabled});
  for (size_t i = 0; i < kPhaseCount; ++i) {
    EXPECT_TRUE(seen.count(static_cast<Phase>(i))) << phase_name(static_cast<Phase>(i));
  }
}

// No save runs forever and no command holds the session forever: from every phase a path
// leads to a phase with neither (only `lost` is an end, and it holds nothing).
TEST(OffloadMachineTest, EverySaveAndEveryCommandCanEnd) {
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const Phase start = static_cast<Phase>(i);
    bool ends = false;
    for (Phase p : reachable_from({start})) {
      ends = ends || (!save_running(p) && !holds_command(p));
    }
    EXPECT_TRUE(ends) << phase_name(start);
  }
  for (const Transition& t : transitions()) {
    EXPECT_NE(t.from, Phase::kLost) << "a lost session never moves again";
  }
}

TEST(OffloadMachineTest, ACommandNeverMeetsAHalfReleasedSession) {
  EXPECT_EQ(next_phase(Phase::kSaveReleasing, Event::kCommandArrives), std::nullopt)
      << "a command waits for the release to end, then restores";
  // Once the file is durable, only the release decides: no command can cancel it.
  for (size_t e = 0; e < kEventCount; ++e) {
    const Event event = static_cast<Event>(e);
    if (std::optional<Phase> to = next_phase(Phase::kSaveReleasing, event)) {
      EXPECT_TRUE(event == Event::kReleased || event == Event::kReleasedToRam ||
                  event == Event::kReleaseFailed)
          << event_name(event);
    }
  }
}

TEST(OffloadMachineTest, TheCancelFlagIsRaisedExactlyWhereACommandOvertookTheSave) {
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const Phase phase = static_cast<Phase>(i);
    EXPECT_TRUE(!cancels_save(phase) || save_running(phase)) << phase_name(phase);
  }
  // A command arriving mid-save always lands in a cancelling phase.
  for (const Transition& t : transitions()) {
    if (t.event == Event::kCommandArrives && save_running(t.from)) {
      EXPECT_TRUE(cancels_save(t.to)) << phase_name(t.from);
    }
  }
}

// Projected onto the seven states, the table is the diagram in core/offload/offloader.h.
TEST(OffloadMachineTest, ProjectedOntoTheStatesItIsTheHeadersDiagram) {
  using S = OffloadState;
  const std::set<std::pair<S, S>> diagram = {
      {S::kResident, S::kSaving},     // idle timer (or offload_now)
      {S::kSaving, S::kDisk},         // written + synced, memory released
      {S::kSaving, S::kResident},     // a command arrives; the write or release fails
      {S::kDisk, S::kRestoring},      // a command arrives
      {S::kRestoring, S::kResident},  // restored, or history discarded
      {S::kRestoring, S::kDisk},      // out of memory (snapshot kept), or memory lost
      {S::kDisk, S::kExpired},        // expiry: the file is deleted
      {S::kExpired, S::kRestoring},   // a command: a fresh session
      {S::kRestoring, S::kExpired},   // out of memory after expiry
      {S::kSaving, S::kRam},          // copied to the RAM tier, memory released
      {S::kRam, S::kRestoring},       // a command arrives
      {S::kRestoring, S::kRam},       // out of memory (the RAM copy kept)
      {S::kRam, S::kExpired},         // expiry: the RAM copy given back
      {S::kRam, S::kDisk},            // spilled to disk to make room in the tier
  };
  std::set<std::pair<S, S>> projected;
  for (const Transition& t : transitions()) {
    if (state_of(t.from) != state_of(t.to)) projected.emplace(state_of(t.from), state_of(t.to));
  }
  EXPECT_EQ(projected, diagram);
}

TEST(OffloadMachineTest, ApplyMovesAlongTheTable) {
  OffloadMachine machine(Phase::kResident);
  std::string rejected;
  for (Event e : {Event::kSaveDue, Event::kMemoryRead, Event::kFileDurable, Event::kReleased,
                  Event::kCommandArrives, Event::kRestored, Event::kCommandEnds}) {
    ASSERT_TRUE(machine.apply(e, &rejected)) << event_name(e);
  }
  EXPECT_EQ(machine.phase(), Phase::kResident);
  EXPECT_TRUE(rejected.empty());
}

#ifdef NDEBUG
TEST(OffloadMachineTest, AnIllegalEventIsReportedAndThePhaseKept) {
  OffloadMachine machine(Phase::kSaveReleasing);
  std::string rejected;
  EXPECT_FALSE(machine.apply(Event::kCommandArrives, &rejected));
  EXPECT_EQ(machine.phase(), Phase::kSaveReleasing);
  EXPECT_EQ(rejected,
            "internal error: offload event command_arrives is not allowed in phase "
            "save_releasing (state saving); the phase is kept");
}
#else
TEST(OffloadMachineDeathTest, AnIllegalEventAbortsNamingPhaseAndEvent) {
  EXPECT_DEATH(
      {
        OffloadMachine machine(Phase::kSaveReleasing);
        (void)machine.apply(Event::kCommandArrives, nullptr);
      },
      "offload event command_arrives is not allowed in phase save_releasing \\(state saving\\)");
}
#endif

}  // namespace
}  // namespace siesta::offload
