// The field readers every API's request parsing shares (server/json_fields.h), each alone:
// what a missing field, a field of another type and a value out of range say, with and without
// an ErrorDetail to fill, and the text content's parts.
#include "server/json_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace siesta::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The param `call` names in its ErrorDetail, and that it fails with InvalidArgument; the same
// call without a detail fails the same way.
template <typename Call>
std::string refused(Call call) {
  ErrorDetail detail;
  detail.param = "stale";
  const Status with_detail = call(&detail).status();
  EXPECT_EQ(with_detail.code(), StatusCode::kInvalidArgument) << with_detail.to_string();
  const Status without = call(nullptr).status();
  EXPECT_EQ(without.code(), with_detail.code());
  EXPECT_EQ(without.message(), with_detail.message());
  return detail.param;
}

TEST(JsonFieldsTest, NumbersAreReadWithinTheirBounds) {
  const json body = {{"t", 0.5}, {"low", 0.0}, {"s", "0.5"}, {"big", 3.0}};
  auto number = [&](const char* name, bool open_low) {
    return [&body, name, open_low](ErrorDetail* detail) {
      return number_in(body, name, 0.0, 2.0, open_low, detail);
    };
  };
  EXPECT_EQ(*number("t", false)(nullptr), 0.5);
  EXPECT_EQ(*number("low", false)(nullptr), 0.0) << "the low bound itself, when closed";
  EXPECT_EQ(refused(number("low", true)), "low") << "excluded when open";
  EXPECT_EQ(refused(number("missing", false)), "missing");
  EXPECT_EQ(refused(number("s", false)), "s");
  EXPECT_EQ(refused(number("big", false)), "big");
  EXPECT_THAT(number_in(body, "big", 0.0, 2.0, true, nullptr).status().message(),
              HasSubstr("must be within (0, 2], got 3.0"));
}

TEST(JsonFieldsTest, IntegersAreReadWithinTheirBoundsAndNeverWrapAround) {
  const json body = {{"n", 7},
                     {"neg", -4},
                     {"f", 7.5},
                     {"huge", std::numeric_limits<uint64_t>::max()},
                     {"text", "7"}};
  auto integer = [&](const char* name) {
    return [&body, name](ErrorDetail* detail) { return integer_in(body, name, -5, 10, detail); };
  };
  EXPECT_EQ(*integer("n")(nullptr), 7);
  EXPECT_EQ(*integer("neg")(nullptr), -4);
  EXPECT_EQ(refused(integer("missing")), "missing");
  EXPECT_EQ(refused(integer("f")), "f");
  EXPECT_EQ(refused(integer("text")), "text");
  EXPECT_EQ(refused(integer("huge")), "huge") << "above INT64_MAX: refused, not wrapped";
  EXPECT_EQ(refused([&](ErrorDetail* detail) { return integer_in(body, "neg", 0, 10, detail); }),
            "neg");
  EXPECT_THAT(integer_in(body, "n", 0, 3, nullptr).status().message(),
              HasSubstr("must be within [0, 3], got 7"));
}

TEST(JsonFieldsTest, BooleansAreBooleansOnly) {
  const json body = {{"yes", true}, {"one", 1}, {"null", nullptr}};
  EXPECT_TRUE(*boolean_of(body, "yes", nullptr));
  EXPECT_EQ(refused([&](ErrorDetail* d) { return boolean_of(body, "one", d); }), "one");
  EXPECT_EQ(refused([&](ErrorDetail* d) { return boolean_of(body, "null", d); }), "null")
      << "null is \"not given\", and this field must be given";
}

TEST(JsonFieldsTest, ABodyIsOneJsonObjectWithNoNulByte) {
  EXPECT_TRUE(parse_object(R"({"a": 1})", nullptr).ok());
  const std::string with_nul("{\"a\": 1}\0junk", 13);
  Result<json> nul = parse_object(with_nul, nullptr);
  ASSERT_FALSE(nul.ok());
  EXPECT_THAT(nul.status().message(), HasSubstr("a NUL byte at offset 8"));
  EXPECT_THAT(parse_object("{\"a\": ", nullptr).status().message(), HasSubstr("not valid JSON"));
  ErrorDetail detail;
  detail.param = "stale";
  Result<json> array = parse_object("[1]", &detail);
  ASSERT_FALSE(array.ok());
  EXPECT_THAT(array.status().message(), HasSubstr("must be a JSON object, got array"));
  EXPECT_EQ(detail.param, "") << "no field to name";
  EXPECT_FALSE(parse_object("\"text\"", nullptr).ok());
}

TEST(JsonFieldsTest, TextContentIsAStringOrTextPartsOnly) {
  EXPECT_EQ(*parse_text_content("plain", "content", nullptr), "plain");
  const json parts =
      json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}});
  EXPECT_EQ(*parse_text_content(parts, "content", nullptr), "ab");
  auto text_of = [](const json& value) {
    return [value](ErrorDetail* detail) { return parse_text_content(value, "content", detail); };
  };
  EXPECT_EQ(refused(text_of(42)), "content");
  EXPECT_EQ(refused(text_of(json::array({"a"}))), "content[0]");
  EXPECT_EQ(refused(text_of(json::array({{{"type", "image_url"}}}))), "content[0].type");
  EXPECT_EQ(refused(text_of(json::array({{{"text", "a"}}}))), "content[0].type");
  EXPECT_EQ(refused(text_of(json::array({{{"type", 1}}}))), "content[0].type");
  EXPECT_EQ(refused(text_of(json::array({{{"type", "text"}}}))), "content[0].text");
  EXPECT_EQ(refused(text_of(json::array({{{"type", "text"}, {"text", 3}}}))), "content[0].text");
}

}  // namespace
}  // namespace siesta::server
