// Every environment variable Chorus reads, in one place, resolved once per communicator.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "algo/registry.h"
#include "base/units.h"
#include "tune/cost_model.h"

#include "chorus/communicator.h"

namespace chorus::core {

struct Config {
  std::chrono::milliseconds timeout{kDefaultTimeout};
  TransportKind transport = TransportKind::Auto;
  std::string socket_ifname;
  size_t slice_bytes = 512 * 1024;
  int socket_buffer_bytes = 0;
  // CHORUS_TCP_SAME_HOST_RCVBUF (transport::TcpOptions::same_host_receive_buffer_bytes); -1: the transport's own
  int tcp_same_host_rcvbuf = -1;
  // CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT (transport::TcpOptions::same_host_notsent_lowat_bytes); -1: the transport's
  int tcp_same_host_notsent_lowat = -1;
  std::string tcp_congestion = "auto";  // CHORUS_TCP_CONGESTION (transport::TcpOptions::congestion)
  // Shared memory: CHORUS_SHM_RING_BYTES, CHORUS_SHM_SINGLE_COPY_BYTES, CHORUS_SHM_CMA (cross-memory attach:
  // 1 wherever the kernel allows it, 0 never, auto (-1) where a probe at creation finds it pays),
  // CHORUS_SHM_STREAM_IDLE_BYTES (an idle sender's payloads stream through the ring from this many bytes per
  // operation and peer; 0: never), CHORUS_SHM_RING_FIRST_BYTES (adapting, the exchanges of reducing
  // collectives' calls of at least this many bytes start through the rings; 0: as the probe says),
  // CHORUS_SHM_REGISTERED (0: never read a peer's registered memory in place), CHORUS_SHM_SPIN, CHORUS_SHM_MEMBARRIER
  // (0: wake-ups checked with a locked instruction per frame).
  size_t shm_ring_bytes = 1 << 20;
  size_t shm_single_copy_bytes = 64 << 10;
  size_t shm_single_copy_busy_bytes = 8 << 10;
  size_t shm_single_copy_shared_core_bytes = 512 << 10;
  int shm_cma = -1;
  bool shm_adapt = true;
  uint32_t shm_explore_us = 1000000;
  size_t shm_stream_idle_bytes = size_t{2} << 20;
  size_t shm_ring_first_bytes = size_t{4} << 20;
  size_t shm_ring_first_in_place_bytes = size_t{64} << 10;
  bool shm_idle_ring_first = true;
  size_t shm_stream_piece_bytes = size_t{128} << 10;
  bool shm_registered = true;
  bool shm_membarrier = true;
  int shm_spin = -1;
  // CHORUS_SHM_ADAPTIVE_SPIN (1, the default; 0: off): shm waits poll for an adaptive time before they first
  // sleep (ShmOptions::adaptive_spin).
  bool shm_adaptive_spin = true;
  // CHORUS_STREAM_COPY: auto (-1), 0 or 1; how a rank copies its own large blocks (algo::local_copy).
  int stream_copy = -1;
  // CHORUS_TCP_SPIN: polls of an empty socket before a tcp receive sleeps (-1: chosen from the core count).
  int tcp_spin = -1;
  // CHORUS_TCP_ADAPTIVE_SPIN (1, the default; 0: off): small tcp receives poll for an adaptive time
  // (TcpOptions::adaptive_spin).
  bool tcp_adaptive_spin = true;
  // CHORUS_TCP_READ_AHEAD: bytes a tcp receive of a small frame may read past it in the same syscall (0: none).
  size_t tcp_read_ahead_bytes = 16 << 10;
  // CHORUS_MISMATCH_CHECK_MS: how long a collective waits before the ranks compare what they are doing
  // (0 disables the check).
  std::chrono::milliseconds mismatch_check{1000};
  // CHORUS_SHRINK_GRACE_MS: how long shrink() and replace_lost() wait for a rank that neither called them nor
  // is known dead before presuming it dead (capped at the timeout).
  std::chrono::milliseconds shrink_grace{10000};
  // CHORUS_FAULT (or CommOptions::fault): the fault injection spec, unparsed (bootstrap parses it; empty: none).
  std::string fault;
  // CHORUS_ALGO: the algorithm forced for each collective (empty: the cost model chooses).
  std::array<std::string, algo::kNumCollectives> forced_algorithm;
  // CHORUS_AUTH_TOKEN: the job's secret that authenticates every TCP connection between ranks (empty: none).
  // Never log it or put it in an error message; anything that prints a Config must leave it out.
  std::string auth_token;
  // CHORUS_ADAPT=1: time near-tie algorithms on the user's calls and keep the fastest (core/adapt.h), over
  // CHORUS_ADAPT_ROUNDS rounds (default 4). 0: off. Rank 0's setting is the communicator's (bootstrap), since
  // every rank must run the same schedule.
  int adapt_rounds = 0;
  // CHORUS_TUNING_FILE, loaded; null when unset.
  std::shared_ptr<const tune::Tuning> tuning;
  // CHORUS_COPY_GBPS: the copy rate the tuning is chosen by (tune::entry_for), instead of measuring it
  // (base::copy_rate_gbps); 0: measure where the tuning needs it. Rank 0's figure is the communicator's.
  double copy_gbps = 0;
};

// Parses CHORUS_ALGO's syntax: one algorithm name for every collective that has it, or
// "collective:name;collective:name". Throws Error(InvalidArgument) for an unknown collective, or a name no
// collective (or not the named one) has, listing the valid names.
std::array<std::string, algo::kNumCollectives> parse_algorithm_spec(std::string_view spec);

// Options win over the environment where they were set; the environment wins over built-in defaults.
// Throws Error(InvalidArgument) naming a malformed variable.
Config resolve_config(const CommOptions& options);

// Environment access helpers (also used by the launcher detection).
std::optional<std::string> env_string(const char* name);
std::optional<long long> env_int(const char* name);  // throws InvalidArgument if present but not an integer
// Parses "512", "64K", "1M", "2G" (binary units): base::parse_size.
using base::parse_size;

const char* transport_kind_name(TransportKind kind);

}  // namespace chorus::core
