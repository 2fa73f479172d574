#include "base/error.h"

#include <cstring>

namespace chorus {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::PeerLost: return "PeerLost";
    case ErrorCode::Mismatch: return "Mismatch";
    case ErrorCode::Aborted: return "Aborted";
    case ErrorCode::Internal: return "Internal";
    case ErrorCode::SystemError: return "SystemError";
    case ErrorCode::Unavailable: return "Unavailable";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message, int peer)
    : std::runtime_error("chorus: " + message + " [" + to_string(code) + "]"),
      code_(code),
      peer_(peer),
      message_(message) {}

namespace base {

void throw_error(ErrorCode code, const std::string& message, int peer) { throw Error(code, message, peer); }

void throw_errno(const std::string& what, int err) {
  throw Error(ErrorCode::SystemError, what + ": " + std::strerror(err));
}

}  // namespace base
}  // namespace chorus
