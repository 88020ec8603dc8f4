// The byte tokenizer: one token per byte, so any text round-trips exactly and the vocabulary
// is kVocabSize. Also the strict UTF-8 check the command loop applies to client strings.
//
// Thread rule: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_config.h"
#include "engine/session.h"

namespace siesta::engine {

// One token per byte, in order. Never fails.
inline std::vector<Token> encode(std::string_view text) {
  std::vector<Token> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<Token>(text[i]);
  return tokens;
}

// The bytes of `tokens`, in order (the inverse of encode()). Never fails.
inline std::string decode(std::span<const Token> tokens) {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) text[i] = static_cast<char>(tokens[i]);
  return text;
}

// True for the tokens greedy decoding may produce (printable ASCII, kFirstPrintable ..
// kLastPrintable).
inline constexpr bool is_printable(Token token) {
  return token >= kFirstPrintable && token <= kLastPrintable;
}

// Strict UTF-8 (RFC 3629): shortest forms only, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF, no truncated sequence. The empty string is valid.
inline constexpr bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<uint8_t>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    uint32_t minimum = 0;
    if ((lead & 0xe0) == 0xc0) {
      length = 2, code = lead & 0x1fu, minimum = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3, code = lead & 0x0fu, minimum = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4, code = lead & 0x07u, minimum = 0x10000;
    } else {
      return false;  // a continuation byte without a lead, or 0xf8..0xff
    }
    if (text.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3fu);
    }
    if (code < minimum) return false;                    // overlong
    if (code >= 0xd800 && code <= 0xdfff) return false;  // surrogate
    if (code > 0x10ffff) return false;
    i += length;
  }
  return true;
}

}  // namespace siesta::engine
