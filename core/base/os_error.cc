#include "core/base/os_error.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace siesta {

Status status_from_errno(int err, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += std::strerror(err);
  switch (err) {
    case ENOENT: return NotFound(std::move(message));
    case ENOSPC:
    case EDQUOT: return NoSpace(std::move(message));
    case ENOMEM: return OutOfMemory(std::move(message));
    case EINVAL:
    case ENAMETOOLONG: return InvalidArgument(std::move(message));
    case EEXIST:
    case ELOOP:
    case EACCES:
    case EPERM: return FailedPrecondition(std::move(message));
    default: return IoError(std::move(message));
  }
}

}  // namespace siesta
