// Wire format of the TCP store, shared by TcpStoreServer and TcpStore. Integers are big-endian; strings
// are a u32 length followed by that many bytes.
//
//   request  := u8 command, then
//     Set    key, value
//     Get    u64 timeout_ms, key
//     Add    key, i64 delta
//     Check  u32 count, count x key
//     Wait   u64 timeout_ms, u32 count, count x key
//     Erase  key
//   response := u8 status, u32 length, length bytes of payload
//     Ok               Set, Wait: empty; Get: the value; Add: i64 new value; Check, Erase: u8 0 or 1
//     Timeout          Get: empty; Wait: u32 index (into the request's keys) of each key still missing
//     InvalidArgument  a message; the connection stays usable (e.g. add on a non-integer value)
//     BadRequest       a message; the request was malformed or over a limit and the server closes the
//                      connection after sending it
//     Unavailable      a message; the server refused the connection (too many clients) and closes it
//     Unauthenticated  a message; the server requires authentication and the client started without it;
//                      the server closes the connection
//
// Authentication (when the server has a token): before its first request the client runs the handshake of
// src/base/auth.h, whose first byte (0) is no command. A server without a token answers it as an unknown
// command; a server with one answers a request sent without it with Unauthenticated.
//
// One request at a time per connection: the client sends a request and reads its response. Get and Wait
// on missing keys are parked by the server until the keys are set or timeout_ms passes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::store::wire {

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4, Wait = 5, Erase = 6 };
enum class Status : uint8_t {
  Ok = 0,
  Timeout = 1,
  InvalidArgument = 2,
  BadRequest = 3,
  Unavailable = 4,
  Unauthenticated = 5,
};

constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxValueBytes = 64u << 20;
constexpr uint32_t kMaxKeysPerRequest = 1024;
constexpr size_t kMaxConnections = 4096;
// Every response payload (a value, a message, the missing-key indices) fits in this.
constexpr uint32_t kMaxPayloadBytes = kMaxValueBytes;
constexpr size_t kResponseHeaderBytes = 5;

inline void put_u8(std::string& out, uint8_t v) { out += static_cast<char>(v); }
inline void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}
inline void put_u64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}
// Callers check the length against the protocol's limits first.
inline void put_string(std::string& out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads fields from the front of a buffer that may hold only part of a message. The first failure sticks:
// later reads return zeros, and state() tells whether more bytes are needed or the input is invalid. A length
// field is checked against its limit as soon as it is read, before anything waits for (or allocates for) the
// bytes it announces.
class Reader {
 public:
  enum class State { Ok, NeedMore, Bad };

  explicit Reader(std::string_view in) : in_(in) {}

  uint8_t u8() { return static_cast<uint8_t>(take_int(1)); }
  uint32_t u32() { return static_cast<uint32_t>(take_int(4)); }
  uint64_t u64() { return take_int(8); }
  // A u32 length or count; over `limit` makes the reader Bad with a message naming `what`.
  uint32_t length(uint32_t limit, const char* what) {
    uint32_t n = u32();
    if (state_ == State::Ok && n > limit) {
      state_ = State::Bad;
      error_ = std::string(what) + " of " + std::to_string(n) + " exceeds the limit of " + std::to_string(limit);
    }
    return state_ == State::Ok ? n : 0;
  }
  std::string_view bytes(size_t n) {
    if (state_ != State::Ok) return {};
    if (in_.size() - pos_ < n) {
      state_ = State::NeedMore;
      return {};
    }
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view key() { return bytes(length(kMaxKeyBytes, "key length")); }
  std::string_view value() { return bytes(length(kMaxValueBytes, "value length")); }
  void fail(std::string error) {
    state_ = State::Bad;
    error_ = std::move(error);
  }

  State state() const { return state_; }
  const std::string& error() const { return error_; }
  size_t position() const { return pos_; }

 private:
  uint64_t take_int(size_t n) {
    std::string_view b = bytes(n);
    uint64_t v = 0;
    for (char c : b) v = (v << 8) | static_cast<uint8_t>(c);
    return v;
  }

  std::string_view in_;
  size_t pos_ = 0;
  State state_ = State::Ok;
  std::string error_;
};

// A parsed request. The views point into the buffer it was parsed from.
struct Request {
  Command command = Command::Set;
  uint64_t timeout_ms = 0;
  int64_t delta = 0;
  std::vector<std::string_view> keys;  // exactly one except for Check and Wait
  std::string_view value;
};

// Parses one request from the front of `in`. On Ok, `request` is filled and `consumed` is its size; on Bad,
// `error` says what is wrong. Never reads past `in` and never allocates more than kMaxKeysPerRequest views.
Reader::State parse_request(std::string_view in, Request& request, size_t& consumed, std::string& error);

}  // namespace chorus::store::wire
