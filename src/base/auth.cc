#include "base/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "base/logging.h"
#include "base/net.h"

namespace chorus::base::auth {

namespace {

// The versioned role labels. Four distinct ones: a store answer is no rank answer, an acceptor's answer is no
// connector's.
std::string_view label(Channel channel, bool acceptor) {
  if (channel == Channel::Store) return acceptor ? "chorus-auth-1 store server" : "chorus-auth-1 store client";
  return acceptor ? "chorus-auth-1 rank acceptor" : "chorus-auth-1 rank connector";
}

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throw_error(ErrorCode::Internal, "authentication: the random number generator (OpenSSL RAND_bytes) failed");
  }
  return n;
}

// HMAC-SHA256(token, label || 0 || theirs || mine): the answer to the peer's nonce `theirs`. The zero byte
// ends the label, so no label is a prefix of another's message.
Mac answer(std::string_view token, std::string_view role, const Nonce& theirs, const Nonce& mine) {
  std::string msg(role);
  msg.push_back('\0');
  msg.append(reinterpret_cast<const char*>(theirs.data()), theirs.size());
  msg.append(reinterpret_cast<const char*>(mine.data()), mine.size());
  Mac mac{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
            reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac.data(), &len) ||
      len != mac.size()) {
    throw_error(ErrorCode::Internal, "authentication: HMAC-SHA256 (OpenSSL) failed");
  }
  return mac;
}

bool same(const Mac& a, const unsigned char* b) { return CRYPTO_memcmp(a.data(), b, a.size()) == 0; }

const char* kCheckToken = "check that CHORUS_AUTH_TOKEN is the same on every rank";

}  // namespace

std::string token_from_environment() {
  const char* v = std::getenv("CHORUS_AUTH_TOKEN");
  return v ? std::string(v) : std::string();
}

void note_unauthenticated() {
  static std::once_flag once;
  std::call_once(
      once, [] { log_info("CHORUS_AUTH_TOKEN is not set: TCP connections (store and ranks) are not authenticated"); });
}

AcceptHandshake::AcceptHandshake(std::string_view token, Channel channel) : token_(token), channel_(channel) {}

size_t AcceptHandshake::wanted(size_t have) const {
  size_t need = 0;
  switch (step_) {
    case Step::Lead:
      need = 1;
      break;
    case Step::Magic:
      need = kMagicBytes - 1;
      break;
    case Step::Nonce:
      need = kNonceBytes;
      break;
    case Step::Answer:
      need = kMacBytes;
      break;
    case Step::Finished:
      need = 0;
      break;
  }
  return need > have ? need - have : 0;
}

AcceptHandshake::State AcceptHandshake::advance(std::string& in, std::string& out) {
  while (true) {
    switch (step_) {
      case Step::Lead:
        if (in.empty()) return State::NeedMore;
        if (in[0] != kMagic[0]) return State::NotAuthenticating;
        in.erase(0, 1);
        step_ = Step::Magic;
        break;
      case Step::Magic: {
        size_t n = std::min(in.size(), kMagicBytes - 1);
        if (std::memcmp(in.data(), kMagic.data() + 1, n) != 0) {
          step_ = Step::Finished;
          failure_ = "it sent bytes that are neither a Chorus handshake nor a request";
          return State::Failed;
        }
        if (n < kMagicBytes - 1) return State::NeedMore;
        in.erase(0, n);
        step_ = Step::Nonce;
        break;
      }
      case Step::Nonce: {
        if (in.size() < kNonceBytes) return State::NeedMore;
        std::memcpy(theirs_.data(), in.data(), kNonceBytes);
        in.erase(0, kNonceBytes);
        mine_ = random_nonce();
        Mac mac = answer(token_, label(channel_, true), theirs_, mine_);
        out.append(kMagic);
        out.append(reinterpret_cast<const char*>(mine_.data()), mine_.size());
        out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
        step_ = Step::Answer;
        break;
      }
      case Step::Answer: {
        if (in.size() < kMacBytes) return State::NeedMore;
        Mac expected = answer(token_, label(channel_, false), mine_, theirs_);
        bool ok = same(expected, reinterpret_cast<const unsigned char*>(in.data()));
        in.erase(0, kMacBytes);
        step_ = Step::Finished;
        if (!ok) {
          failure_ = "its answer to our challenge is wrong (a different CHORUS_AUTH_TOKEN?)";
          return State::Failed;
        }
        return State::Done;
      }
      case Step::Finished:
        return failure_.empty() ? State::Done : State::Failed;
    }
  }
}

AcceptResult accept_handshake(int fd, std::string_view token, Channel channel, Deadline deadline) {
  AcceptHandshake hs(token, channel);
  AcceptResult result;
  std::string in, out;
  while (true) {
    AcceptHandshake::State state = hs.advance(in, out);
    if (!out.empty()) {
      if (write_full(fd, out.data(), out.size(), deadline) != IoStatus::Ok) {
        result.failure = "it went away during the handshake";
        return result;
      }
      out.clear();
    }
    if (state == AcceptHandshake::State::NotAuthenticating) {
      result.state = state;
      result.unread = std::move(in);
      return result;
    }
    if (state != AcceptHandshake::State::NeedMore) {
      result.state = state;
      result.failure = hs.failure();
      return result;
    }
    size_t old = in.size();
    size_t need = hs.wanted(old);
    in.resize(old + need);
    IoStatus s = read_full(fd, in.data() + old, need, deadline);
    if (s != IoStatus::Ok) {
      result.failure = s == IoStatus::Timeout ? "it did not complete the handshake in time"
                       : hs.challenged() ? "it closed the connection instead of answering our challenge (a different "
                                           "CHORUS_AUTH_TOKEN?)"
                                         : "it closed the connection during the handshake";
      return result;
    }
  }
}

void connect_handshake(int fd, std::string_view token, Channel channel, Deadline deadline, ErrorCode code,
                       std::string_view peer, int peer_rank) {
  auto fail = [&](std::string_view why) {
    throw_error(code, fmt::format("authentication with {} failed: {}; {}", peer, why, kCheckToken), peer_rank);
  };
  auto check = [&](IoStatus s, const char* when) {
    if (s == IoStatus::Timeout) fail(fmt::format("no answer {} before the deadline", when));
    if (s == IoStatus::Eof) {
      fail(fmt::format("it closed the connection {} (it runs without CHORUS_AUTH_TOKEN, or refused us)", when));
    }
  };
  Nonce mine = random_nonce();
  std::string hello(kMagic);
  hello.append(reinterpret_cast<const char*>(mine.data()), mine.size());
  check(write_full(fd, hello.data(), hello.size(), deadline), "to our challenge");

  unsigned char reply[kMagicBytes + kNonceBytes + kMacBytes];
  check(read_full(fd, reply, kMagicBytes, deadline), "to our challenge");
  if (std::memcmp(reply, kMagic.data(), kMagicBytes) != 0) {
    fail(
        "it answered without authenticating (it runs without CHORUS_AUTH_TOKEN, refused the connection, or is not "
        "a Chorus process)");
  }
  check(read_full(fd, reply + kMagicBytes, kNonceBytes + kMacBytes, deadline), "to our challenge");
  Nonce theirs;
  std::memcpy(theirs.data(), reply + kMagicBytes, kNonceBytes);
  if (!same(answer(token, label(channel, true), mine, theirs), reply + kMagicBytes + kNonceBytes)) {
    fail("its answer to our challenge is wrong (it has a different CHORUS_AUTH_TOKEN)");
  }
  Mac mac = answer(token, label(channel, false), theirs, mine);
  check(write_full(fd, mac.data(), mac.size(), deadline), "after our answer");
}

}  // namespace chorus::base::auth
