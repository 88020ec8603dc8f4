// Identifiers a client cannot guess: "<prefix><hex>" from OpenSSL's random generator (never a
// seeded Mersenne twister, whose next outputs follow from a few observed ones). Response and
// message ids use them; where an id names a kept conversation (the Responses API's
// previous_response_id), guessing one would let a client continue another's conversation.
//
// Thread rule: any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace siesta::server {

// `prefix` followed by 2 x `bytes` lower-case hex digits of fresh randomness. Should the
// generator fail (it does not on a working system), the process aborts rather than hand out
// a predictable id.
std::string random_id(std::string_view prefix, size_t bytes = 12);

}  // namespace siesta::server
