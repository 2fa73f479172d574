#include "algo/registry.h"

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "algo/algorithms.h"

namespace chorus::algo {

namespace {

// ---- shape helpers ----

int ceil_log2(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }
int floor_pow2(int n) { return n <= 1 ? 1 : static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }
double slices(double bytes, size_t slice) { return std::max(1.0, std::ceil(bytes / static_cast<double>(slice))); }

// T = hops x alpha + messages x overhead + bytes x beta + reduced bytes x gamma: hops are the latencies on the
// critical path, messages the sends and receives the busiest rank handles, bytes what it sends, reduced what
// it combines.
Cost model(const LinkModel& l, double hops, double messages, double bytes, double reduced) {
  return {hops * l.alpha + messages * l.overhead, bytes * l.beta + reduced * l.gamma};
}

// Children of virtual rank v in a binomial tree of n (as binomial.cc builds it).
int binomial_children(int v, int n) {
  int mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;
  int c = 0;
  for (int m = mask >> 1; m > 0; m >>= 1) c += v + m < n;
  return c;
}
// Size of virtual rank v's subtree in a binomial tree of n.
int binomial_subtree(int v, int n) {
  int mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;
  return std::min(mask, n - v);
}

// ---- exact traffic of the algorithms in ring.cc, binomial.cc, pairwise.cc, linear.cc, composite.cc, direct.cc

Traffic none(const CallShape&) { return {}; }

Traffic all_reduce_ring_traffic(const CallShape& s) {
  Traffic t;
  const int n = s.size, r = s.rank;
  if (n == 1) return t;
  Partition p{s.count, n};
  auto seg = [&](int i) -> uint64_t { return p.size(mod(i, n)) * s.esize; };
  t.sent = seg(r - 1);
  for (int step = 0; step < 2 * (n - 1); ++step) {
    int got = step < n - 1 ? r - step - 2 : r - (step - (n - 1)) - 1;
    t.received += seg(got);
    if (step + 1 < 2 * (n - 1)) t.sent += seg(got);
  }
  return t;
}

Traffic block_ring_traffic(const CallShape& s) {  // all_gather and reduce_scatter rings
  uint64_t b = static_cast<uint64_t>(s.size - 1) * s.count * s.esize;
  return {b, b};
}

Traffic all_to_all_pairwise_traffic(const CallShape& s) { return block_ring_traffic(s); }

Traffic reduce_scatter_pairwise_traffic(const CallShape& s) { return block_ring_traffic(s); }

Traffic broadcast_binomial_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  int v = mod(s.rank - s.root, s.size);
  uint64_t k = s.count * s.esize;
  return {binomial_children(v, s.size) * k, v == 0 ? 0 : k};
}

Traffic reduce_binomial_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  int v = mod(s.rank - s.root, s.size);
  uint64_t k = s.count * s.esize;
  return {v == 0 ? 0 : k, binomial_children(v, s.size) * k};
}

Traffic all_reduce_reduce_broadcast_traffic(const CallShape& s) {
  CallShape z = s;
  z.root = 0;
  Traffic a = reduce_binomial_traffic(z), b = broadcast_binomial_traffic(z);
  return {a.sent + b.sent, a.received + b.received};
}

Traffic all_reduce_direct_traffic(const CallShape& s) {
  Traffic t;
  const int n = s.size, r = s.rank;
  if (n == 1) return t;
  Partition p{s.count, n};
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    t.sent += p.size(q) * s.esize;      // my contribution to q's slice
    t.received += p.size(q) * s.esize;  // q's reduced slice
  }
  t.sent += static_cast<uint64_t>(n - 1) * p.size(r) * s.esize;      // my reduced slice to everyone
  t.received += static_cast<uint64_t>(n - 1) * p.size(r) * s.esize;  // everyone's contribution to mine
  return t;
}

Traffic broadcast_chain_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  uint64_t k = s.count * s.esize;
  int v = mod(s.rank - s.root, s.size);
  return {v == s.size - 1 ? 0 : k, v == 0 ? 0 : k};
}

Traffic broadcast_scatter_allgather_traffic(const CallShape& s) {
  Traffic t;
  const int n = s.size;
  if (n == 1) return t;
  Partition p{s.count, n};
  auto piece = [&](int v) -> uint64_t { return p.size(mod(v, n)) * s.esize; };
  auto range = [&](int lo, int len) {
    uint64_t b = 0;
    for (int i = lo; i < lo + len && i < n; ++i) b += piece(i);
    return b;
  };
  const int v = mod(s.rank - s.root, n);
  // Binomial scatter: v receives its subtree's pieces, sends each child its subtree's.
  if (v != 0) t.received += range(v, binomial_subtree(v, n));
  int mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;
  for (int m = mask >> 1; m > 0; m >>= 1)
    if (v + m < n) t.sent += range(v + m, binomial_subtree(v + m, n));
  // Ring all-gather of the pieces (virtual ranks are consecutive around the ring).
  for (int step = 0; step < n - 1; ++step) {
    t.sent += piece(v - step);
    t.received += piece(v - step - 1);
  }
  return t;
}

Traffic reduce_reduce_scatter_gather_traffic(const CallShape& s) {
  Traffic t;
  const int n = s.size;
  if (n == 1 || s.count == 0) return t;
  const size_t chunk = std::max<size_t>(1, s.slice_bytes / s.esize) * static_cast<size_t>(n);
  const int v = mod(s.rank - s.root, n);
  for (size_t off = 0; off < s.count; off += chunk) {
    Partition p{std::min(chunk, s.count - off), n};
    auto seg = [&](int i) -> uint64_t { return p.size(mod(i, n)) * s.esize; };
    for (int step = 0; step < n - 1; ++step) {  // ring reduce-scatter over virtual ranks
      t.sent += seg(v - step - 1);
      t.received += seg(v - step - 2);
    }
    if (v != 0) {
      t.sent += seg(v);
    } else {
      for (int q = 1; q < n; ++q) t.received += seg(q);
    }
  }
  return t;
}

Traffic gather_linear_traffic(const CallShape& s) {
  uint64_t b = s.count * s.esize;
  if (s.size == 1) return {};
  return s.rank == s.root ? Traffic{0, (s.size - 1) * b} : Traffic{b, 0};
}

// Reduce's K is the whole input, as gather's block: the root receives N-1 of them, the others send one.
Traffic reduce_linear_traffic(const CallShape& s) { return gather_linear_traffic(s); }

Traffic scatter_linear_traffic(const CallShape& s) {
  Traffic g = gather_linear_traffic(s);
  return {g.received, g.sent};
}

// ---- costs ----
// K is the call's nccl-tests size; see docs/algorithms.md for the derivations.

Cost all_reduce_ring_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k / n, s.slice_bytes);
  return model(l, 2 * (n - 1) + S - 1, 4 * (n - 1) * S, 2 * (n - 1) / n * k, (n - 1) / n * k);
}
Cost all_reduce_tree_cost(const CallShape& s, const LinkModel& l) {
  double k = s.bytes(), S = slices(k / 2, s.slice_bytes), depth = ceil_log2(s.size) + 1;
  return model(l, 2 * depth + S - 1, 8 * S, 2 * k, k);
}
Cost all_reduce_recursive_doubling_cost(const CallShape& s, const LinkModel& l) {
  int p = floor_pow2(s.size);
  double k = s.bytes(), rounds = ceil_log2(p) + (p != s.size ? 2 : 0), S = slices(k, s.slice_bytes);
  return model(l, rounds * S, 2 * rounds * S, rounds * k, rounds * k);
}
Cost all_reduce_rabenseifner_cost(const CallShape& s, const LinkModel& l) {
  int p = floor_pow2(s.size);
  double k = s.bytes(), lg = ceil_log2(p), fold = p != s.size ? 1 : 0, S = slices(k / 2, s.slice_bytes);
  return model(l, 2 * lg + 2 * fold + S - 1, 4 * lg * S + 4 * fold * S, 2.0 * (p - 1) / p * k + 2 * fold * k,
               (p - 1.0) / p * k + fold * k);
}
Cost all_reduce_reduce_broadcast_cost(const CallShape& s, const LinkModel& l) {
  double k = s.bytes(), lg = ceil_log2(s.size), S = slices(k, s.slice_bytes);
  return model(l, 2 * lg + S - 1, 2 * lg * S, lg * k, lg * k);
}
Cost all_reduce_hierarchical_cost(const CallShape& s, const LinkModel& l) {
  if (!s.topology || s.topology->ranks_per_host == 0) return {1e9, 0};
  const int m = s.topology->ranks_per_host, hosts = s.topology->hosts;
  const LinkModel& intra = s.intra ? *s.intra : l;
  double k = s.bytes(), mm = m, S = slices(k / mm, s.slice_bytes);
  // Stages 1 and 3 inside the host: a ring reduce-scatter and a ring all-gather of K.
  // On one host it is the ring's two halves run apart: never worth choosing over the ring (it can still be
  // forced, which is how the single-host tests run it).
  if (hosts == 1) return {std::numeric_limits<double>::infinity(), 0};
  Cost inside = model(intra, 2 * (mm - 1) + S - 1, 4 * (mm - 1) * S, 2 * (mm - 1) / mm * k, (mm - 1) / mm * k);
  if (m == 1) inside = {};
  // Stage 2 across hosts: K/M bytes among H ranks, by the cheaper of ring and tree.
  CallShape col = s;
  col.size = hosts;
  col.count = s.count / static_cast<size_t>(m) + 1;  // ring and tree costs per rank scale alike; only their ratio matters here
  Cost ring = all_reduce_ring_cost(col, l), tree = all_reduce_tree_cost(col, l);
  Cost across = tree.total() < ring.total() ? tree : ring;
  return {inside.latency + across.latency, inside.bandwidth + across.bandwidth};
}

bool symmetric_hosts(const CallShape& s) { return s.topology && s.topology->ranks_per_host > 0; }

Traffic all_reduce_hierarchical_traffic(const CallShape& s) {
  Traffic t;
  if (s.size == 1 || !s.topology) return t;
  const Topology& topo = *s.topology;
  const int m = static_cast<int>(topo.ranks_on(topo.host_of[s.rank]).size());
  const int li = topo.local_index(s.rank);
  Partition part{s.count, m};
  auto seg = [&](int i) -> uint64_t { return part.size(mod(i, m)) * s.esize; };
  for (int step = 0; step + 1 < m; ++step) {  // stage 1 (reduce-scatter) and stage 3 (all-gather) in the host
    t.sent += seg(li - step - 1) + seg(li - step);
    t.received += seg(li - step - 2) + seg(li - step - 1);
  }
  if (topo.hosts > 1) {  // stage 2: this rank's segment among the column, by ring or tree
    CallShape col = s;
    col.size = topo.hosts;
    col.rank = topo.host_of[s.rank];
    col.count = part.size(li);
    col.topology = nullptr;
    // The same choice as the algorithm makes (bare formulas, the inter-host link figures).
    const LinkModel inter = s.inter ? *s.inter : LinkModel{};
    bool tree = all_reduce_tree_cost(col, inter).total() < all_reduce_ring_cost(col, inter).total();
    Traffic c = tree ? all_reduce_tree_traffic(col) : all_reduce_ring_traffic(col);
    t.sent += c.sent;
    t.received += c.received;
  }
  return t;
}



Cost all_reduce_direct_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k / n, s.slice_bytes);
  return model(l, 2 + S - 1, 4 * (n - 1) * S, 2 * (n - 1) / n * k, (n - 1) / n * k);
}

Cost all_gather_ring_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k / n, s.slice_bytes);
  return model(l, n - 1 + S - 1, 2 * (n - 1) * S, (n - 1) / n * k, 0);
}
Cost all_gather_recursive_doubling_cost(const CallShape& s, const LinkModel& l) {
  int p = floor_pow2(s.size);
  double k = s.bytes(), fold = p != s.size ? 1 : 0, lg = ceil_log2(p);
  return model(l, lg + 2 * fold, 2 * (lg + 2 * fold) * slices(k / 2, s.slice_bytes), (p - 1.0) / p * k + fold * k,
               0);
}
Cost all_gather_bruck_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), lg = ceil_log2(s.size);
  return model(l, lg, 2 * lg * slices(k / 2, s.slice_bytes), (n - 1) / n * k, 0);
}

Cost reduce_scatter_ring_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k / n, s.slice_bytes);
  return model(l, n - 1 + S - 1, 2 * (n - 1) * S, (n - 1) / n * k, (n - 1) / n * k);
}
Cost reduce_scatter_recursive_halving_cost(const CallShape& s, const LinkModel& l) {
  int p = floor_pow2(s.size);
  double k = s.bytes(), fold = p != s.size ? 1 : 0, lg = ceil_log2(p);
  double bytes = (p - 1.0) / p * k + fold * k;
  return model(l, lg + 2 * fold, 2 * (lg + 2 * fold) * slices(k / 2, s.slice_bytes), bytes, bytes);
}
Cost reduce_scatter_pairwise_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k / n, s.slice_bytes);
  return model(l, n - 1, 2 * (n - 1) * S, (n - 1) / n * k, (n - 1) / n * k);
}

Cost broadcast_binomial_cost(const CallShape& s, const LinkModel& l) {
  double k = s.bytes(), lg = ceil_log2(s.size), S = slices(k, s.slice_bytes);
  return model(l, lg + S - 1, lg * S, lg * k, 0);
}
Cost broadcast_scatter_allgather_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), lg = ceil_log2(s.size), S = slices(k / n, s.slice_bytes);
  return model(l, lg + n - 1 + S - 1, (lg + 2 * (n - 1)) * S, 2 * (n - 1) / n * k, 0);
}
Cost broadcast_chain_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k, s.slice_bytes);
  return model(l, n - 1 + S - 1, 2 * S, k, 0);
}

// The other hierarchical collectives (hierarchical.cc). H hosts of M ranks; `block` is one rank's block.
struct HierShape {
  int hosts, m;
  double block;
};
HierShape hier_shape(const CallShape& s) {
  const Topology& topo = *s.topology;
  return {topo.hosts, static_cast<int>(topo.ranks_on(topo.host_of[s.rank]).size()),
          static_cast<double>(s.count * s.esize)};
}

Traffic all_gather_hierarchical_traffic(const CallShape& s) {
  if (s.size == 1 || !s.topology) return {};
  HierShape h = hier_shape(s);
  uint64_t b = s.count * s.esize;
  uint64_t x = static_cast<uint64_t>(h.hosts - 1) * b + static_cast<uint64_t>(h.m - 1) * h.hosts * b;
  return {x, x};
}
Traffic reduce_scatter_hierarchical_traffic(const CallShape& s) { return all_gather_hierarchical_traffic(s); }

// Whether a hierarchical broadcast stage of `size` ranks runs the chain (else the binomial tree).
bool broadcast_stage_is_chain(const CallShape& s, int size) {
  CallShape g = s;
  g.size = size;
  g.topology = nullptr;
  const LinkModel l = s.inter ? *s.inter : LinkModel{};
  return broadcast_chain_cost(g, l).total() < broadcast_binomial_cost(g, l).total();
}

Traffic broadcast_hierarchical_traffic(const CallShape& s) {
  Traffic t;
  if (s.size == 1 || !s.topology) return t;
  const Topology& topo = *s.topology;
  const int host = topo.host_of[s.rank], li = topo.local_index(s.rank);
  const int root_host = topo.host_of[s.root], root_li = topo.local_index(s.root);
  const int m = static_cast<int>(topo.ranks_on(host).size());
  auto add = [&](int size, int rank, int root) {
    CallShape g = s;
    g.size = size;
    g.rank = rank;
    g.root = root;
    g.topology = nullptr;
    Traffic x = broadcast_stage_is_chain(s, size) ? broadcast_chain_traffic(g) : broadcast_binomial_traffic(g);
    t.sent += x.sent;
    t.received += x.received;
  };
  if (topo.hosts > 1 && li == root_li) add(topo.hosts, host, root_host);
  if (m > 1) add(m, li, root_li);
  return t;
}

Cost all_gather_hierarchical_cost(const CallShape& s, const LinkModel& l) {
  if (!s.topology || s.topology->ranks_per_host == 0 || s.topology->hosts == 1) {
    return {std::numeric_limits<double>::infinity(), 0};
  }
  const LinkModel& intra = s.intra ? *s.intra : l;
  double hosts = s.topology->hosts, m = s.topology->ranks_per_host, block = s.count * static_cast<double>(s.esize);
  Cost across = model(l, 1, 2 * (hosts - 1) * slices(block, s.slice_bytes), (hosts - 1) * block, 0);
  Cost inside = model(intra, m > 1 ? 1 : 0, 2 * (m - 1) * slices(hosts * block, s.slice_bytes),
                      (m - 1) * hosts * block, 0);
  return {across.latency + inside.latency, across.bandwidth + inside.bandwidth};
}
Cost reduce_scatter_hierarchical_cost(const CallShape& s, const LinkModel& l) {
  Cost c = all_gather_hierarchical_cost(s, l);
  if (!std::isfinite(c.total())) return c;
  double hosts = s.topology->hosts, m = s.topology->ranks_per_host, block = s.count * static_cast<double>(s.esize);
  const LinkModel& intra = s.intra ? *s.intra : l;
  return {c.latency, c.bandwidth + (m - 1) * hosts * block * intra.gamma + (hosts - 1) * block * l.gamma};
}
Cost broadcast_hierarchical_cost(const CallShape& s, const LinkModel& l) {
  if (!s.topology || s.topology->ranks_per_host == 0 || s.topology->hosts == 1) {
    return {std::numeric_limits<double>::infinity(), 0};
  }
  auto stage = [&](int size, const LinkModel& link) {
    CallShape g = s;
    g.size = size;
    Cost a = broadcast_chain_cost(g, link), b = broadcast_binomial_cost(g, link);
    return a.total() < b.total() ? a : b;
  };
  Cost across = stage(s.topology->hosts, l), inside = stage(s.topology->ranks_per_host, s.intra ? *s.intra : l);
  return {across.latency + inside.latency, across.bandwidth + inside.bandwidth};
}

Cost reduce_binomial_cost(const CallShape& s, const LinkModel& l) {
  double k = s.bytes(), lg = ceil_log2(s.size), S = slices(k, s.slice_bytes);
  return model(l, lg + S - 1, 2 * lg * S, k, lg * k);
}
Cost reduce_reduce_scatter_gather_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), chunks = slices(k, n * static_cast<double>(s.slice_bytes));
  return model(l, 2 * (n - 1) * chunks, 4 * (n - 1) * chunks, 2 * (n - 1) / n * k, (n - 1) / n * k);
}

Cost reduce_linear_cost(const CallShape& s, const LinkModel& l) {
  // One hop, pipelined in slices; the root receives and reduces (N-1) x K.
  double n = s.size, k = s.bytes(), S = slices(k, s.slice_bytes);
  return model(l, S, (n - 1) * S, (n - 1) * k, (n - 1) * k);
}

Cost all_to_all_pairwise_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes(), S = slices(k / n, s.slice_bytes);
  return model(l, n - 1, 2 * (n - 1) * S, (n - 1) / n * k, 0);
}
Cost all_to_all_bruck_cost(const CallShape& s, const LinkModel& l) {
  double k = s.bytes(), lg = ceil_log2(s.size);
  // log2 N rounds of about half the data, plus the local rotations (counted as copies).
  return model(l, lg, 2 * lg, lg * k / 2, 2 * k);
}

Cost gather_linear_cost(const CallShape& s, const LinkModel& l) {
  double n = s.size, k = s.bytes();
  return model(l, n - 1, n - 1, (n - 1) / n * k, 0);
}
Cost barrier_dissemination_cost(const CallShape& s, const LinkModel& l) {
  double lg = ceil_log2(s.size);
  return model(l, lg, 2 * lg, 0, 0);
}

// ---- entry points with one signature ----

void run_all_reduce_ring(OpContext& c, const void* s, void* r, size_t n, int) { all_reduce_ring(c, s, r, n); }
void run_all_reduce_tree(OpContext& c, const void* s, void* r, size_t n, int) { all_reduce_tree(c, s, r, n); }
void run_all_reduce_rd(OpContext& c, const void* s, void* r, size_t n, int) {
  all_reduce_recursive_doubling(c, s, r, n);
}
void run_all_reduce_rab(OpContext& c, const void* s, void* r, size_t n, int) { all_reduce_rabenseifner(c, s, r, n); }
void run_all_reduce_rb(OpContext& c, const void* s, void* r, size_t n, int) {
  all_reduce_reduce_broadcast(c, s, r, n);
}
void run_all_reduce_direct(OpContext& c, const void* s, void* r, size_t n, int) { all_reduce_direct(c, s, r, n); }
void run_all_reduce_hier(OpContext& c, const void* s, void* r, size_t n, int) { all_reduce_hierarchical(c, s, r, n); }
void run_all_gather_hier(OpContext& c, const void* s, void* r, size_t n, int) { all_gather_hierarchical(c, s, r, n); }
void run_rs_hier(OpContext& c, const void* s, void* r, size_t n, int) { reduce_scatter_hierarchical(c, s, r, n); }
void run_bcast_hier(OpContext& c, const void* s, void* r, size_t n, int root) {
  broadcast_hierarchical(c, s, r, n, root);
}
void run_all_gather_ring(OpContext& c, const void* s, void* r, size_t n, int) { all_gather_ring(c, s, r, n); }
void run_all_gather_rd(OpContext& c, const void* s, void* r, size_t n, int) {
  all_gather_recursive_doubling(c, s, r, n);
}
void run_all_gather_bruck(OpContext& c, const void* s, void* r, size_t n, int) { all_gather_bruck(c, s, r, n); }
void run_rs_ring(OpContext& c, const void* s, void* r, size_t n, int) { reduce_scatter_ring(c, s, r, n); }
void run_rs_rh(OpContext& c, const void* s, void* r, size_t n, int) { reduce_scatter_recursive_halving(c, s, r, n); }
void run_rs_pairwise(OpContext& c, const void* s, void* r, size_t n, int) { reduce_scatter_pairwise(c, s, r, n); }
void run_bcast_binomial(OpContext& c, const void* s, void* r, size_t n, int root) {
  broadcast_binomial(c, s, r, n, root);
}
void run_bcast_sag(OpContext& c, const void* s, void* r, size_t n, int root) {
  broadcast_scatter_allgather(c, s, r, n, root);
}
void run_bcast_chain(OpContext& c, const void* s, void* r, size_t n, int root) { broadcast_chain(c, s, r, n, root); }
void run_reduce_binomial(OpContext& c, const void* s, void* r, size_t n, int root) {
  reduce_binomial(c, s, r, n, root);
}
void run_reduce_linear(OpContext& c, const void* s, void* r, size_t n, int root) { reduce_linear(c, s, r, n, root); }
void run_reduce_rsg(OpContext& c, const void* s, void* r, size_t n, int root) {
  reduce_reduce_scatter_gather(c, s, r, n, root);
}
void run_a2a_pairwise(OpContext& c, const void* s, void* r, size_t n, int) { all_to_all_pairwise(c, s, r, n); }
void run_a2a_bruck(OpContext& c, const void* s, void* r, size_t n, int) { all_to_all_bruck(c, s, r, n); }
void run_gather(OpContext& c, const void* s, void* r, size_t n, int root) { gather_linear(c, s, r, n, root); }
void run_scatter(OpContext& c, const void* s, void* r, size_t n, int root) { scatter_linear(c, s, r, n, root); }
void run_barrier(OpContext& c, const void*, void*, size_t, int) { barrier_dissemination(c); }

using transport::AlgoId;
using C = Collective;

// clang-format off
const Algorithm kAllReduce[] = {
    {C::AllReduce, "ring", AlgoId::Ring, run_all_reduce_ring, all_reduce_ring_traffic, all_reduce_ring_cost},
    {C::AllReduce, "tree", AlgoId::Tree, run_all_reduce_tree, all_reduce_tree_traffic, all_reduce_tree_cost},
    {C::AllReduce, "recursive_doubling", AlgoId::RecursiveDoubling, run_all_reduce_rd,
     all_reduce_recursive_doubling_traffic, all_reduce_recursive_doubling_cost},
    {C::AllReduce, "rabenseifner", AlgoId::Rabenseifner, run_all_reduce_rab, all_reduce_rabenseifner_traffic,
     all_reduce_rabenseifner_cost},
    {C::AllReduce, "reduce_broadcast", AlgoId::ReduceBroadcast, run_all_reduce_rb,
     all_reduce_reduce_broadcast_traffic, all_reduce_reduce_broadcast_cost},
    {C::AllReduce, "direct", AlgoId::Direct, run_all_reduce_direct, all_reduce_direct_traffic, all_reduce_direct_cost},
    {C::AllReduce, "hierarchical", AlgoId::Hierarchical, run_all_reduce_hier, all_reduce_hierarchical_traffic,
     all_reduce_hierarchical_cost, symmetric_hosts, "the same number of ranks on every host"},
};
const Algorithm kAllGather[] = {
    {C::AllGather, "ring", AlgoId::Ring, run_all_gather_ring, block_ring_traffic, all_gather_ring_cost},
    {C::AllGather, "recursive_doubling", AlgoId::RecursiveDoubling, run_all_gather_rd,
     all_gather_recursive_doubling_traffic, all_gather_recursive_doubling_cost},
    {C::AllGather, "bruck", AlgoId::Bruck, run_all_gather_bruck, all_gather_bruck_traffic, all_gather_bruck_cost},
    {C::AllGather, "hierarchical", AlgoId::Hierarchical, run_all_gather_hier, all_gather_hierarchical_traffic,
     all_gather_hierarchical_cost, symmetric_hosts, "the same number of ranks on every host"},
};
const Algorithm kReduceScatter[] = {
    {C::ReduceScatter, "ring", AlgoId::Ring, run_rs_ring, block_ring_traffic, reduce_scatter_ring_cost},
    {C::ReduceScatter, "recursive_halving", AlgoId::RecursiveHalving, run_rs_rh,
     reduce_scatter_recursive_halving_traffic, reduce_scatter_recursive_halving_cost},
    {C::ReduceScatter, "pairwise", AlgoId::Pairwise, run_rs_pairwise, reduce_scatter_pairwise_traffic,
     reduce_scatter_pairwise_cost},
    {C::ReduceScatter, "hierarchical", AlgoId::Hierarchical, run_rs_hier, reduce_scatter_hierarchical_traffic,
     reduce_scatter_hierarchical_cost, symmetric_hosts, "the same number of ranks on every host"},
};
const Algorithm kBroadcast[] = {
    {C::Broadcast, "binomial", AlgoId::Binomial, run_bcast_binomial, broadcast_binomial_traffic,
     broadcast_binomial_cost},
    {C::Broadcast, "scatter_allgather", AlgoId::ScatterAllgather, run_bcast_sag,
     broadcast_scatter_allgather_traffic, broadcast_scatter_allgather_cost},
    {C::Broadcast, "chain", AlgoId::Chain, run_bcast_chain, broadcast_chain_traffic, broadcast_chain_cost},
    {C::Broadcast, "hierarchical", AlgoId::Hierarchical, run_bcast_hier, broadcast_hierarchical_traffic,
     broadcast_hierarchical_cost, symmetric_hosts, "the same number of ranks on every host"},
};
const Algorithm kReduce[] = {
    {C::Reduce, "binomial", AlgoId::Binomial, run_reduce_binomial, reduce_binomial_traffic, reduce_binomial_cost},
    {C::Reduce, "reduce_scatter_gather", AlgoId::ReduceScatterGather, run_reduce_rsg,
     reduce_reduce_scatter_gather_traffic, reduce_reduce_scatter_gather_cost},
    {C::Reduce, "linear", AlgoId::Linear, run_reduce_linear, reduce_linear_traffic, reduce_linear_cost},
};
const Algorithm kAllToAll[] = {
    {C::AllToAll, "pairwise", AlgoId::Pairwise, run_a2a_pairwise, all_to_all_pairwise_traffic,
     all_to_all_pairwise_cost},
    {C::AllToAll, "bruck", AlgoId::Bruck, run_a2a_bruck, all_to_all_bruck_traffic, all_to_all_bruck_cost},
};
const Algorithm kGather[] = {
    {C::Gather, "linear", AlgoId::Linear, run_gather, gather_linear_traffic, gather_linear_cost},
};
const Algorithm kScatter[] = {
    {C::Scatter, "linear", AlgoId::Linear, run_scatter, scatter_linear_traffic, gather_linear_cost},
};
const Algorithm kBarrier[] = {
    {C::Barrier, "dissemination", AlgoId::Dissemination, run_barrier, none, barrier_dissemination_cost},
};
// clang-format on

}  // namespace

double Calibration::correction(double bytes) const {
  if (corrections.empty()) return 1;
  double x = std::log(std::max(bytes, 1.0));
  if (x <= std::log(corrections.front().first)) return corrections.front().second;
  if (x >= std::log(corrections.back().first)) return corrections.back().second;
  for (size_t i = 1; i < corrections.size(); ++i) {
    double x1 = std::log(corrections[i].first);
    if (x <= x1) {
      double x0 = std::log(corrections[i - 1].first), f = (x - x0) / (x1 - x0);
      return std::exp((1 - f) * std::log(corrections[i - 1].second) + f * std::log(corrections[i].second));
    }
  }
  return corrections.back().second;
}

double Calibration::measured_time(double bytes) const {
  if (measured.empty() || bytes < measured.front().first || bytes > measured.back().first) return -1;
  double x = std::log(std::max(bytes, 1.0));
  for (size_t i = 1; i < measured.size(); ++i) {
    if (bytes <= measured[i].first) {
      double x0 = std::log(measured[i - 1].first), x1 = std::log(measured[i].first);
      double f = x1 > x0 ? (x - x0) / (x1 - x0) : 1;
      return std::exp((1 - f) * std::log(measured[i - 1].second) + f * std::log(measured[i].second));
    }
  }
  return measured.front().second;  // a single point
}

size_t CallShape::bytes() const {
  switch (coll) {
    case C::AllGather:
    case C::ReduceScatter:
    case C::AllToAll:
    case C::Gather:
    case C::Scatter:
      return count * esize * static_cast<size_t>(size);
    default:
      return count * esize;
  }
}

const char* collective_name(Collective c) noexcept {
  switch (c) {
    case C::AllReduce: return "allreduce";
    case C::AllGather: return "allgather";
    case C::ReduceScatter: return "reducescatter";
    case C::Broadcast: return "broadcast";
    case C::Reduce: return "reduce";
    case C::AllToAll: return "alltoall";
    case C::Gather: return "gather";
    case C::Scatter: return "scatter";
    case C::Barrier: return "barrier";
  }
  return "?";
}

bool parse_collective(std::string_view name, Collective* out) noexcept {
  std::string plain;
  for (char ch : name)
    if (ch != '_') plain += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (int i = 0; i < kNumCollectives; ++i) {
    auto c = static_cast<Collective>(i);
    if (plain == collective_name(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

std::span<const Algorithm> algorithms_for(Collective c) noexcept {
  switch (c) {
    case C::AllReduce: return kAllReduce;
    case C::AllGather: return kAllGather;
    case C::ReduceScatter: return kReduceScatter;
    case C::Broadcast: return kBroadcast;
    case C::Reduce: return kReduce;
    case C::AllToAll: return kAllToAll;
    case C::Gather: return kGather;
    case C::Scatter: return kScatter;
    case C::Barrier: return kBarrier;
  }
  return {};
}

const Algorithm* find_algorithm(Collective c, std::string_view name) noexcept {
  for (const Algorithm& a : algorithms_for(c))
    if (name == a.name) return &a;
  return nullptr;
}

std::string algorithm_names(Collective c) {
  std::string out;
  for (const Algorithm& a : algorithms_for(c)) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

namespace {
// Whether a calibration says anything about its algorithm: a measured table, corrections or factors.
bool calibrated(const Calibration& c) {
  return !c.measured.empty() || !c.corrections.empty() || c.latency != 1 || c.bandwidth != 1;
}
}  // namespace

const Algorithm& choose_algorithm(const CallShape& s, const LinkModel& link, const Calibration* calibration,
                                  double* estimates) {
  auto algos = algorithms_for(s.coll);
  double t[16];
  const size_t n = std::min(algos.size(), std::size(t));
  // First the algorithms the calibration speaks for; then the others, at their bare formula times the fastest
  // calibrated algorithm's estimate / bare formula. A bare formula is no match for a measured time (it leaves
  // out most of what a real call costs), so an algorithm without figures (newer than the tuning file, or than
  // the host kind's tables) wins only where its formula beats the best calibrated algorithm's formula.
  int best_calibrated = -1;
  for (size_t i = 0; i < n; ++i) {
    t[i] = -1;
    if (algos[i].applicable && !algos[i].applicable(s)) {
      t[i] = std::numeric_limits<double>::infinity();
    } else if (calibration && calibrated(calibration[i])) {
      t[i] = estimate(algos[i], s, link, calibration[i]);
      if (best_calibrated < 0 || t[i] < t[best_calibrated]) best_calibrated = static_cast<int>(i);
    }
  }
  double scale = 1;
  if (best_calibrated >= 0) {
    const double bare = formula_estimate(algos[best_calibrated], s, link, Calibration{});
    if (bare > 0 && t[best_calibrated] > 0) scale = t[best_calibrated] / bare;
  }
  size_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    if (t[i] < 0) t[i] = formula_estimate(algos[i], s, link, Calibration{}) * scale;
    if (estimates) estimates[i] = t[i];
    if (t[i] < t[best]) best = i;
  }
  return algos[best];
}

}  // namespace chorus::algo
