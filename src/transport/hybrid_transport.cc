#include "transport/hybrid_transport.h"

namespace chorus::transport {

HybridTransport::HybridTransport(std::unique_ptr<ShmTransport> shm, std::unique_ptr<TcpTransport> tcp,
                                 std::vector<bool> local)
    : Transport(tcp->rank(), tcp->size()), shm_(std::move(shm)), tcp_(std::move(tcp)), local_(std::move(local)) {
  // Each transport's wait loop keeps the other one moving.
  shm_->set_external_progress([this] { return tcp_->progress(); });
  tcp_->set_external_progress([this] { return shm_->progress(); });
}

HybridTransport::~HybridTransport() { close(); }

void HybridTransport::flush(const base::Deadline& deadline) {
  shm_->flush(deadline);
  tcp_->flush(deadline);
}

void HybridTransport::check_peers() {
  shm_->check_peers();
  tcp_->check_peers();
}

void HybridTransport::fail(const Error& error) noexcept {
  shm_->fail(error);
  tcp_->fail(error);
}

void HybridTransport::abort(const std::string& reason) noexcept {
  shm_->abort(reason);
  tcp_->abort(reason);
}

void HybridTransport::set_stall_hook(std::function<void()> hook) {
  shm_->set_stall_hook(hook);
  tcp_->set_stall_hook(std::move(hook));
}

void HybridTransport::close() noexcept {
  shm_->close();
  tcp_->close();
}

}  // namespace chorus::transport
