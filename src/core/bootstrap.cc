// Communicator creation: rendezvous through the store, choose and connect the transport.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "base/cpu.h"
#include "base/error.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/net.h"
#include "core/communicator_impl.h"
#include "core/trace.h"
#include "kernels/copy.h"
#include "transport/fault/fault_transport.h"
#include "transport/hybrid_transport.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {

Communicator::Impl::~Impl() {
  // Queued asynchronous operations run to completion (or fail) before the connections close.
  engine.reset();
  if (transport) transport->close();
  if (trace_opened) core::trace::communicator_closed();  // the last one writes the trace file
}

namespace core {

namespace {

std::string read_link(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// What proves two ranks share a host: the same kernel boot, network namespace and IPC namespace (the one
// POSIX shared memory lives in). And a process: the same host and pid.
struct ProcIdentity {
  std::string host;     // boot id + network namespace + IPC namespace
  std::string process;  // host + pid
};

ProcIdentity my_identity() {
  ProcIdentity id;
  id.host = base::read_first_line("/proc/sys/kernel/random/boot_id") + "/" + read_link("/proc/self/ns/net") + "/" +
            read_link("/proc/self/ns/ipc");
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
  // Checked before anything is published, so a bad spec fails every rank at once.
  const std::vector<transport::FaultSpec> all_faults = transport::parse_fault_spec(impl->config.fault, size);
  const std::vector<transport::FaultSpec> faults = transport::faults_for_rank(all_faults, rank);
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
    // The copy rate that picks among the tuning's kinds of host (tune::entry_for): CHORUS_COPY_GBPS, else
    // measured here if the tuning has more than one kind, copying until the fastest copy is past the tuning's
    // highest line (then more copies could not change a choice) or the probe's rounds are done. The probe's
    // progress is the process's: a second communicator copies only if it needs more than the first did.
    double copy = impl->config.copy_gbps;
    if (copy <= 0 && tune::distinguishes_hosts(impl->config.tuning.get())) {
      const double line = tune::copy_rate_settles_at(impl->config.tuning.get());
      copy = base::copy_rate_gbps(line);
      const int rounds = base::copy_probe_rounds();
      base::log_info(
          "copy rate {:.1f} GB/s, the fastest of {} cop{} of {} MiB ({}: the tuning's kinds of host "
          "part at {:.1f} GB/s)",
          copy, rounds, rounds == 1 ? "y" : "ies", base::kCopyProbeBytes >> 20,
          copy >= line ? "past every line, so no more copies" : "all the probe's copies", line);
    }
    // Rank 0 keeps the figure as the others will read it.
    const std::string copy_text = fmt::format("{:.3f}", copy);
    impl->copy_gbps = std::strtod(copy_text.c_str(), nullptr);
    // CHORUS_ADAPT and the copy rate travel with the tag: every rank must run the same schedule of timed
    // near-ties and agreements, and choose from the same tuning entry, so rank 0's figures are the
    // communicator's.
    st.set(k + "tag", fmt::format("{:016x}/{}/{}/{}", impl->comm_tag, size, impl->config.adapt_rounds, copy_text));
  } else {
    std::string v = st.get(k + "tag", deadline.remaining());
    unsigned long long tag = 0;
    int rank0_size = 0;
    int rank0_adapt = 0;
    double rank0_copy = 0;
    if (std::sscanf(v.c_str(), "%16llx/%d/%d/%lf", &tag, &rank0_size, &rank0_adapt, &rank0_copy) != 4) {
      base::throw_error(ErrorCode::Mismatch, fmt::format("communicator {}: unreadable tag '{}' in the store", k, v));
    }
    if (rank0_size != size) {
      base::throw_error(ErrorCode::Mismatch,
                        fmt::format("rank {} was created with world size {} but rank 0 with {}", rank, size,
                                    rank0_size),
                        0);
    }
    impl->comm_tag = tag;
    impl->copy_gbps = rank0_copy;
    if (rank0_adapt != impl->config.adapt_rounds) {
      base::log_warn("CHORUS_ADAPT/CHORUS_ADAPT_ROUNDS differ from rank 0's; rank 0's ({}) applies to every rank",
                     rank0_adapt ? fmt::format("on, {} rounds", rank0_adapt) : std::string("off"));
      impl->config.adapt_rounds = rank0_adapt;
    }
  }

  ProcIdentity me = my_identity();
  bool same_process = true;
  std::vector<int> local{rank};  // ranks on this host, ascending
  std::vector<std::string> hosts(static_cast<size_t>(size));
  hosts[rank] = me.host;
  // Each rank's share of its host's CPUs travels with its identity: "process|cpu signature".
  std::vector<std::string> cpus(static_cast<size_t>(size));
  double host_ranks_per_core = 1;  // on this rank's host
  cpus[rank] = base::cpu_signature();
  if (size > 1) {
    st.set(k + "proc/" + std::to_string(rank), me.process + "|" + cpus[rank]);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      std::string other = st.get(k + "proc/" + std::to_string(r), deadline.remaining());
      if (const size_t bar = other.find('|'); bar != std::string::npos) {
        cpus[r] = other.substr(bar + 1);
        other.resize(bar);
      }
      same_process = same_process && other == me.process;
      if (other.rfind(me.host + "/", 0) == 0) local.push_back(r);
      hosts[r] = other.substr(0, other.rfind('/'));
    }
    std::sort(local.begin(), local.end());
  }
  // Hosts are numbered in the order of their lowest rank; every rank computes the same numbering.
  {
    algo::Topology& topo = impl->topology;
    std::vector<std::string> seen;
    for (int r = 0; r < size; ++r) {
      auto it = std::find(seen.begin(), seen.end(), hosts[r]);
      topo.host_of.push_back(static_cast<int>(it - seen.begin()));
      if (it == seen.end()) seen.push_back(hosts[r]);
    }
    topo.hosts = static_cast<int>(seen.size());
    topo.ranks_per_host = size % topo.hosts == 0 ? size / topo.hosts : 0;
    for (int h = 0; h < topo.hosts && topo.ranks_per_host; ++h) {
      if (static_cast<int>(topo.ranks_on(h).size()) != topo.ranks_per_host) topo.ranks_per_host = 0;
    }
    // Per host: its ranks over the CPUs they can use together. The most crowded host's figure is the job's;
    // every rank computes it from the same exchanged figures, so every rank makes the same choices from it.
    for (int h = 0; h < topo.hosts; ++h) {
      std::vector<std::string> sigs;
      for (int r : topo.ranks_on(h)) sigs.push_back(cpus[r]);
      const double rpc = static_cast<double>(sigs.size()) / base::cores_of(sigs);
      impl->ranks_per_core = std::max(impl->ranks_per_core, rpc);
      if (h == topo.host_of[rank]) host_ranks_per_core = rpc;
    }
  }
  const bool all_local = static_cast<int>(local.size()) == size;
  impl->local_size = static_cast<int>(local.size());

  TransportKind kind = impl->config.transport;
  if (kind == TransportKind::Auto) {
    kind = same_process ? TransportKind::InProc : all_local ? TransportKind::Shm : TransportKind::Tcp;
  }
  if (kind == TransportKind::Shm && !all_local) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("CHORUS_TRANSPORT=shm needs every rank on one host, but only {} of {} share rank "
                                  "{}'s host; use auto (shared memory inside hosts, tcp between them) or tcp",
                                  local.size(), size, rank));
  }
  transport::ShmOptions shm;
  shm.ring_bytes = impl->config.shm_ring_bytes;
  shm.single_copy_bytes = impl->config.shm_single_copy_bytes;
  shm.single_copy_shared_core_bytes = impl->config.shm_single_copy_shared_core_bytes;
  shm.single_copy_busy_bytes = impl->config.shm_single_copy_busy_bytes;
  shm.cma = impl->config.shm_cma;
  shm.adapt = impl->config.shm_adapt;
  shm.explore_us = impl->config.shm_explore_us;
  shm.stream_idle_bytes = impl->config.shm_stream_idle_bytes;
  shm.ring_first_bytes = impl->config.shm_ring_first_bytes;
  shm.ring_first_in_place_bytes = impl->config.shm_ring_first_in_place_bytes;
  shm.idle_ring_first = impl->config.shm_idle_ring_first;
  shm.allow_registered = impl->config.shm_registered;
  shm.allow_membarrier = impl->config.shm_membarrier;
  shm.spin = impl->config.shm_spin;
  shm.adaptive_spin = impl->config.shm_adaptive_spin;
  shm.stream_piece_bytes = impl->config.shm_stream_piece_bytes;
  // Waits yield the core between polls where this host's ranks take turns on its CPUs.
  shm.oversubscribed = host_ranks_per_core > 1 ? 1 : 0;
  transport::TcpOptions topts;
  topts.ifname = impl->config.socket_ifname;
  topts.socket_buffer_bytes = impl->config.socket_buffer_bytes;
  topts.same_host_receive_buffer_bytes = impl->config.tcp_same_host_rcvbuf;
  topts.same_host_notsent_lowat_bytes = impl->config.tcp_same_host_notsent_lowat;
  topts.congestion = impl->config.tcp_congestion;
  topts.auth_token = impl->config.auth_token;
  topts.oversubscribed = host_ranks_per_core > 1 ? 1 : 0;
  topts.spin = impl->config.tcp_spin;
  topts.adaptive_spin = impl->config.tcp_adaptive_spin;
  topts.read_ahead_bytes = impl->config.tcp_read_ahead_bytes;
  if (kind == TransportKind::InProc) {
    impl->transport = transport::InProcTransport::connect(st, k + "inproc", rank, size, impl->comm_tag, deadline);
    // Rank 0 must not go away before every rank has attached to its fabric.
    st.set(k + "attached/" + std::to_string(rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(k + "attached/" + std::to_string(r));
    st.wait(keys, deadline.remaining());
  } else if (kind == TransportKind::Shm) {
    auto sm = transport::ShmTransport::connect(st, k + "shm/", rank, size, local, impl->comm_tag, shm, deadline);
    impl->cross_memory_attach = sm->single_copy();
    impl->attach_cost = sm->attach_cost();
    impl->adapts_single_copy = sm->adapts();
    impl->transport = std::move(sm);
  } else if (impl->config.transport == TransportKind::Auto && local.size() > 1) {
    // Several hosts, several ranks on ours: shared memory inside, tcp across.
    auto tcp = transport::TcpTransport::connect(st, k + "tcp/", rank, size, impl->comm_tag, topts, store_address(&st),
                                                false, deadline);
    auto sm = transport::ShmTransport::connect(st, k + "shm/", rank, size, local, impl->comm_tag, shm, deadline);
    impl->cross_memory_attach = sm->single_copy();
    impl->attach_cost = sm->attach_cost();
    impl->adapts_single_copy = sm->adapts();
    std::vector<bool> is_local(static_cast<size_t>(size), false);
    for (int r : local) is_local[static_cast<size_t>(r)] = true;
    impl->transport = std::make_unique<transport::HybridTransport>(std::move(sm), std::move(tcp), std::move(is_local));
  } else {
    impl->transport = transport::TcpTransport::connect(st, k + "tcp/", rank, size, impl->comm_tag, topts,
                                                       store_address(&st), all_local, deadline);
  }
  impl->local_ranks = local;
  impl->options.transport = kind;
  for (const transport::FaultSpec& f : all_faults) {
    if (kind == TransportKind::InProc && transport::fault_needs_stream(f.action)) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("fault spec (CHORUS_FAULT / CommOptions::fault): '{}' needs a byte stream to "
                                    "spoil (tcp or shm); the in-process transport supports drop, delay and kill only",
                                    f.text));
    }
  }
  if (!faults.empty()) {
    base::log_warn("fault injection armed: {}", transport::describe_faults(faults));
    impl->transport =
        std::make_unique<transport::FaultTransport>(std::move(impl->transport), faults, impl->comm_tag);
  }
  // Children (split, shrink, replace_lost) copy these options: they are not armed again, or a rank renumbered
  // by a shrink would inherit a dead rank's fault.
  impl->options.fault = "none";
  Communicator::Impl* raw = impl.get();
  impl->transport->set_stall_hook([raw] { raw->on_stall(); });
  // A hybrid's choices are governed by its slow links; the shared-memory figures describe the inside of a host.
  const bool hybrid = impl->transport->name() == "shm+tcp";
  std::string_view tuned_as = hybrid ? "tcp" : impl->transport->name();
  const double copy_gbps = impl->copy_gbps;
  const tune::LinkEntry& tuned = tune::entry_for(impl->config.tuning.get(), tuned_as, size, copy_gbps);
  impl->link = tuned.link;
  impl->intra_link =
      hybrid ? tune::entry_for(impl->config.tuning.get(), "shm", static_cast<int>(local.size()), copy_gbps).link
             : tuned.link;
  int interpolated_from[2] = {0, 0};
  // Measured tables also describe whether the ranks had a core each or took turns on the cores; they apply
  // only to a host on the same side (tune::same_core_regime).
  const double ranks_per_core = impl->ranks_per_core;
  const bool regime_matches = tune::same_core_regime(tuned.ranks_per_core, ranks_per_core);
  // Tables that would apply (this world size, no hybrid) but were measured in the other regime: said in the log.
  const bool regime_drops = !hybrid && tuned.world_size == size && !regime_matches;
  bool tables_dropped = false;
  for (int c = 0; c < algo::kNumCollectives; ++c) {
    impl->calibration[c] = tune::calibration_for(tuned, static_cast<algo::Collective>(c));
    // Measured times describe exactly the world size and transport they were measured at; a world size between
    // two measured ones gets the tables of both, interpolated.
    if (hybrid || tuned.world_size != size || !regime_matches) {
      for (algo::Calibration& cal : impl->calibration[c]) {
        tables_dropped = tables_dropped || (regime_drops && !cal.measured.empty());
        cal.measured.clear();
        cal.registered.clear();
        cal.registered_in_place.clear();
      }
    }
    if (!hybrid && tuned.world_size != size) {
      int lo = 0, hi = 0;
      if (tune::interpolate_measured(impl->config.tuning.get(), tuned_as, size, static_cast<algo::Collective>(c),
                                     impl->calibration[c], &lo, &hi, ranks_per_core, copy_gbps) > 0) {
        interpolated_from[0] = lo;
        interpolated_from[1] = hi;
      }
    }
    // Calls with CallOptions::registered: the tables measured with registered buffers, out of place and in
    // place, where there are any (only at a measured world size; an interpolated one keeps the heap tables).
    for (int in_place = 0; in_place < 2; ++in_place) {
      const auto& cals = impl->calibration[c];
      const bool any = std::any_of(cals.begin(), cals.end(), [in_place](const algo::Calibration& cal) {
        return !(in_place ? cal.registered_in_place : cal.registered).empty();
      });
      if (!any) continue;  // registered_from stays 0: registered calls use `calibration` (most transports)
      std::vector<algo::Calibration>& reg = impl->calibration_registered[in_place][c];
      reg = cals;
      impl->registered_from[in_place][c] = static_cast<uint64_t>(tune::use_registered(reg, in_place != 0));
    }
  }
  std::string tables_note;
  if (interpolated_from[0]) {
    tables_note = fmt::format("; measured tables interpolated between {} and {} ranks", interpolated_from[0],
                              interpolated_from[1]);
  } else if (tables_dropped) {
    tables_note = fmt::format("; its measured tables not used: measured at {:.2f} ranks per core, this job runs "
                              "{:.2f} on its most crowded host",
                              tuned.ranks_per_core, ranks_per_core);
  }
  std::string host_note;
  if (tuned.copy_gbps > 0 && copy_gbps > 0) {
    host_note = fmt::format(", measured on a host copying {:.1f} GB/s; this one {:.1f}", tuned.copy_gbps, copy_gbps);
  }
  impl->tuning_source = fmt::format("{} ({} ranks entry{}{})",
                                    impl->config.tuning ? impl->config.tuning->source : std::string("built-in tuning"),
                                    tuned.world_size, host_note, tables_note);
  impl->sent_to.assign(static_cast<size_t>(size), 0);
  impl->received_from.assign(static_cast<size_t>(size), 0);
  init_op_context(*impl);
  base::log_info(
      "communicator ready: {} ranks, transport {}, tag {:016x}, slice {} bytes, timeout {} ms, cost model "
      "from {} (alpha {:.2f} us, overhead {:.2f} us, beta {:.3f} ns/B, gamma {:.3f} ns/B), large local copies {}",
      size, impl->transport->name(), impl->comm_tag, impl->config.slice_bytes, impl->config.timeout.count(),
      impl->tuning_source, impl->link.alpha * 1e6, impl->link.overhead * 1e6, impl->link.beta * 1e9,
      impl->link.gamma * 1e9, kernels::describe_stream_copy(impl->config.stream_copy));
  trace::set_rank(impl->rank);
  trace::communicator_opened();
  impl->trace_opened = true;
  return impl;
}

}  // namespace core
}  // namespace chorus
