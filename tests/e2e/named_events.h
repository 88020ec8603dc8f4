// Server-sent events with a name (Anthropic's Messages and OpenAI's Responses streams): each
// event one "event: NAME" line and one "data: JSON-object" line. The e2e tests of both APIs
// split a whole text/event-stream body with parse_named_events() and print a list with
// describe_events().
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace siesta::testing {

// One event: its name and its data, parsed.
// (Its implicit moves are nlohmann::json's and std::string's, both noexcept; clang-tidy 14
// flags the implicit member functions anyway.)
// NOLINTNEXTLINE(bugprone-exception-escape)
struct NamedEvent {
  std::string name;
  nlohmann::json data;
};

// Splits a whole text/event-stream body into its events, in order. Each must have one
// "event:" line and one "data:" line holding a JSON object (the test fails otherwise).
inline std::vector<NamedEvent> parse_named_events(const std::string& body) {
  std::vector<NamedEvent> events;
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find("\n\n", start);
    if (end == std::string::npos) end = body.size();
    const std::string block = body.substr(start, end - start);
    start = end + 2;
    if (block.find_first_not_of("\r\n") == std::string::npos) continue;
    NamedEvent event;
    std::optional<std::string> data;
    size_t line_start = 0;
    while (line_start <= block.size()) {
      size_t line_end = block.find('\n', line_start);
      if (line_end == std::string::npos) line_end = block.size();
      const std::string line = block.substr(line_start, line_end - line_start);
      line_start = line_end + 1;
      if (line.rfind("event: ", 0) == 0) {
        EXPECT_TRUE(event.name.empty()) << "two event lines: " << block;
        event.name = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        EXPECT_FALSE(data.has_value()) << "two data lines: " << block;
        data = line.substr(6);
      } else if (!line.empty()) {
        ADD_FAILURE() << "a line that is neither event nor data: \"" << line << "\"";
      }
    }
    EXPECT_FALSE(event.name.empty()) << "an event without its name: " << block;
    EXPECT_TRUE(data.has_value()) << "an event without data: " << block;
    event.data = nlohmann::json::parse(data.value_or(""), nullptr, false);
    EXPECT_TRUE(event.data.is_object()) << "data that is not a JSON object: " << block;
    events.push_back(std::move(event));
  }
  return events;
}

// One line per event, "  NAME DATA", for a failure's message.
inline std::string describe_events(const std::vector<NamedEvent>& events) {
  std::string out;
  for (const NamedEvent& event : events) {
    out += "  " + event.name + " " + event.data.dump() + "\n";
  }
  return out;
}

}  // namespace siesta::testing
