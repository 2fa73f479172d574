#include "transport/fault/fault_transport.h"

#include <signal.h>
#include <time.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "base/logging.h"

namespace chorus::transport {

namespace {

constexpr std::string_view kSpecName = "fault spec (CHORUS_FAULT / CommOptions::fault)";

[[noreturn]] void bad_spec(std::string_view entry, const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, fmt::format("{}: in '{}': {}", kSpecName, entry, why));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

bool parse_action(std::string_view name, FaultAction* out) {
  for (auto a : {FaultAction::Drop, FaultAction::Delay, FaultAction::Reset, FaultAction::Corrupt, FaultAction::Foreign,
                 FaultAction::Truncate, FaultAction::Oversize, FaultAction::Kill}) {
    if (name == fault_action_name(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

uint64_t parse_number(std::string_view entry, std::string_view key, std::string_view value) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
    bad_spec(entry, fmt::format("{}='{}' is not a non-negative integer", key, value));
  }
  return v;
}

}  // namespace

const char* fault_action_name(FaultAction action) noexcept {
  switch (action) {
    case FaultAction::Drop: return "drop";
    case FaultAction::Delay: return "delay";
    case FaultAction::Reset: return "reset";
    case FaultAction::Corrupt: return "corrupt";
    case FaultAction::Foreign: return "foreign";
    case FaultAction::Truncate: return "truncate";
    case FaultAction::Oversize: return "oversize";
    case FaultAction::Kill: return "kill";
  }
  return "?";
}

bool fault_needs_stream(FaultAction action) noexcept {
  return action != FaultAction::Drop && action != FaultAction::Delay && action != FaultAction::Kill;
}

std::vector<FaultSpec> parse_fault_spec(std::string_view spec, int world_size) {
  std::vector<FaultSpec> out;
  if (trim(spec) == "none") return out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view entry = trim(spec.substr(pos, end - pos));
    pos = end + 1;
    if (entry.empty()) continue;
    FaultSpec f;
    f.text = std::string(entry);
    size_t colon = entry.find(':');
    std::string_view action = trim(entry.substr(0, colon));
    if (!parse_action(action, &f.action)) {
      bad_spec(entry, fmt::format("unknown action '{}' (valid: drop, delay, reset, corrupt, foreign, truncate, "
                                  "oversize, kill)",
                                  action));
    }
    bool have_ms = false;
    std::string_view keys = colon == std::string_view::npos ? std::string_view() : entry.substr(colon + 1);
    size_t kpos = 0;
    while (kpos <= keys.size() && !keys.empty()) {
      size_t kend = keys.find(',', kpos);
      if (kend == std::string_view::npos) kend = keys.size();
      std::string_view item = trim(keys.substr(kpos, kend - kpos));
      kpos = kend + 1;
      if (item.empty()) continue;
      size_t eq = item.find('=');
      if (eq == std::string_view::npos) bad_spec(entry, fmt::format("'{}' is not of the form key=value", item));
      std::string_view key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
      if (key != "rank" && key != "peer" && key != "frame" && key != "ms") {
        bad_spec(entry, fmt::format("unknown key '{}' (valid: rank, peer, frame, ms)", key));
      }
      uint64_t v = parse_number(entry, key, value);
      if (key == "rank" || key == "peer") {
        if (v > 1u << 30 || (world_size > 0 && v >= static_cast<uint64_t>(world_size))) {
          bad_spec(entry, fmt::format("{}={} is not a rank of this world (size {})", key, value, world_size));
        }
        (key == "rank" ? f.rank : f.peer) = static_cast<int>(v);
      } else if (key == "frame") {
        if (v == 0) bad_spec(entry, "frame=0: frames are counted from 1");
        f.frame = v;
      } else {
        if (v > 3600 * 1000) bad_spec(entry, fmt::format("ms={} is more than an hour", value));
        f.delay = std::chrono::milliseconds(v);
        have_ms = true;
      }
    }
    if (f.action == FaultAction::Delay && !have_ms) bad_spec(entry, "delay needs ms=<milliseconds>");
    if (f.action != FaultAction::Delay && have_ms) bad_spec(entry, "ms= applies to delay only");
    if (f.rank >= 0 && f.rank == f.peer) bad_spec(entry, fmt::format("rank {} cannot send frames to itself", f.rank));
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<FaultSpec> faults_for_rank(const std::vector<FaultSpec>& faults, int rank) {
  std::vector<FaultSpec> mine;
  for (const FaultSpec& f : faults)
    if ((f.rank < 0 || f.rank == rank) && f.peer != rank) mine.push_back(f);
  return mine;
}

std::string describe_faults(const std::vector<FaultSpec>& faults) {
  std::string s;
  for (const FaultSpec& f : faults) s += (s.empty() ? "" : "; ") + f.text;
  return s;
}

// ---------------------------------------------------------------- the wrapper

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, std::vector<FaultSpec> faults, uint64_t comm_tag)
    : Transport(inner->rank(), inner->size()),
      inner_(std::move(inner)),
      faults_(std::move(faults)),
      fired_(faults_.size(), false),
      sent_(static_cast<size_t>(size_), 0),
      last_(static_cast<size_t>(size_)),
      comm_tag_(comm_tag) {}

FaultTransport::~FaultTransport() = default;

SendHandle FaultTransport::isend(int peer, const MessageTag& tag, const void* data, size_t len,
                                 const base::Deadline& deadline, SenderWork work) {
  const uint64_t frame = ++sent_[static_cast<size_t>(peer)];
  for (size_t i = 0; i < faults_.size(); ++i) {
    const FaultSpec& f = faults_[i];
    if (fired_[i] || f.frame != frame || (f.peer >= 0 && f.peer != peer)) continue;
    fired_[i] = true;
    base::log_warn("fault injection: {} frame {} to rank {} ({}; spec '{}')", fault_action_name(f.action), frame,
                   peer, describe(tag), f.text);
    if (f.action == FaultAction::Delay) {
      std::this_thread::sleep_for(f.delay);
      continue;
    }
    if (f.action == FaultAction::Kill) {
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      std::fprintf(stderr, "CHORUS_FAULT kill rank %d %lld\n", rank_,
                   static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    if (f.action == FaultAction::Reset) {
      inner_->sever(peer);
      break;  // the frame goes to the severed connection, which throws as a real send would
    }
    // The frame is replaced (or dropped); waiting on its handle waits for the frames before it.
    SendHandle replaced = last_[static_cast<size_t>(peer)].value_or(SendHandle{peer, kNothing});
    if (f.action == FaultAction::Drop) return replaced;
    FrameHeader h = make_header(FrameKind::Data, tag, len, comm_tag_, rank_);
    const auto* payload = static_cast<const std::byte*>(data);
    std::vector<std::byte> raw;
    auto append = [&raw](const void* p, size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      raw.insert(raw.end(), b, b + n);
    };
    switch (f.action) {
      case FaultAction::Corrupt: {
        // One bit of the sequence number: a plausible-looking header that only the checksum rejects (any
        // single-bit change in the first 60 bytes changes it; checked, in case of a 32-bit collision).
        FrameHeader bad = h;
        for (size_t bit = 0; bit < 8 * offsetof(FrameHeader, checksum); ++bit) {
          bad = h;
          size_t byte = (offsetof(FrameHeader, seq) + bit / 8) % offsetof(FrameHeader, checksum);
          reinterpret_cast<unsigned char*>(&bad)[byte] ^= static_cast<unsigned char>(1u << (bit % 8));
          if (!header_intact(bad)) break;
        }
        append(&bad, sizeof(bad));
        append(payload, len);
        break;
      }
      case FaultAction::Foreign: {
        FrameHeader other = h;
        other.comm_tag = comm_tag_ ^ 0x5a5a5a5a5a5a5a5aull;
        other.checksum = header_checksum(other);
        append(&other, sizeof(other));
        append(payload, len);
        break;
      }
      case FaultAction::Truncate:
        append(&h, sizeof(h) / 2);
        break;
      case FaultAction::Oversize: {
        FrameHeader big = h;
        big.length = static_cast<uint64_t>(len) * 2 + 64;
        big.checksum = header_checksum(big);
        append(&big, sizeof(big));
        append(payload, len);
        raw.resize(raw.size() + len + 64, std::byte{0x5a});
        break;
      }
      default: break;
    }
    inner_->send_raw(peer, raw, deadline);
    if (f.action == FaultAction::Truncate) inner_->sever(peer);
    return replaced;
  }
  SendHandle h = inner_->isend(peer, tag, data, len, deadline, work);
  last_[static_cast<size_t>(peer)] = h;
  return h;
}

void FaultTransport::wait_send(SendHandle handle, const base::Deadline& deadline) {
  if (handle.index == kNothing) return;
  inner_->wait_send(handle, deadline);
}

}  // namespace chorus::transport
