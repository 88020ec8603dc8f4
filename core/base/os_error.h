// The one place where errno values become siesta Status codes.
#pragma once

#include <string_view>

#include "core/base/status.h"

namespace siesta {

// Maps `err` (an errno value) to a Status whose message is "<what>: <strerror(err)>".
// ENOENT -> NotFound, ENOSPC/EDQUOT -> NoSpace, ENOMEM -> OutOfMemory,
// EINVAL/ENAMETOOLONG -> InvalidArgument, EEXIST/ELOOP/EACCES/EPERM -> FailedPrecondition,
// anything else -> IoError.
Status status_from_errno(int err, std::string_view what);

}  // namespace siesta
