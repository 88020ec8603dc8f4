#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace siesta::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(char byte) {
  if (finished_) return {};
  held_.push_back(byte);
  const std::string_view text = held_;

  // A stop completing here: of those that do, the longest starts earliest, so cutting before
  // it gives the earliest occurrence, as a non-incremental search of the whole text would.
  size_t best = 0;
  for (const std::string& s : stops_) {
    if (s.size() <= text.size() && text.ends_with(s)) best = std::max(best, s.size());
  }
  if (best > 0) {
    finished_ = true;
    matched_ = std::string(text.substr(text.size() - best));
    std::string out(text.substr(0, text.size() - best));
    held_.clear();
    return out;
  }

  // Keep the longest suffix that some stop string could still complete.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t limit = std::min(text.size(), s.size() - 1);
    for (size_t n = limit; n > keep; --n) {
      if (std::string_view(s).substr(0, n) == text.substr(text.size() - n)) {
        keep = n;
        break;
      }
    }
  }
  std::string out(text.substr(0, text.size() - keep));
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (finished_) return {};
  return std::exchange(held_, {});
}

}  // namespace siesta::engine
