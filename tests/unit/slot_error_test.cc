// How a slot action's failure is answered (server/slot_error.h): a damaged, cut, foreign,
// other-version, non-regular or missing slot file is the client's 400 (as llama-server's), no space
// 507, no memory 503 with Retry-After; and no answer repeats the engine's message, which names the
// server's directory: only the file name the client sent appears.
#include "server/slot_error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace siesta::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecretDir[] = "/srv/private/slots";

// A status as the engine returns it: its message names the absolute path.
Status engine_status(StatusCode code) {
  return Status(code, std::string("snapshot \"") + kSecretDir + "/conv-1\": something is wrong");
}

TEST(SlotErrorTest, EachReaderOutcomeHasItsStatusAndNoServerPath) {
  struct Case {
    StatusCode code;
    SlotAction action;
    int http_status;
  };
  const Case cases[] = {
      {StatusCode::kCorrupt, SlotAction::kRestore, 400},
      {StatusCode::kTruncated, SlotAction::kRestore, 400},
      {StatusCode::kForeign, SlotAction::kRestore, 400},
      {StatusCode::kUnsupported, SlotAction::kRestore, 400},
      {StatusCode::kFailedPrecondition, SlotAction::kRestore, 400},  // FIFO, symlink, directory
      {StatusCode::kInvalidArgument, SlotAction::kSave, 400},
      {StatusCode::kNotFound, SlotAction::kRestore, 400},
      {StatusCode::kNotFound, SlotAction::kErase, 400},
      {StatusCode::kExpired, SlotAction::kRestore, 400},
      {StatusCode::kNoSpace, SlotAction::kSave, 507},
      {StatusCode::kOutOfMemory, SlotAction::kRestore, 503},
      {StatusCode::kUnavailable, SlotAction::kSave, 503},
      {StatusCode::kCancelled, SlotAction::kSave, 503},
      {StatusCode::kIoError, SlotAction::kRestore, 500},
      {StatusCode::kDeviceError, SlotAction::kRestore, 500},
      {StatusCode::kInternal, SlotAction::kSave, 500},
      {StatusCode::kFailedPrecondition, SlotAction::kSave, 500},  // the server's directory
  };
  for (const Case& c : cases) {
    const std::string what = std::string(status_code_name(c.code));
    const ApiError error = slot_api_error(engine_status(c.code), c.action, "conv-1");
    EXPECT_EQ(error.http_status, c.http_status) << what;
    EXPECT_THAT(error.message, HasSubstr("slot file \"conv-1\"")) << what;
    EXPECT_THAT(error.message, Not(HasSubstr(kSecretDir))) << what;
    EXPECT_THAT(error.message, Not(HasSubstr("something is wrong"))) << what;
    EXPECT_EQ(error.code, what);
    if (c.http_status < 500) {
      EXPECT_EQ(error.type, "invalid_request_error") << what;
      EXPECT_EQ(error.param, "filename") << what;
    } else {
      EXPECT_EQ(error.type, "server_error") << what;
      EXPECT_EQ(error.param, "") << what;
    }
    EXPECT_EQ(error.retry_after_seconds,
              c.code == StatusCode::kOutOfMemory || c.code == StatusCode::kUnavailable ? 1 : 0)
        << what;
  }
}

TEST(SlotErrorTest, TheNameIsQuotedAsALogLine) {
  const ApiError error = slot_api_error(Corrupt("x"), SlotAction::kRestore, "a.b-c_9");
  EXPECT_EQ(error.message,
            "cannot restore slot file \"a.b-c_9\": it is damaged (a seal or its grammar does not "
            "check)");
}

}  // namespace
}  // namespace siesta::server
