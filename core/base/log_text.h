// Text that came from outside (flags, file names, request fields) is echoed in error messages
// and log lines; quoting it here keeps every message one line and free of control bytes,
// whatever the input held.
#pragma once

#include <string>
#include <string_view>

namespace siesta {

// `text` in double quotes, with '"' and '\' escaped, and control bytes and DEL written as
// \n, \t, \r or \xNN. Bytes >= 0x80 pass through (UTF-8 names stay readable).
std::string quote_for_log(std::string_view text);

}  // namespace siesta
