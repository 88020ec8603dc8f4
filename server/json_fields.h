// Reading a request body's fields, for every API the server speaks (OpenAI's, llama-server's,
// Anthropic's): the body as one JSON object, a field (absent and JSON null alike), and the
// failures a client's field earns, each InvalidArgument "<param>: <why>" with
// ErrorDetail::param naming the field, so that every API words its 400s the same way.
//
// Thread rule: pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "server/api_error.h"

namespace siesta::server {

// The failure of one field: InvalidArgument "<param>: <why>", and detail->param = param (when
// `detail` is not null).
Status bad_field(ErrorDetail* detail, const std::string& param, const std::string& why);

// A field of `object`; null when absent or JSON null (OpenAI treats null as "not given").
const nlohmann::json* field(const nlohmann::json& object, const char* name);

// "integer", "number", "string", "array", "object", "boolean", "null".
std::string_view type_name(const nlohmann::json& value);

// bad_field(... "expected <expected>, got <type>").
Status wrong_type(ErrorDetail* detail, const std::string& param, std::string_view expected,
                  const nlohmann::json& value);

// A field accepted only at the value that serves the request as this server does (`served`);
// another value is an option the server lacks: bad_field(name, "<why>, got <value>"). Absent:
// OK.
Status expect_value(const nlohmann::json& body, const char* name, const nlohmann::json& served,
                    const char* why, ErrorDetail* detail);

// OpenAI's tools, which no API here serves: "tools" only empty, "tool_choice" only "none" or
// "auto". Failure: bad_field naming the field.
Status refuse_tools(const nlohmann::json& body, ErrorDetail* detail);

// The first field of `body` whose name is not in `known`: bad_field(name, "this field is not
// served by this server"), so that a client learns of an option it thought it used rather than
// get an answer made without it. Ok when every field is known.
Status refuse_unknown_fields(const nlohmann::json& body,
                             std::initializer_list<std::string_view> known, ErrorDetail* detail);

// Field `name` of `body`, which must be present: a finite number within [lo, hi] (lo itself
// excluded when `open_low`). Failure: wrong_type, or bad_field naming the range and the value.
Result<double> number_in(const nlohmann::json& body, const char* name, double lo, double hi,
                         bool open_low, ErrorDetail* detail);

// Field `name` of `body`, which must be present: an integer within [lo, hi]. Failure:
// wrong_type, or bad_field naming the range and the value.
Result<int64_t> integer_in(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi,
                           ErrorDetail* detail);

// Field `name` of `body`, which must be present: a boolean. Failure: wrong_type.
Result<bool> boolean_of(const nlohmann::json& body, const char* name, ErrorDetail* detail);

// The body as a JSON object. Failure: InvalidArgument for a NUL byte (nlohmann's lexer would
// stop there), text that is not JSON (the parser's message quoted), or another JSON value than
// an object. nlohmann's parser refuses invalid UTF-8 and lone surrogates.
Result<nlohmann::json> parse_object(std::string_view body, ErrorDetail* detail);

// `name` as stop strings: a string or an array of at most `max_count` strings, each 1..`max_bytes`
// bytes, appended to *stop. Absent: nothing. Failure: bad_field naming the field or its item.
Status parse_stop_strings(const nlohmann::json& body, const char* name, size_t max_count,
                          size_t max_bytes, std::vector<std::string>* stop, ErrorDetail* detail);

// Text content: a string, or an array of {"type": "text", "text": string} parts,
// concatenated. Failure: bad_field naming the part (`param`[i].type for another kind of part:
// an image, a tool call...: only text is served).
Result<std::string> parse_text_content(const nlohmann::json& value, const std::string& param,
                                       ErrorDetail* detail);

}  // namespace siesta::server
