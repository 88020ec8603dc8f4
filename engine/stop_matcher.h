// StopMatcher: incremental stop-string matching over generated text, one byte at a time, with
// hold-back, so that a streaming client never receives a byte that later turns out to be the
// start of a stop string.
//
// Semantics (OpenAI's): generation ends at the first place where any stop string completes,
// and the text returned excludes that stop string and everything after it. While the end of
// the text could still be the beginning of a stop string, those bytes are held back; they are
// released as soon as they can no longer be part of a match, or by flush() when generation
// ends for another reason (length, cancellation).
//
// Invariant between calls: the held-back bytes are the longest suffix of the text pushed so
// far that is a proper prefix of some stop string. A stop string completing at the newest
// byte therefore always starts inside held-back + that byte, which is why one buffer of at
// most (longest stop - 1) bytes is all the state needed.
//
// With no stop strings every byte is released at once.
//
// Thread rule: plain value; one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace siesta::engine {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored (they would match before any text); the engine
  // rejects them before it gets here.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends one byte of generated text. Returns the bytes now safe to emit, in order (possibly
  // none). When this byte completes a stop string, returns the text before the stop string
  // that was still held back, and finished() turns true.
  // REQUIRES: !finished() (a push after the end returns nothing and changes nothing).
  std::string push(char byte);

  // True once a stop string has completed; the emitted text then never contains it.
  bool finished() const { return finished_; }

  // The stop string that completed (empty unless finished()).
  const std::string& matched() const { return matched_; }

  // Releases the held-back bytes (generation ended without a stop match). Returns nothing
  // after finished(): held-back bytes were part of the stop string.
  std::string flush();

  // Bytes currently held back (tests and diagnostics).
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool finished_ = false;
};

}  // namespace siesta::engine
