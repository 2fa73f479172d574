// Communicator::from_env: find rank, world size and the store from whichever launcher started us.
#include <fmt/format.h>

#include "base/error.h"
#include "base/logging.h"
#include "base/net.h"
#include "core/communicator_impl.h"
#include "core/config.h"

namespace chorus {

namespace {

struct LaunchInfo {
  int rank = -1;
  int size = -1;
  std::string source;  // which launcher's variables were used
  std::optional<std::string> store_addr;
  std::string store_source;
  bool store_hosted = false;  // a launcher already serves the store
};

std::optional<int> env_rank_value(const char* name) {
  auto v = core::env_int(name);
  if (!v) return std::nullopt;
  if (*v < 0 || *v > (1 << 24)) {
    base::throw_error(ErrorCode::InvalidArgument, fmt::format("{}={} is out of range", name, *v));
  }
  return static_cast<int>(*v);
}

LaunchInfo detect_launch() {
  LaunchInfo info;
  struct Source {
    const char* rank;
    const char* size;
    const char* name;
  };
  const Source sources[] = {
      {"CHORUS_RANK", "CHORUS_WORLD_SIZE", "chorus (CHORUS_RANK/CHORUS_WORLD_SIZE)"},
      {"RANK", "WORLD_SIZE", "torchrun (RANK/WORLD_SIZE)"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI (OMPI_COMM_WORLD_RANK/SIZE)"},
      {"PMI_RANK", "PMI_SIZE", "MPICH/Hydra (PMI_RANK/PMI_SIZE)"},
      {"SLURM_PROCID", "SLURM_NTASKS", "Slurm (SLURM_PROCID/SLURM_NTASKS)"},
  };
  std::string seen;
  for (const Source& s : sources) {
    auto r = env_rank_value(s.rank);
    auto n = env_rank_value(s.size);
    if (r && n) {
      info.rank = *r;
      info.size = *n;
      info.source = s.name;
      break;
    }
    if (r || n) seen += fmt::format(" {} is set but {} is not;", r ? s.rank : s.size, r ? s.size : s.rank);
  }
  if (info.rank < 0) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("Communicator::from_env: no launcher environment found.{} Set CHORUS_RANK and "
                                  "CHORUS_WORLD_SIZE (chorus-run does), or run under torchrun, mpirun or srun",
                                  seen.empty() ? "" : seen));
  }
  if (info.size < 1 || info.rank >= info.size) {
    base::throw_error(ErrorCode::InvalidArgument,
                      fmt::format("Communicator::from_env: rank {} is not below world size {} (from {})", info.rank,
                                  info.size, info.source));
  }

  if (auto a = core::env_string("CHORUS_STORE_ADDR")) {
    info.store_addr = *a;
    info.store_source = "CHORUS_STORE_ADDR";
  } else {
    auto addr = core::env_string("MASTER_ADDR");
    auto port = core::env_int("MASTER_PORT");
    if (addr && port) {
      long long p = *port;
      // torchrun's agent serves torch's own store on MASTER_PORT; ours takes the next port.
      if (core::env_string("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") ++p;
      if (p <= 0 || p > 65535) {
        base::throw_error(ErrorCode::InvalidArgument, fmt::format("MASTER_PORT={} is out of range", *port));
      }
      info.store_addr = base::format_host_port(*addr, static_cast<uint16_t>(p));
      info.store_source = p == *port ? "MASTER_ADDR/MASTER_PORT" : "MASTER_ADDR/MASTER_PORT+1";
    }
  }
  info.store_hosted = core::env_string("CHORUS_STORE_HOSTED").value_or("0") == "1";
  return info;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::from_env(const CommOptions& options) {
  LaunchInfo info = detect_launch();
  core::Config config = core::resolve_config(options);
  std::shared_ptr<Store> store;
  std::shared_ptr<void> keepalive;
  if (!info.store_addr) {
    if (info.size != 1) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("Communicator::from_env: rank {} of {} (from {}) has no store address; set "
                                    "CHORUS_STORE_ADDR=host:port, or MASTER_ADDR and MASTER_PORT",
                                    info.rank, info.size, info.source));
    }
    store = std::make_shared<MemoryStore>();
  } else {
    base::HostPort hp = base::parse_host_port(*info.store_addr, info.store_source);
    TcpStoreOptions sopts;
    sopts.connect_timeout = config.timeout;
    sopts.auth_token = config.auth_token;
    if (info.rank == 0 && !info.store_hosted) {
      // Rank 0 hosts the store for the job; it lives as long as the communicators that use it.
      TcpStoreServerOptions server_options;
      server_options.auth_token = config.auth_token;
      auto server = std::make_shared<TcpStoreServer>(hp.host, hp.port, server_options);
      keepalive = server;
      base::log_info("rank 0 hosts the store on {}", base::format_host_port(hp.host, server->port()));
    }
    store = std::make_shared<TcpStore>(hp.host, hp.port, sopts);
  }
  base::log_info("from_env: rank {} of {} from {}, store {}", info.rank, info.size, info.source,
                 info.store_addr.value_or("in memory"));
  auto comm = create(std::move(store), info.rank, info.size, options);
  comm->impl_->keepalive = std::move(keepalive);
  return comm;
}

}  // namespace chorus
