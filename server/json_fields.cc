#include "server/json_fields.h"

#include <cmath>
#include <cstdio>
#include <exception>

#include "core/base/log_text.h"

namespace siesta::server {

using nlohmann::json;

// The failure of one field: InvalidArgument "<param>: <why>", and detail->param = param.
Status bad_field(ErrorDetail* detail, const std::string& param, const std::string& why) {
  if (detail != nullptr) detail->param = param;
  return InvalidArgument(param + ": " + why);
}

// A field of `object`; null when absent or JSON null (OpenAI treats null as "not given").
const json* field(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string_view type_name(const json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();  // "string", "array", "object", "boolean", "null"
}

Status wrong_type(ErrorDetail* detail, const std::string& param, std::string_view expected,
                  const json& value) {
  return bad_field(detail, param,
                   "expected " + std::string(expected) + ", got " + std::string(type_name(value)));
}

Status refuse_unknown_fields(const json& body, std::initializer_list<std::string_view> known,
                             ErrorDetail* detail) {
  for (const auto& [name, value] : body.items()) {
    bool listed = false;
    for (std::string_view k : known) listed = listed || k == name;
    if (!listed) return bad_field(detail, name, "this field is not served by this server");
  }
  return Status::Ok();
}

namespace {

// 0.5 -> "0.5", 2 -> "2": a bound as a client writes it.
std::string bound_text(double x) {
  char text[32];
  (void)std::snprintf(text, sizeof text, "%g", x);
  return text;
}

}  // namespace

Result<double> number_in(const json& body, const char* name, double lo, double hi, bool open_low,
                         ErrorDetail* detail) {
  const json* value = field(body, name);
  if (value == nullptr) return bad_field(detail, name, "missing");
  if (!value->is_number()) return wrong_type(detail, name, "a number", *value);
  const double x = value->get<double>();
  if (!std::isfinite(x) || x > hi || (open_low ? x <= lo : x < lo)) {
    return bad_field(detail, name,
                     "must be within " + std::string(open_low ? "(" : "[") + bound_text(lo) + ", " +
                         bound_text(hi) + "], got " + value->dump());
  }
  return x;
}

Result<int64_t> integer_in(const json& body, const char* name, int64_t lo, int64_t hi,
                           ErrorDetail* detail) {
  const json* value = field(body, name);
  if (value == nullptr) return bad_field(detail, name, "missing");
  if (!value->is_number_integer()) return wrong_type(detail, name, "an integer", *value);
  const bool too_big =
      value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t x = too_big ? INT64_MAX : value->get<int64_t>();
  if (too_big || x < lo || x > hi) {
    return bad_field(detail, name,
                     "must be within [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "], got " + value->dump());
  }
  return x;
}

Result<bool> boolean_of(const json& body, const char* name, ErrorDetail* detail) {
  const json* value = field(body, name);
  if (value == nullptr) return bad_field(detail, name, "missing");
  if (!value->is_boolean()) return wrong_type(detail, name, "a boolean", *value);
  return value->get<bool>();
}

Result<json> parse_object(std::string_view body, ErrorDetail* detail) {
  // nlohmann's lexer takes a NUL byte for the end of its input, so "{...}\0junk" would parse
  // as "{...}"; JSON text never holds a raw NUL (RFC 8259: control characters are escaped).
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return InvalidArgument("the request body is not valid JSON: a NUL byte at offset " +
                           std::to_string(nul));
  }
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end());
  } catch (const std::exception& e) {
    // nlohmann's message names the position; it may quote input bytes, so quote it whole.
    return InvalidArgument("the request body is not valid JSON: " + quote_for_log(e.what()));
  }
  if (!parsed.is_object()) {
    if (detail != nullptr) detail->param.clear();
    return InvalidArgument("the request body must be a JSON object, got " +
                           std::string(type_name(parsed)));
  }
  return parsed;
}

// Any name is served (the server has one model, as llama-server, which ignores the name: every
// SDK sends one); only its type is checked.
Status parse_stop_strings(const json& body, const char* name, size_t max_count, size_t max_bytes,
                          std::vector<std::string>* stop, ErrorDetail* detail) {
  const json* value = field(body, name);
  if (value == nullptr) return Status::Ok();
  std::vector<const json*> items;
  if (value->is_string()) {
    items.push_back(value);
  } else if (value->is_array()) {
    for (const json& item : *value) items.push_back(&item);
  } else {
    return wrong_type(detail, name, "a string or an array of strings", *value);
  }
  if (items.size() > max_count) {
    return bad_field(detail, name,
                     "at most " + std::to_string(max_count) + " stop strings are accepted, got " +
                         std::to_string(items.size()));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string param =
        value->is_array() ? std::string(name) + "[" + std::to_string(i) + "]" : std::string(name);
    if (!items[i]->is_string()) return wrong_type(detail, param, "a string", *items[i]);
    const std::string& s = items[i]->get_ref<const std::string&>();
    if (s.empty() || s.size() > max_bytes) {
      return bad_field(detail, param,
                       "must have 1 to " + std::to_string(max_bytes) + " bytes, got " +
                           std::to_string(s.size()));
    }
    stop->push_back(s);
  }
  return Status::Ok();
}

Result<std::string> parse_text_content(const json& value, const std::string& param,
                                       ErrorDetail* detail) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) return wrong_type(detail, param, "a string or an array of parts", value);
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string part = param + "[" + std::to_string(i) + "]";
    const json& item = value[i];
    if (!item.is_object()) return wrong_type(detail, part, "an object", item);
    const json* type = field(item, "type");
    if (type == nullptr || !type->is_string() || *type != "text") {
      return bad_field(detail, part + ".type", "only \"text\" parts are served");
    }
    const json* piece = field(item, "text");
    if (piece == nullptr) return bad_field(detail, part + ".text", "missing");
    if (!piece->is_string()) return wrong_type(detail, part + ".text", "a string", *piece);
    text += piece->get_ref<const std::string&>();
  }
  return text;
}

Status expect_value(const json& body, const char* name, const json& served, const char* why,
                    ErrorDetail* detail) {
  const json* value = field(body, name);
  if (value == nullptr || *value == served) return Status::Ok();
  return bad_field(detail, name, std::string(why) + ", got " + value->dump());
}

Status refuse_tools(const json& body, ErrorDetail* detail) {
  SIESTA_RETURN_IF_ERROR(
      expect_value(body, "tools", json::array(), "tools are not served by this server", detail));
  if (const json* choice = field(body, "tool_choice");
      choice != nullptr && *choice != "none" && *choice != "auto") {
    return bad_field(detail, "tool_choice",
                     "tools are not served (only \"none\" or \"auto\"), got " + choice->dump());
  }
  return Status::Ok();
}

}  // namespace siesta::server
