// The in-process transport: ranks are threads of one process and exchange frames through per-pair
// channels in memory. A receiver copies (or reduces) straight from the sender's buffer: one pass, no
// staging. Messages up to kEagerBytes are copied into the channel so that small sends complete at once, as
// they do over TCP thanks to the socket buffers.
#pragma once

#include <memory>
#include <string>

#include "chorus/store.h"
#include "transport/transport.h"

namespace chorus::transport {

class InProcFabric;

class InProcTransport final : public Transport {
 public:
  static constexpr size_t kEagerBytes = 64 * 1024;

  // Rank 0 creates a fabric and publishes its id under `key` in the store; the other ranks look it up in
  // this process's registry. Throws InvalidArgument when the ranks are not all in this process.
  static std::unique_ptr<InProcTransport> connect(Store& store, const std::string& key, int rank, int size,
                                                  uint64_t comm_tag, base::Deadline deadline);
  ~InProcTransport() override;

  std::string_view name() const noexcept override { return "inproc"; }
  SendHandle isend(int peer, const MessageTag& tag, const void* data, size_t len,
                   const base::Deadline& deadline, SenderWork work) override;
  void recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) override;
  void recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                   const Reduction& reduction, const base::Deadline& deadline) override;
  void wait_send(SendHandle handle, const base::Deadline& deadline) override;
  void flush(const base::Deadline& deadline) override;
  void check_peers() override;
  void fail(const Error& error) noexcept override;
  void abort(const std::string& reason) noexcept override;
  void close() noexcept override;

 private:
  InProcTransport(std::shared_ptr<InProcFabric> fabric, int rank, int size, uint64_t comm_tag);
  template <class Consume>
  void receive(int peer, const MessageTag& tag, size_t len, const base::Deadline& deadline, Consume&& consume);

  std::shared_ptr<InProcFabric> fabric_;
  uint64_t comm_tag_;
  // Removes this rank's queued zero-copy sends and waits until no receiver reads its buffers.
  void cancel_sends() noexcept;

  std::vector<uint64_t> posted_;          // per peer: sends posted so far
  std::vector<uint64_t> last_zero_copy_;  // per peer: index + 1 of the last send that points into a user buffer
  bool closed_ = false;
};

}  // namespace chorus::transport
