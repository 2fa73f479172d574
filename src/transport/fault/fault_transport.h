// Fault injection: a forwarding wrapper around any transport that, at a chosen data frame to a chosen peer,
// drops, delays, resets, corrupts or otherwise spoils it, or kills the process. Reached through
// CHORUS_FAULT / CommOptions::fault (core wraps the transport in bootstrap) and used by the fault tests.
// See docs/design.md ("Fault injection") and docs/reliability.md for the grammar and what a receiver sees.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport {

enum class FaultAction : uint8_t { Drop, Delay, Reset, Corrupt, Foreign, Truncate, Oversize, Kill };
const char* fault_action_name(FaultAction action) noexcept;
// Whether the action needs the transport's send_raw/sever seams (reset, corrupt, foreign, truncate, oversize).
bool fault_needs_stream(FaultAction action) noexcept;

// One entry of a fault spec: `action:key=value,...`.
struct FaultSpec {
  FaultAction action = FaultAction::Drop;
  int rank = -1;       // the rank that injects; -1: every rank
  int peer = -1;       // the peer whose frame is hit; -1: whichever peer gets frame number `frame` first
  uint64_t frame = 1;  // 1-based count of the data frames this rank sends to that peer
  std::chrono::milliseconds delay{0};  // `ms`, delay only
  std::string text;                    // the entry as written, for logs
};

// Parses "action:key=value,...;action:..." (actions drop, delay, reset, corrupt, foreign, truncate, oversize,
// kill; keys rank, peer, frame, ms). Empty entries are ignored; "none" is the empty spec. With world_size > 0,
// rank and peer must name ranks of that world. Throws Error(InvalidArgument) naming the offending entry and part.
std::vector<FaultSpec> parse_fault_spec(std::string_view spec, int world_size = 0);

// The entries that `rank` injects.
std::vector<FaultSpec> faults_for_rank(const std::vector<FaultSpec>& faults, int rank);

// "corrupt:rank=1,peer=0,frame=3; kill:rank=2,frame=137"
std::string describe_faults(const std::vector<FaultSpec>& faults);

// Wraps `inner` (which owns the connections); every call is forwarded, and isend applies the armed faults.
// Each fault fires once. Threading and buffer rules are the inner transport's.
class FaultTransport final : public Transport {
 public:
  // `faults`: the entries this rank injects (faults_for_rank); `comm_tag`: the tag stamped on the
  // communicator's frames (to rebuild a frame's header).
  FaultTransport(std::unique_ptr<Transport> inner, std::vector<FaultSpec> faults, uint64_t comm_tag);
  ~FaultTransport() override;

  std::string_view name() const noexcept override { return inner_->name(); }
  std::string_view transport_for(int peer) const noexcept override { return inner_->transport_for(peer); }
  WaitCounters wait_counters() const noexcept override { return inner_->wait_counters(); }

  SendHandle isend(int peer, const MessageTag& tag, const void* data, size_t len,
                   const base::Deadline& deadline, SenderWork work) override;
  void recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) override {
    inner_->recv(peer, tag, dst, len, deadline);
  }
  void recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                   const Reduction& reduction, const base::Deadline& deadline) override {
    inner_->recv_reduce(peer, tag, dst, local, len, reduction, deadline);
  }
  void wait_send(SendHandle handle, const base::Deadline& deadline) override;
  void flush(const base::Deadline& deadline) override { inner_->flush(deadline); }
  void check_peers() override { inner_->check_peers(); }
  void fail(const Error& error) noexcept override { inner_->fail(error); }
  void abort(const std::string& reason) noexcept override { inner_->abort(reason); }
  void close() noexcept override { inner_->close(); }
  void set_stall_hook(std::function<void()> hook) override { inner_->set_stall_hook(std::move(hook)); }
  void send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) override {
    inner_->send_raw(peer, bytes, deadline);
  }
  void sever(int peer) override { inner_->sever(peer); }

 private:
  // The handle of a frame that was not forwarded: waiting on it waits for the frames before it.
  static constexpr uint64_t kNothing = ~uint64_t{0};

  std::unique_ptr<Transport> inner_;
  std::vector<FaultSpec> faults_;
  std::vector<bool> fired_;
  std::vector<uint64_t> sent_;                   // data frames posted to each peer
  std::vector<std::optional<SendHandle>> last_;  // the last handle the inner transport gave for each peer
  uint64_t comm_tag_;
};

}  // namespace chorus::transport
