// Fuzzes the TCP store server's request parser (store::wire::parse_request) with arbitrary bytes, as a
// client (or anyone who reaches the port) could send them, and checks the parser's promises: it never reads
// past its input, consumes a prefix of it on success, names the problem on failure, and a request it accepts
// re-encodes to the bytes it consumed. Requests are parsed one after another, as the server does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/tcp_store_protocol.h"

namespace wire = chorus::store::wire;

namespace {

std::string encode(const wire::Request& r) {
  std::string out;
  wire::put_u8(out, static_cast<uint8_t>(r.command));
  switch (r.command) {
    case wire::Command::Set:
      wire::put_string(out, r.keys.at(0));
      wire::put_string(out, r.value);
      break;
    case wire::Command::Get:
      wire::put_u64(out, r.timeout_ms);
      wire::put_string(out, r.keys.at(0));
      break;
    case wire::Command::Add:
      wire::put_string(out, r.keys.at(0));
      wire::put_u64(out, static_cast<uint64_t>(r.delta));
      break;
    case wire::Command::Check:
    case wire::Command::Wait:
      if (r.command == wire::Command::Wait) wire::put_u64(out, r.timeout_ms);
      wire::put_u32(out, static_cast<uint32_t>(r.keys.size()));
      for (std::string_view k : r.keys) wire::put_string(out, k);
      break;
    case wire::Command::Erase:
      wire::put_string(out, r.keys.at(0));
      break;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (!in.empty()) {
    wire::Request req;
    size_t consumed = 0;
    std::string error;
    auto state = wire::parse_request(in, req, consumed, error);
    if (state == wire::Reader::State::NeedMore) {
      if (!error.empty()) __builtin_trap();
      break;
    }
    if (state == wire::Reader::State::Bad) {
      if (error.empty()) __builtin_trap();
      break;
    }
    if (consumed == 0 || consumed > in.size()) __builtin_trap();
    if (req.keys.size() > wire::kMaxKeysPerRequest) __builtin_trap();
    for (std::string_view k : req.keys) {
      if (k.size() > wire::kMaxKeyBytes || k.data() < in.data() || k.data() + k.size() > in.data() + consumed) {
        __builtin_trap();
      }
    }
    if (req.value.size() > wire::kMaxValueBytes) __builtin_trap();
    if (encode(req) != in.substr(0, consumed)) __builtin_trap();
    in.remove_prefix(consumed);
  }
  return 0;
}
