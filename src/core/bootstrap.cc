// Communicator creation: rendezvous through the store, choose and connect the transport.
#include <unistd.h>

#include <fstream>
#include <random>

#include <fmt/format.h>

#include "base/error.h"
#include "base/logging.h"
#include "base/net.h"
#include "core/communicator_impl.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {

Communicator::Impl::~Impl() {
  if (transport) transport->close();
}

namespace core {

namespace {

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string read_link(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// What proves two ranks share a host (same kernel boot and network namespace) and a process.
struct ProcIdentity {
  std::string host;     // boot id + network namespace
  std::string process;  // host + pid
};

ProcIdentity my_identity() {
  ProcIdentity id;
  id.host = read_first_line("/proc/sys/kernel/random/boot_id") + "/" + read_link("/proc/self/ns/net");
  id.process = id.host + "/" + std::to_string(::getpid());
  return id;
}

// The TCP store's address, looking through prefix stores.
std::optional<base::SockAddr> store_address(Store* store) {
  while (auto* p = dynamic_cast<PrefixStore*>(store)) store = p->base().get();
  auto* tcp = dynamic_cast<TcpStore*>(store);
  if (!tcp) return std::nullopt;
  try {
    base::HostPort hp = base::parse_host_port(tcp->address(), "store address");
    auto addrs = base::resolve(hp.host, hp.port);
    if (!addrs.empty()) return addrs.front();
  } catch (const Error&) {
  }
  return std::nullopt;
}

uint64_t random_tag() {
  std::random_device rd;
  uint64_t t = 0;
  while (t == 0) t = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return t;
}

}  // namespace

std::unique_ptr<Communicator::Impl> bootstrap(std::shared_ptr<Store> store, int rank, int size,
                                              const CommOptions& options) {
  if (!store) base::throw_error(ErrorCode::InvalidArgument, "Communicator::create: store is null");
  if (size < 1) {
    base::throw_error(ErrorCode::InvalidArgument, fmt::format("Communicator::create: world size {} < 1", size));
  }
  if (rank < 0 || rank >= size) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("Communicator::create: rank {} is out of range for world size {}", rank, size));
  }
  auto impl = std::make_unique<Communicator::Impl>();
  impl->config = resolve_config(options);
  impl->options = options;
  impl->options.timeout = impl->config.timeout;
  impl->options.transport = impl->config.transport;
  impl->options.socket_ifname = impl->config.socket_ifname;
  impl->options.slice_bytes = impl->config.slice_bytes;
  if (impl->options.name.empty()) impl->options.name = "world";
  impl->store = std::move(store);
  impl->rank = rank;
  impl->size = size;
  impl->label = fmt::format("{} r{}/{}", impl->options.name, rank, size);
  impl->p2p_send_seq.assign(static_cast<size_t>(size), 0);
  impl->p2p_recv_seq.assign(static_cast<size_t>(size), 0);
  base::LogTag log_tag(&impl->label);
  auto deadline = base::Deadline::after(impl->config.timeout);
  Store& st = *impl->store;

  // Ranks that create communicators on one store in the same order get the same index.
  int64_t index = st.add(fmt::format("chorus/create/{}", rank), 1);
  impl->key_prefix = fmt::format("chorus/c{}/", index);
  const std::string& k = impl->key_prefix;
  if (rank == 0) {
    impl->comm_tag = random_tag();
    st.set(k + "tag", fmt::format("{:016x}/{}", impl->comm_tag, size));
  } else {
    std::string v = st.get(k + "tag", deadline.remaining());
    unsigned long long tag = 0;
    int rank0_size = 0;
    if (std::sscanf(v.c_str(), "%16llx/%d", &tag, &rank0_size) != 2) {
      base::throw_error(ErrorCode::Mismatch, fmt::format("communicator {}: unreadable tag '{}' in the store", k, v));
    }
    if (rank0_size != size) {
      base::throw_error(ErrorCode::Mismatch,
                        fmt::format("rank {} was created with world size {} but rank 0 with {}", rank, size,
                                    rank0_size),
                        0);
    }
    impl->comm_tag = tag;
  }

  ProcIdentity me = my_identity();
  bool same_process = true, same_host = true;
  if (size > 1) {
    st.set(k + "proc/" + std::to_string(rank), me.process);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      std::string other = st.get(k + "proc/" + std::to_string(r), deadline.remaining());
      same_process = same_process && other == me.process;
      same_host = same_host && other.rfind(me.host + "/", 0) == 0;
    }
  }

  if (impl->config.shm_requested && rank == 0) {
    base::log_warn("CHORUS_TRANSPORT=shm: the shared-memory transport is not built yet; using tcp over loopback");
  }
  TransportKind kind = impl->config.transport;
  if (kind == TransportKind::Auto) kind = same_process ? TransportKind::InProc : TransportKind::Tcp;
  if (kind == TransportKind::InProc) {
    impl->transport = transport::InProcTransport::connect(st, k + "inproc", rank, size, impl->comm_tag, deadline);
    // Rank 0 must not go away before every rank has attached to its fabric.
    st.set(k + "attached/" + std::to_string(rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(k + "attached/" + std::to_string(r));
    st.wait(keys, deadline.remaining());
  } else {
    transport::TcpOptions topts;
    topts.ifname = impl->config.socket_ifname;
    topts.socket_buffer_bytes = impl->config.socket_buffer_bytes;
    impl->transport = transport::TcpTransport::connect(st, k + "tcp/", rank, size, impl->comm_tag, topts,
                                                       store_address(&st), same_host, deadline);
  }
  impl->options.transport = kind;
  const tune::LinkEntry& tuned = tune::entry_for(impl->config.tuning.get(), impl->transport->name(), size);
  impl->link = tuned.link;
  for (int c = 0; c < algo::kNumCollectives; ++c) {
    impl->calibration[c] = tune::calibration_for(tuned, static_cast<algo::Collective>(c));
  }
  impl->tuning_source = fmt::format("{} ({} ranks entry)",
                                    impl->config.tuning ? impl->config.tuning->source : std::string("built-in tuning"),
                                    tuned.world_size);
  impl->sent_to.assign(static_cast<size_t>(size), 0);
  impl->received_from.assign(static_cast<size_t>(size), 0);
  base::log_info("communicator ready: {} ranks, transport {}, tag {:016x}, slice {} bytes, timeout {} ms, cost model "
                 "from {} (alpha {:.2f} us, overhead {:.2f} us, beta {:.3f} ns/B, gamma {:.3f} ns/B)",
                 size, impl->transport->name(), impl->comm_tag, impl->config.slice_bytes, impl->config.timeout.count(),
                 impl->tuning_source,
                 impl->link.alpha * 1e6, impl->link.overhead * 1e6, impl->link.beta * 1e9, impl->link.gamma * 1e9);
  return impl;
}

}  // namespace core
}  // namespace chorus
