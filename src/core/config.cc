#include "core/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "base/error.h"
#include "core/adapt.h"

namespace chorus::core {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<long long> env_int(const char* name) {
  auto v = env_string(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0') {
    base::throw_error(ErrorCode::InvalidArgument, fmt::format("{}='{}' is not an integer", name, *v));
  }
  return x;
}

std::array<std::string, algo::kNumCollectives> parse_algorithm_spec(std::string_view spec) {
  std::array<std::string, algo::kNumCollectives> forced;
  auto trim = [](std::string_view t) {
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
    return t;
  };
  auto all_valid = [] {
    std::string out;
    for (int i = 0; i < algo::kNumCollectives; ++i) {
      auto c = static_cast<algo::Collective>(i);
      out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", algo::collective_name(c), algo::algorithm_names(c));
    }
    return out;
  };
  spec = trim(spec);
  if (spec.find(':') == std::string_view::npos) {
    bool any = false;
    for (int i = 0; i < algo::kNumCollectives; ++i) {
      auto c = static_cast<algo::Collective>(i);
      if (algo::find_algorithm(c, spec)) {
        forced[i] = std::string(spec);
        any = true;
      }
    }
    if (!any) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_ALGO='{}': no collective has an algorithm of that name (valid: {})", spec,
                                    all_valid()));
    }
    return forced;
  }
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = trim(spec.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_ALGO: '{}' is not of the form collective:algorithm", item));
    }
    std::string_view cname = trim(item.substr(0, colon)), aname = trim(item.substr(colon + 1));
    algo::Collective c;
    if (!algo::parse_collective(cname, &c)) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_ALGO: unknown collective '{}' (valid: {})", cname, all_valid()));
    }
    if (!algo::find_algorithm(c, aname)) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_ALGO: {} has no algorithm '{}' (valid: {})", algo::collective_name(c),
                                    aname, algo::algorithm_names(c)));
    }
    forced[static_cast<int>(c)] = std::string(aname);
  }
  return forced;
}

const char* transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::Auto: return "auto";
    case TransportKind::InProc: return "inproc";
    case TransportKind::Tcp: return "tcp";
    case TransportKind::Shm: return "shm";
  }
  return "?";
}

Config resolve_config(const CommOptions& o) {
  Config c;
  c.timeout = o.timeout;
  if (o.timeout == kDefaultTimeout) {
    if (auto ms = env_int("CHORUS_TIMEOUT_MS")) {
      if (*ms <= 0) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_TIMEOUT_MS must be positive");
      c.timeout = std::chrono::milliseconds(*ms);
    }
  }
  if (c.timeout.count() <= 0) base::throw_error(ErrorCode::InvalidArgument, "CommOptions::timeout must be positive");

  c.transport = o.transport;
  if (c.transport == TransportKind::Auto) {
    if (auto t = env_string("CHORUS_TRANSPORT")) {
      if (*t == "auto") {
        c.transport = TransportKind::Auto;
      } else if (*t == "inproc") {
        c.transport = TransportKind::InProc;
      } else if (*t == "tcp") {
        c.transport = TransportKind::Tcp;
      } else if (*t == "shm") {
        c.transport = TransportKind::Shm;
      } else {
        base::throw_error(ErrorCode::InvalidArgument,
                          fmt::format("CHORUS_TRANSPORT='{}' is not one of auto, inproc, tcp, shm", *t));
      }
    }
  }

  c.socket_ifname = o.socket_ifname;
  if (c.socket_ifname.empty()) c.socket_ifname = env_string("CHORUS_SOCKET_IFNAME").value_or("");

  size_t slice = o.slice_bytes;
  if (slice == 0) {
    if (auto s = env_string("CHORUS_SLICE_BYTES")) {
      auto v = parse_size(*s);
      if (!v || *v == 0) {
        base::throw_error(ErrorCode::InvalidArgument, fmt::format("CHORUS_SLICE_BYTES='{}' is not a size", *s));
      }
      slice = *v;
    }
  }
  if (slice) c.slice_bytes = slice;
  if (c.slice_bytes < 64) c.slice_bytes = 64;

  auto size_var = [](const char* name, size_t lo, size_t hi, size_t* out) {
    if (auto v = env_string(name)) {
      auto n = parse_size(*v);
      if (!n || *n < lo || *n > hi) {
        base::throw_error(ErrorCode::InvalidArgument,
                          fmt::format("{}='{}' is not a size between {} and {}", name, *v, lo, hi));
      }
      *out = *n;
    }
  };
  size_var("CHORUS_SHM_RING_BYTES", size_t{64} << 10, size_t{256} << 20, &c.shm_ring_bytes);
  size_var("CHORUS_SHM_SINGLE_COPY_BYTES", 0, size_t{1} << 40, &c.shm_single_copy_bytes);
  size_var("CHORUS_SHM_SINGLE_COPY_BUSY_BYTES", 0, size_t{1} << 40, &c.shm_single_copy_busy_bytes);
  size_var("CHORUS_SHM_SINGLE_COPY_SHARED_CORE_BYTES", 0, size_t{1} << 40, &c.shm_single_copy_shared_core_bytes);
  size_var("CHORUS_SHM_STREAM_IDLE_BYTES", 0, size_t{1} << 50, &c.shm_stream_idle_bytes);
  size_var("CHORUS_SHM_STREAM_PIECE_BYTES", 0, size_t{1} << 50, &c.shm_stream_piece_bytes);
  size_var("CHORUS_SHM_RING_FIRST_BYTES", 0, size_t{1} << 50, &c.shm_ring_first_bytes);
  size_var("CHORUS_SHM_RING_FIRST_IN_PLACE_BYTES", 0, size_t{1} << 50, &c.shm_ring_first_in_place_bytes);
  size_var("CHORUS_TCP_READ_AHEAD", 0, size_t{16} << 20, &c.tcp_read_ahead_bytes);
  // auto (-1), 0 or 1; `one` says what 1 means, for the error message.
  auto auto_01_var = [](const char* name, const char* one, int* out) {
    if (auto v = env_string(name)) {
      if (*v == "auto" || *v == "0" || *v == "1") {
        *out = *v == "auto" ? -1 : *v == "1" ? 1 : 0;
      } else {
        base::throw_error(ErrorCode::InvalidArgument,
                          fmt::format("{}='{}' is not one of auto, 0 (never) or 1 ({})", name, *v, one));
      }
    }
  };
  auto_01_var("CHORUS_SHM_CMA", "wherever the kernel allows cross-memory attach", &c.shm_cma);
  auto_01_var("CHORUS_STREAM_COPY", "every local copy of at least 1 MiB", &c.stream_copy);
  if (auto v = env_int("CHORUS_SHM_ADAPT")) c.shm_adapt = *v != 0;
  if (auto v = env_int("CHORUS_SHM_IDLE_RING_FIRST")) c.shm_idle_ring_first = *v != 0;
  if (auto v = env_int("CHORUS_SHM_EXPLORE_US")) {
    if (*v < 0 || *v > 100000000) {
      base::throw_error(ErrorCode::InvalidArgument, "CHORUS_SHM_EXPLORE_US is out of range (0 to 100000000)");
    }
    c.shm_explore_us = static_cast<uint32_t>(*v);
  }
  if (auto v = env_int("CHORUS_SHM_REGISTERED")) c.shm_registered = *v != 0;
  if (auto v = env_int("CHORUS_SHM_MEMBARRIER")) c.shm_membarrier = *v != 0;
  if (auto v = env_int("CHORUS_SHM_SPIN")) {
    if (*v < 0 || *v > 100000000) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_SHM_SPIN is out of range");
    c.shm_spin = static_cast<int>(*v);
  }
  if (auto v = env_int("CHORUS_SHM_ADAPTIVE_SPIN")) {
    if (*v != 0 && *v != 1) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_SHM_ADAPTIVE_SPIN must be 0 or 1");
    c.shm_adaptive_spin = *v == 1;
  }
  if (auto v = env_int("CHORUS_TCP_SPIN")) {
    if (*v < 0 || *v > 100000000) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_TCP_SPIN is out of range");
    c.tcp_spin = static_cast<int>(*v);
  }
  if (auto v = env_int("CHORUS_TCP_ADAPTIVE_SPIN")) {
    if (*v != 0 && *v != 1) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_TCP_ADAPTIVE_SPIN must be 0 or 1");
    c.tcp_adaptive_spin = *v == 1;
  }
  if (auto ms = env_int("CHORUS_MISMATCH_CHECK_MS")) {
    if (*ms < 0) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_MISMATCH_CHECK_MS must be >= 0");
    c.mismatch_check = std::chrono::milliseconds(*ms);
  }
  if (auto ms = env_int("CHORUS_SHRINK_GRACE_MS")) {
    if (*ms < 0) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_SHRINK_GRACE_MS must be >= 0");
    c.shrink_grace = std::chrono::milliseconds(*ms);
  }
  c.fault = o.fault.empty() ? env_string("CHORUS_FAULT").value_or("") : o.fault;
  if (auto spec = env_string("CHORUS_ALGO")) c.forced_algorithm = parse_algorithm_spec(*spec);
  if (auto v = env_int("CHORUS_ADAPT")) {
    if (*v != 0 && *v != 1) base::throw_error(ErrorCode::InvalidArgument, "CHORUS_ADAPT must be 0 or 1");
    c.adapt_rounds = *v ? kAdaptDefaultRounds : 0;
  }
  if (auto v = env_int("CHORUS_ADAPT_ROUNDS")) {
    if (*v < 1 || *v > kAdaptMaxRounds) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_ADAPT_ROUNDS must be between 1 and {}", kAdaptMaxRounds));
    }
    if (c.adapt_rounds) c.adapt_rounds = static_cast<int>(*v);
  }
  c.auth_token = env_string("CHORUS_AUTH_TOKEN").value_or("");
  if (auto path = env_string("CHORUS_TUNING_FILE")) {
    c.tuning = std::make_shared<const tune::Tuning>(tune::load_tuning_file(*path));
  }
  if (auto v = env_string("CHORUS_COPY_GBPS")) {
    char* end = nullptr;
    const double gbps = std::strtod(v->c_str(), &end);
    if (v->empty() || end == nullptr || *end != '\0' || !(gbps > 0) || gbps > 1e6) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_COPY_GBPS='{}' is not a copy rate in GB/s (a number above 0)", *v));
    }
    c.copy_gbps = gbps;
  }

  // Socket sizes, int fields of at most 1 GiB, set only where the variable is: CHORUS_SOCKET_BUFFER_BYTES
  // (both buffers of every connection), and for same-host connections the receive buffer (0: autotuned as the
  // others) and TCP_NOTSENT_LOWAT (0: the kernel's).
  auto socket_size_var = [&size_var](const char* name, int* out) {
    if (!env_string(name)) return;
    size_t v = 0;
    size_var(name, 0, size_t{1} << 30, &v);
    *out = static_cast<int>(v);
  };
  socket_size_var("CHORUS_SOCKET_BUFFER_BYTES", &c.socket_buffer_bytes);
  socket_size_var("CHORUS_TCP_SAME_HOST_RCVBUF", &c.tcp_same_host_rcvbuf);
  socket_size_var("CHORUS_TCP_SAME_HOST_NOTSENT_LOWAT", &c.tcp_same_host_notsent_lowat);
  if (auto v = env_string("CHORUS_TCP_CONGESTION")) {
    // A name the kernel does not know is found when the connections are made (the allowed list is the kernel's).
    const bool plausible = !v->empty() && v->size() < 16 && std::all_of(v->begin(), v->end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
    });
    if (!plausible) {
      base::throw_error(ErrorCode::InvalidArgument,
                        fmt::format("CHORUS_TCP_CONGESTION='{}' is not a congestion control name ('auto', 'system', "
                                    "or an algorithm such as reno, cubic or bbr)",
                                    *v));
    }
    c.tcp_congestion = *v;
  }
  return c;
}

}  // namespace chorus::core
