// Connection authentication: a mutual HMAC-SHA256 challenge-response over a per-job secret
// (CHORUS_AUTH_TOKEN), run at the start of every TCP connection, to the store and between ranks.
//
// The exchange, connector C (store client, or the higher rank) and acceptor A (store server, lower rank):
//
//   C -> A   kMagic (8 bytes), nonce_c (32 random bytes)
//   A -> C   kMagic, nonce_a (32 random bytes), HMAC(token, label_A || 0 || nonce_c || nonce_a)
//   C -> A   HMAC(token, label_C || 0 || nonce_a || nonce_c)
//
// Each side answers the other's fresh nonce, mixed with its own, under its own role label, so an answer can
// neither be replayed (fresh nonces) nor reflected back at its sender or moved between the store and the
// rank channels (four distinct labels). Answers are compared in constant time. Only knowledge of the token is
// proven: nothing after the handshake is encrypted or signed (see docs/reliability.md, "Security model").
//
// Both sides with no token: no handshake at all (auth is off). A token on one side only fails quickly and
// clearly instead of hanging: kMagic starts with a zero byte, which starts no store request and no transport
// hello, so a side without a token rejects a handshake at once, and a side with one recognises a plain
// request or hello by its first byte.
//
// The token is never formatted into a log line or an error message by this code or its callers.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "base/time.h"
#include "chorus/error.h"

namespace chorus::base::auth {

constexpr size_t kMagicBytes = 8;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
inline constexpr std::string_view kMagic{"\0CHAUTH1", kMagicBytes};

using Nonce = std::array<unsigned char, kNonceBytes>;
using Mac = std::array<unsigned char, kMacBytes>;

// Which kind of connection: each has its own pair of role labels.
enum class Channel { Store, Rank };

// The process's CHORUS_AUTH_TOKEN, empty when unset (the default of TcpStoreOptions and
// TcpStoreServerOptions; communicators read it through core::Config).
std::string token_from_environment();

// Logs once per process, at INFO, that TCP connections are not authenticated (no token configured).
void note_unauthenticated();

// The accepting side as a state machine over a byte stream, for an event loop that must not block (the
// store server) as well as for a blocking socket (accept_handshake). Holds a copy of the token.
class AcceptHandshake {
 public:
  enum class State {
    NeedMore,           // feed more bytes (wanted() of them)
    Done,               // the peer proved it knows the token; the rest of `in` is the peer's protocol
    NotAuthenticating,  // the peer's first byte starts no handshake (a peer without a token): nothing consumed
    Failed,             // wrong magic, or a wrong answer: close the connection (failure() says why)
  };

  AcceptHandshake(std::string_view token, Channel channel);

  // Consumes handshake bytes from the front of `in` (and no byte beyond them) and appends the bytes to send
  // to the peer to `out`. Call again with more input while it returns NeedMore.
  State advance(std::string& in, std::string& out);
  // How many more bytes the current step needs: a blocking reader reads exactly this many, so that it never
  // reads past the handshake into the protocol that follows.
  size_t wanted(size_t have) const;
  // Why the handshake failed, for a log line (never contains the token).
  const std::string& failure() const { return failure_; }
  // True once the challenge is out and the peer's answer is awaited.
  bool challenged() const { return step_ == Step::Answer; }

 private:
  enum class Step { Lead, Magic, Nonce, Answer, Finished };
  std::string token_;
  Channel channel_;
  Step step_ = Step::Lead;
  Nonce theirs_{};
  Nonce mine_{};
  std::string failure_;
};

struct AcceptResult {
  AcceptHandshake::State state = AcceptHandshake::State::Failed;  // never NeedMore
  std::string failure;                                            // when Failed
  std::string unread;  // when NotAuthenticating: the peer's bytes read so far (the start of its protocol)
};

// Runs the accepting side on a blocking or non-blocking socket, before `deadline`. A peer that closes or
// does not finish in time is Failed. Throws Error(SystemError) only for unexpected socket errors.
AcceptResult accept_handshake(int fd, std::string_view token, Channel channel, Deadline deadline);

// Runs the connecting side on a socket, before `deadline`. On any failure throws Error(`code`, message,
// `peer_rank`): the message begins "authentication with <peer> failed: ", says why in words (no answer, the
// peer does not authenticate, a wrong answer) and ends "check that CHORUS_AUTH_TOKEN is the same on every
// rank". `peer` names the other side for the message, e.g. "the store at 10.0.0.1:29500".
void connect_handshake(int fd, std::string_view token, Channel channel, Deadline deadline, ErrorCode code,
                       std::string_view peer, int peer_rank = -1);

}  // namespace chorus::base::auth
