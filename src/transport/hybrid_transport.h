// Shared memory to the ranks on this host, TCP to the others (CHORUS_TRANSPORT=auto across hosts). Each peer
// is served by one of the two transports; while one waits, the other keeps its queued sends and its hang-up
// checks moving, so a schedule that crosses hosts never stalls behind a rank blocked on its local neighbour.
#pragma once

#include <memory>
#include <vector>

#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::transport {

class HybridTransport final : public Transport {
 public:
  HybridTransport(std::unique_ptr<ShmTransport> shm, std::unique_ptr<TcpTransport> tcp, std::vector<bool> local);
  ~HybridTransport() override;

  std::string_view name() const noexcept override { return "shm+tcp"; }
  // "shm" or "tcp": the transport that carries frames to `peer`.
  std::string_view transport_for(int peer) const noexcept override { return local_[peer] ? "shm" : "tcp"; }
  WaitCounters wait_counters() const noexcept override { return shm_->wait_counters(); }
  std::string settings() const override { return tcp_->settings() + " (across hosts)"; }

  SendHandle isend(int peer, const MessageTag& tag, const void* data, size_t len,
                   const base::Deadline& deadline, SenderWork work) override {
    return at(peer).isend(peer, tag, data, len, deadline, work);
  }
  void recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) override {
    at(peer).recv(peer, tag, dst, len, deadline);
  }
  void recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                   const Reduction& reduction, const base::Deadline& deadline) override {
    at(peer).recv_reduce(peer, tag, dst, local, len, reduction, deadline);
  }
  void wait_send(SendHandle h, const base::Deadline& deadline) override { at(h.peer).wait_send(h, deadline); }
  void flush(const base::Deadline& deadline) override;
  void check_peers() override;
  void fail(const Error& error) noexcept override;
  void abort(const std::string& reason) noexcept override;
  void close() noexcept override;
  // Both halves wait, so both call the stall hook.
  void set_stall_hook(std::function<void()> hook) override;
  void send_raw(int peer, std::span<const std::byte> bytes, const base::Deadline& deadline) override {
    at(peer).send_raw(peer, bytes, deadline);
  }
  void sever(int peer) override { at(peer).sever(peer); }

 private:
  Transport& at(int peer) { return local_[peer] ? static_cast<Transport&>(*shm_) : *tcp_; }

  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<TcpTransport> tcp_;
  std::vector<bool> local_;
};

}  // namespace chorus::transport
