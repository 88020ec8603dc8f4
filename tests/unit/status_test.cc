#include "core/base/status.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>

#include "core/base/os_error.h"

namespace siesta {
namespace {

Result<int> parse_positive(int value) {
  if (value <= 0) return InvalidArgument("not positive: " + std::to_string(value));
  return value;
}

Result<int> doubled_positive(int value) {
  SIESTA_ASSIGN_OR_RETURN(int checked, parse_positive(value));
  return checked * 2;
}

Status check_both(int a, int b) {
  SIESTA_RETURN_IF_ERROR(parse_positive(a).status());
  SIESTA_RETURN_IF_ERROR(parse_positive(b).status());
  return Status::Ok();
}

TEST(StatusTest, OkByDefaultAndPrintsOk) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.to_string(), "ok");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status status = Truncated("snapshot ends at byte 12");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kTruncated);
  EXPECT_EQ(status.to_string(), "truncated: snapshot ends at byte 12");
  EXPECT_EQ(status.with_context("restore").to_string(),
            "truncated: restore: snapshot ends at byte 12");
  EXPECT_EQ(status.with_context("restore").code(), StatusCode::kTruncated);
}

TEST(StatusTest, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (int code = 0; code <= static_cast<int>(StatusCode::kUnavailable); ++code) {
    std::string_view name = status_code_name(static_cast<StatusCode>(code));
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
}

TEST(ResultTest, HoldsValueOrError) {
  Result<int> good = parse_positive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad = parse_positive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.value_or(7), 7);
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternal) {
  Result<int> odd{Status::Ok()};
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> boxed = std::make_unique<int>(5);
  ASSERT_TRUE(boxed.ok());
  std::unique_ptr<int> taken = std::move(boxed).value();
  EXPECT_EQ(*taken, 5);
}

TEST(ResultTest, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*doubled_positive(4), 8);
  EXPECT_EQ(doubled_positive(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, -2).message(), "not positive: -2");
}

TEST(ResultDeathTest, ValueOfAnErrorAbortsWithTheStatus) {
  Result<int> bad = NotFound("no such session");
  EXPECT_DEATH((void)bad.value(), "not_found: no such session");
}

TEST(OsErrorTest, MapsErrnoOnceToNamedCodes) {
  EXPECT_EQ(status_from_errno(ENOENT, "open x").code(), StatusCode::kNotFound);
  EXPECT_EQ(status_from_errno(ENOSPC, "write x").code(), StatusCode::kNoSpace);
  EXPECT_EQ(status_from_errno(EDQUOT, "write x").code(), StatusCode::kNoSpace);
  EXPECT_EQ(status_from_errno(ENOMEM, "mmap").code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(status_from_errno(EIO, "read x").code(), StatusCode::kIoError);
  EXPECT_EQ(status_from_errno(ELOOP, "open link").code(), StatusCode::kFailedPrecondition);
  Status status = status_from_errno(EIO, "read /a/b");
  EXPECT_NE(status.message().find("read /a/b"), std::string::npos);
  EXPECT_NE(status.message().find(std::strerror(EIO)), std::string::npos);
}

}  // namespace
}  // namespace siesta
