#include "server/slot_error.h"

#include <string>

#include "core/base/log_text.h"

namespace siesta::server {
namespace {

std::string_view verb(SlotAction action) {
  switch (action) {
    case SlotAction::kSave: return "save";
    case SlotAction::kRestore: return "restore";
    case SlotAction::kErase: return "erase";
  }
  return "use";
}

ApiError client_error(int http_status, std::string message, const Status& status) {
  ApiError error;
  error.http_status = http_status;
  error.message = std::move(message);
  error.type = "invalid_request_error";
  error.param = "filename";
  error.code = std::string(status_code_name(status.code()));
  return error;
}

ApiError server_error(int http_status, std::string message, const Status& status) {
  ApiError error;
  error.http_status = http_status;
  error.message = std::move(message);
  error.code = std::string(status_code_name(status.code()));
  return error;
}

}  // namespace

ApiError slot_api_error(const Status& status, SlotAction action, std::string_view filename) {
  const std::string file = "slot file " + quote_for_log(filename);
  const std::string cannot = "cannot " + std::string(verb(action)) + " " + file;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return client_error(400, cannot + ": the request is not valid for it", status);
    case StatusCode::kCorrupt:
      return client_error(400, cannot + ": it is damaged (a seal or its grammar does not check)",
                          status);
    case StatusCode::kTruncated: return client_error(400, cannot + ": it is cut short", status);
    case StatusCode::kForeign:
      return client_error(
          400, cannot + ": it was saved for another model or configuration, or is not a slot file",
          status);
    case StatusCode::kUnsupported:
      return client_error(400, cannot + ": it was written in another snapshot format version",
                          status);
    case StatusCode::kNotFound: return client_error(400, file + " does not exist", status);
    case StatusCode::kExpired: return client_error(400, file + " has expired", status);
    case StatusCode::kFailedPrecondition:
      if (action == SlotAction::kRestore) {
        return client_error(400,
                            cannot +
                                ": it is not a regular file this server can read (a "
                                "symlink, directory, FIFO or device)",
                            status);
      }
      break;
    case StatusCode::kNoSpace:
      return server_error(507, cannot + ": not enough storage space", status);
    case StatusCode::kOutOfMemory: {
      ApiError error =
          server_error(503, cannot + ": not enough memory for the session now; retry", status);
      error.retry_after_seconds = kRetryAfterSeconds;
      return error;
    }
    case StatusCode::kUnavailable: {
      ApiError error = server_error(503, cannot + ": the server is busy now; retry", status);
      error.retry_after_seconds = kRetryAfterSeconds;
      return error;
    }
    case StatusCode::kCancelled:
      return server_error(503, cannot + ": the server is shutting down", status);
    default: break;
  }
  return server_error(500,
                      cannot + " (" + std::string(status_code_name(status.code())) +
                          "); the server's log has the details",
                      status);
}

}  // namespace siesta::server
