// How a slot action's failure is answered (POST /slots/0?action=save|restore|erase with a
// filename). A slot file is the client's input, so a file that cannot be restored for what
// it is -- damaged, cut short, of another model or format version, not a regular file -- is
// the client's 4xx, not the server's 500; and no message names a path other than the file
// name the client sent: the server's directories (--slot-save-path, whose absolute path the
// engine's messages carry) are not the client's business. The engine's own message goes to
// the server's log for a 5xx, where an operator needs it.
//
//   400 invalid_request_error  InvalidArgument (a bad name), Corrupt, Truncated, Foreign,
//                              Unsupported, NotFound, Expired (an export past a deadline it was
//                              given: llama-server answers every failed restore 400); on restore
//                              FailedPrecondition (the name holds a symlink, directory, FIFO or
//                              device, refused without blocking)
//   503 + Retry-After          OutOfMemory (the session cannot be restored now; retry)
//   503                        Cancelled (the server is shutting down)
//   507                        NoSpace (the export does not fit)
//   500 server_error           anything else (IoError, DeviceError, Internal...)
// `code` is status_code_name() of the code; `param` is "filename" for a 4xx.
//
// Thread rule: a pure function.
#pragma once

#include <string_view>

#include "core/base/status.h"
#include "server/api_error.h"

namespace siesta::server {

enum class SlotAction { kSave, kRestore, kErase };

// REQUIRES: !status.ok(). `filename` is the name the client sent (already validated).
ApiError slot_api_error(const Status& status, SlotAction action, std::string_view filename);

}  // namespace siesta::server
