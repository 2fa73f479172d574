#include "transport/inproc/inproc_transport.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "base/error.h"
#include "base/logging.h"

namespace chorus::transport {

namespace {
constexpr auto kWaitSlice = std::chrono::milliseconds(50);
}

class InProcFabric {
 public:
  struct Message {
    FrameHeader header;
    const char* data = nullptr;
    size_t len = 0;
    std::unique_ptr<char[]> owned;  // eager copy of a small message
  };
  // One direction between two ranks. All fields are guarded by mu.
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Message> queue;
    uint64_t completed = 0;       // messages the receiver has consumed
    bool sender_closed = false;   // the sender said goodbye; nothing more will come
    bool receiver_closed = false; // the receiver is gone; sends to it will never complete
    bool consuming = false;       // the receiver is reading a message that points into the sender's buffer
  };

  explicit InProcFabric(int size) : size_(size), channels_(static_cast<size_t>(size) * size) {
    for (auto& c : channels_) c = std::make_unique<Channel>();
  }
  Channel& channel(int src, int dst) { return *channels_[static_cast<size_t>(src) * size_ + dst]; }
  int size() const { return size_; }

  // The first fatal error of any rank; every rank's waits observe it.
  void set_failure(const Error& e, int origin) {
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (failure_) return;
      failure_.emplace(e);
      failure_origin_ = origin;
    }
    failed_.store(true, std::memory_order_release);
    wake_all();
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The error a rank other than the origin sees.
  Error failure_for(int me) {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failure_origin_ == me) return *failure_;
    ErrorCode code = failure_->code() == ErrorCode::InvalidArgument ? ErrorCode::Aborted : failure_->code();
    int culprit = failure_->peer() >= 0 ? failure_->peer() : failure_origin_;
    return Error(code, fmt::format("rank {} failed and aborted the communicator: {}", failure_origin_, failure_->message()),
                 culprit);
  }
  void wake_all() {
    for (auto& c : channels_) {
      std::lock_guard<std::mutex> lock(c->mu);
      c->cv.notify_all();
    }
  }

 private:
  int size_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::mutex failure_mu_;
  std::optional<Error> failure_;  // guarded by failure_mu_
  int failure_origin_ = -1;       // guarded by failure_mu_
  std::atomic<bool> failed_{false};
};

namespace {

std::mutex g_registry_mu;
std::map<std::string, std::weak_ptr<InProcFabric>>& registry() {
  static auto* r = new std::map<std::string, std::weak_ptr<InProcFabric>>();
  return *r;
}

std::string new_fabric_id() {
  std::random_device rd;
  return fmt::format("{}-{:08x}{:08x}", getpid(), rd(), rd());
}

}  // namespace

std::unique_ptr<InProcTransport> InProcTransport::connect(Store& store, const std::string& key, int rank, int size,
                                                          uint64_t comm_tag, base::Deadline deadline) {
  std::shared_ptr<InProcFabric> fabric;
  if (rank == 0) {
    fabric = std::make_shared<InProcFabric>(size);
    std::string id = new_fabric_id();
    {
      std::lock_guard<std::mutex> lock(g_registry_mu);
      auto& reg = registry();
      for (auto it = reg.begin(); it != reg.end();) it = it->second.expired() ? reg.erase(it) : std::next(it);
      reg[id] = fabric;
    }
    store.set(key, id);
  } else {
    std::string id = store.get(key, deadline.remaining());
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = registry().find(id);
    if (it != registry().end()) fabric = it->second.lock();
    if (!fabric) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("the in-process transport needs every rank in one process, but rank {} cannot "
                                    "find rank 0's fabric '{}' in process {}; use CHORUS_TRANSPORT=tcp",
                                    rank, id, getpid()));
    }
    if (fabric->size() != size) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("rank {} was created with world size {} but rank 0 with {}", rank, size,
                                    fabric->size()));
    }
  }
  return std::unique_ptr<InProcTransport>(new InProcTransport(std::move(fabric), rank, size, comm_tag));
}

InProcTransport::InProcTransport(std::shared_ptr<InProcFabric> fabric, int rank, int size, uint64_t comm_tag)
    : Transport(rank, size),
      fabric_(std::move(fabric)),
      comm_tag_(comm_tag),
      posted_(size, 0),
      last_zero_copy_(size, 0) {}

InProcTransport::~InProcTransport() { close(); }

SendHandle InProcTransport::isend(int peer, const MessageTag& tag, const void* data, size_t len,
                                  const base::Deadline& deadline, SenderWork /*work: one way to move bytes*/) {
  if (fabric_->failed()) throw fabric_->failure_for(rank_);
  InProcFabric::Message m;
  m.header = make_header(FrameKind::Data, tag, len, comm_tag_, rank_);
  m.len = len;
  if (len <= kEagerBytes) {
    if (len > 0) {
      m.owned.reset(new char[len]);
      std::memcpy(m.owned.get(), data, len);
    }
    m.data = m.owned.get();
  } else {
    m.data = static_cast<const char*>(data);
  }
  auto& ch = fabric_->channel(rank_, peer);
  {
    std::lock_guard<std::mutex> lock(ch.mu);
    if (ch.receiver_closed) throw peer_closed_error(rank_, peer, true, "it can no longer receive");
    ch.queue.push_back(std::move(m));
    ch.cv.notify_all();
  }
  uint64_t index = posted_[peer]++;
  if (len > kEagerBytes) last_zero_copy_[peer] = index + 1;
  return SendHandle{peer, index};
}

template <class Consume>
void InProcTransport::receive(int peer, const MessageTag& tag, size_t len, const base::Deadline& deadline,
                              Consume&& consume) {
  auto& ch = fabric_->channel(peer, rank_);
  InProcFabric::Message m;
  {
    std::unique_lock<std::mutex> lock(ch.mu);
    while (true) {
      if (fabric_->failed()) throw fabric_->failure_for(rank_);
      if (!ch.queue.empty()) break;
      if (ch.sender_closed) throw peer_closed_error(rank_, peer, true, "");
      if (deadline.expired()) {
        throw Error(ErrorCode::Timeout,
                    fmt::format("rank {} timed out waiting for data from rank {} in {}; rank {} may be stuck or the "
                                "ranks may be calling collectives in different orders",
                                rank_, peer, describe(tag), peer),
                    peer);
      }
      if (ch.cv.wait_for(lock, std::min<std::chrono::milliseconds>(kWaitSlice, deadline.remaining())) ==
              std::cv_status::timeout &&
          ch.queue.empty()) {
        lock.unlock();
        stalled();
        lock.lock();
      }
    }
    m = std::move(ch.queue.front());
    ch.queue.pop_front();
    ch.consuming = true;
  }
  // Until `consuming` is cleared the sender may not return from a failed operation (see cancel_sends), so
  // its buffer stays valid while we read it.
  auto done = [&] {
    std::lock_guard<std::mutex> lock(ch.mu);
    ch.consuming = false;
    ++ch.completed;
    ch.cv.notify_all();
  };
  try {
    check_data_frame(m.header, tag, len, comm_tag_, rank_, peer);
    consume(m.data);
  } catch (...) {
    done();
    throw;
  }
  done();
}

void InProcTransport::recv(int peer, const MessageTag& tag, void* dst, size_t len, const base::Deadline& deadline) {
  receive(peer, tag, len, deadline, [&](const char* src) {
    if (len) std::memcpy(dst, src, len);
  });
}

void InProcTransport::recv_reduce(int peer, const MessageTag& tag, void* dst, const void* local, size_t len,
                                  const Reduction& reduction, const base::Deadline& deadline) {
  receive(peer, tag, len, deadline, [&](const char* src) {
    if (len) reduction.apply(dst, src, local, len);
  });
}

void InProcTransport::wait_send(SendHandle h, const base::Deadline& deadline) {
  // Completion is in order, as over TCP: when wait_send(h) returns, h and every earlier send to the peer are
  // done. Eager sends are done when posted, so only the zero-copy sends up to h must have been consumed (a
  // channel is consumed in order): wait until the consumer passed the last of them.
  uint64_t needed = std::min(h.index + 1, last_zero_copy_[h.peer]);
  if (needed == 0) return;
  auto& ch = fabric_->channel(rank_, h.peer);
  std::unique_lock<std::mutex> lock(ch.mu);
  while (ch.completed < needed) {
    if (fabric_->failed()) throw fabric_->failure_for(rank_);
    if (ch.receiver_closed) throw peer_closed_error(rank_, h.peer, true, "it left before receiving our data");
    if (deadline.expired()) {
      throw Error(ErrorCode::Timeout,
                  fmt::format("rank {} timed out waiting for rank {} to receive its data", rank_, h.peer), h.peer);
    }
    ch.cv.wait_for(lock, std::min<std::chrono::milliseconds>(kWaitSlice, deadline.remaining()));
  }
}

void InProcTransport::flush(const base::Deadline& deadline) {
  for (int p = 0; p < size_; ++p) {
    if (last_zero_copy_[p] > 0) wait_send(SendHandle{p, last_zero_copy_[p] - 1}, deadline);
  }
}

void InProcTransport::cancel_sends() noexcept {
  for (int p = 0; p < size_; ++p) {
    auto& out = fabric_->channel(rank_, p);
    std::unique_lock<std::mutex> lock(out.mu);
    std::erase_if(out.queue, [](const InProcFabric::Message& m) { return !m.owned && m.len > 0; });
    // A receiver may be copying from one of our buffers right now; wait for it (a bounded memcpy).
    out.cv.wait(lock, [&] { return !out.consuming; });
    last_zero_copy_[p] = 0;
  }
}

void InProcTransport::check_peers() {
  if (fabric_->failed()) throw fabric_->failure_for(rank_);
}

void InProcTransport::fail(const Error& error) noexcept {
  fabric_->set_failure(error, rank_);
  cancel_sends();
}

void InProcTransport::abort(const std::string& reason) noexcept {
  fabric_->set_failure(Error(ErrorCode::Aborted, reason), rank_);
}

void InProcTransport::close() noexcept {
  if (closed_ || !fabric_) return;
  closed_ = true;
  if (!fabric_->failed()) {
    try {
      flush(base::Deadline::after(std::chrono::seconds(1)));
    } catch (const std::exception& e) {
      base::log_debug("in-process close: unflushed sends dropped: {}", e.what());
    }
  }
  cancel_sends();  // nothing may point into this rank's buffers once it is gone
  for (int p = 0; p < size_; ++p) {
    auto& out = fabric_->channel(rank_, p);
    {
      std::lock_guard<std::mutex> lock(out.mu);
      out.sender_closed = true;
      out.cv.notify_all();
    }
    auto& in = fabric_->channel(p, rank_);
    std::lock_guard<std::mutex> lock(in.mu);
    in.receiver_closed = true;
    in.cv.notify_all();
  }
}

}  // namespace chorus::transport
