// Errors. Every public call reports failure by throwing chorus::Error.
#pragma once

#include <stdexcept>
#include <string>

#include "chorus/export.h"

namespace chorus {

enum class ErrorCode {
  InvalidArgument,  // bad input: nothing was sent and the communicator stays usable
  Timeout,          // a wait passed its deadline (CommOptions::timeout, or a store timeout)
  PeerLost,         // a peer process died, closed its communicator, or its connection was reset
  Mismatch,         // ranks called different collectives, or the same one with different arguments
  Aborted,          // the communicator was aborted, or failed earlier and cannot be used any more
  Internal,         // a bug in Chorus; please report it with the message
  SystemError,      // an operating-system call failed (the message carries errno's text)
  Unavailable,      // a service (the rendezvous store) could not be reached
};

// A short stable name: "InvalidArgument", "Timeout", ...
CHORUS_API const char* to_string(ErrorCode code) noexcept;

class CHORUS_API Error : public std::runtime_error {
 public:
  // `peer` is the rank at fault when one is known (the lost rank, the rank that sent a mismatching
  // frame), otherwise -1.
  Error(ErrorCode code, const std::string& message, int peer = -1);

  ErrorCode code() const noexcept { return code_; }
  int peer() const noexcept { return peer_; }
  // The message alone; what() is "chorus: <message> [<code>]".
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  int peer_;
  std::string message_;
};

}  // namespace chorus
