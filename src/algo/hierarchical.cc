// Hierarchical collectives: fast links inside a host, slow ones between hosts (see docs/algorithms.md).
//
// all_reduce, with H hosts of M ranks each: (1) a ring reduce-scatter among the M ranks of each host leaves
// local rank i with segment i of the host's sum; (2) the H ranks with local index i (one per host, a
// "column") all-reduce segment i across hosts, by ring or tree; (3) a ring all-gather among the M ranks of
// each host spreads the finished segments. Only K/M bytes per rank cross hosts in stage 2, and every rank
// sends over the slow links at once, so the host's links to other hosts carry 2(H-1)/H x K in all, against
// 2(N-1)/N x K per rank with a flat ring whose every hop may cross hosts.
#include <cstring>
#include <vector>

#include "algo/algorithms.h"
#include "algo/registry.h"

namespace chorus::algo {

namespace {

// The context of a stage that runs on `members` (communicator ranks), as rank `index` of them.
OpContext group_context(const OpContext& c, const std::vector<int>& members, int index) {
  c.deadline.at();  // start the operation's lazy deadline, so every stage shares it instead of starting its own
  OpContext g = c;
  g.members = members.data();
  g.rank = index;
  g.size = static_cast<int>(members.size());
  g.bytes_sent = 0;
  g.bytes_received = 0;
  return g;
}

void add_traffic(OpContext& c, const OpContext& stage) {
  c.bytes_sent += stage.bytes_sent;
  c.bytes_received += stage.bytes_received;
}

}  // namespace

void all_reduce_hierarchical(OpContext& c, const void* send, void* recv, size_t count) {
  const Topology& topo = *c.topology;
  const int me = c.rank;
  const int host = topo.host_of[me];
  const std::vector<int> local = topo.ranks_on(host);
  const int m = static_cast<int>(local.size());
  const int li = topo.local_index(me);
  std::vector<int> column;
  for (int h = 0; h < topo.hosts; ++h) column.push_back(topo.ranks_on(h)[li]);
  const int hosts = topo.hosts;
  auto* out = static_cast<char*>(recv);

  // Stage 1. Avg divides once, in the last combining stage: here only when there is a single host.
  if (m > 1) {
    OpContext s1 = group_context(c, local, li);
    if (hosts > 1) s1.reduce_final = s1.reduce;
    ring_steps(s1, send, recv, count, 0, m - 1);
    add_traffic(c, s1);
  } else if (send != recv && count > 0) {
    std::memcpy(out, send, count * c.esize);
  }

  // Stage 2: this rank's segment across hosts.
  Partition part{count, m};
  char* segment = out + part.offset(li) * c.esize;
  const size_t seg_count = part.size(li);
  if (hosts > 1) {
    OpContext s2 = group_context(c, column, host);
    CallShape shape;
    shape.size = hosts;
    shape.count = seg_count;
    shape.esize = c.esize;
    shape.slice_bytes = c.slice_bytes;
    const Algorithm* ring = find_algorithm(Collective::AllReduce, "ring");
    const Algorithm* tree = find_algorithm(Collective::AllReduce, "tree");
    LinkModel inter = c.inter_link ? *c.inter_link : LinkModel{};
    if (tree->cost(shape, inter).total() < ring->cost(shape, inter).total()) {
      all_reduce_tree(s2, segment, segment, seg_count);
    } else {
      all_reduce_ring(s2, segment, segment, seg_count);
    }
    add_traffic(c, s2);
  } else if (m == 1 && c.divide && count > 0) {
    c.divide(out, out, count, static_cast<uint64_t>(c.world_size));  // a world of one: nothing combined it
  }

  // Stage 3.
  if (m > 1) {
    OpContext s3 = group_context(c, local, li);
    ring_steps(s3, recv, recv, count, m - 1, 2 * (m - 1));
    add_traffic(c, s3);
  }
}

}  // namespace chorus::algo

namespace chorus::algo {

namespace {

// This rank's host group and column (the ranks with its local index, one per host, in host order).
struct Place {
  std::vector<int> local, column;
  int li = 0, host = 0;
};

Place place_of(const Topology& topo, int rank) {
  Place p;
  p.host = topo.host_of[rank];
  p.local = topo.ranks_on(p.host);
  p.li = topo.local_index(rank);
  for (int h = 0; h < topo.hosts; ++h) p.column.push_back(topo.ranks_on(h)[p.li]);
  return p;
}

// Sends every listed block to every listed peer and receives theirs, slice by slice, straight into place:
// blocks[i] is the communicator rank whose block (of `block` bytes at base + rank * block) peer i holds.
// This rank's own block is sent from its input (see OwnBlock).
void exchange_blocks(OpContext& g, char* base, size_t block, const OwnBlock& own, const std::vector<int>& mine,
                     const std::vector<std::vector<int>>& theirs) {
  // Every rank sends to every other as it receives from them, from blocks that stay as they are until the
  // operation ends (its own input, or final blocks of the output): an exchange (SenderWork::exchanged).
  Prims prims(g);
  for (int k = 1; k < g.size; ++k) {
    int to = mod(g.rank + k, g.size);
    for (int b : mine)
      for (size_t off = 0; off < block; off += g.slice_bytes) {
        const size_t at = static_cast<size_t>(b) * block + off, len = std::min(g.slice_bytes, block - off);
        prims.send(to, own.source(at, len), len, transport::SenderWork::exchanged());
      }
  }
  for (int k = 1; k < g.size; ++k) {
    int from = mod(g.rank - k, g.size);
    for (int b : theirs[from])
      for (size_t off = 0; off < block; off += g.slice_bytes)
        prims.recv(from, base + static_cast<size_t>(b) * block + off, std::min(g.slice_bytes, block - off));
  }
  prims.flush();
}

}  // namespace

void all_gather_hierarchical(OpContext& c, const void* send, void* recv, size_t count) {
  const Topology& topo = *c.topology;
  const Place p = place_of(topo, c.rank);
  const size_t block = count * c.esize;
  auto* out = static_cast<char*>(recv);
  char* mine = out + static_cast<size_t>(c.rank) * block;
  const OwnBlock own{out, static_cast<size_t>(c.rank) * block, block, static_cast<const char*>(send)};
  if (send != mine && block > 0) local_copy(c, mine, send, block, block * static_cast<size_t>(c.size + 1));
  // Stage 1, across hosts: each column member's block to every other member (H-1 blocks cross per rank).
  if (topo.hosts > 1) {
    OpContext s1 = group_context(c, p.column, p.host);
    std::vector<std::vector<int>> theirs;
    for (int q : p.column) theirs.push_back({q});
    exchange_blocks(s1, out, block, own, {c.rank}, theirs);
    add_traffic(c, s1);
  }
  // Stage 2, inside the host: each local rank shares the H blocks of its column.
  if (p.local.size() > 1) {
    OpContext s2 = group_context(c, p.local, p.li);
    std::vector<std::vector<int>> theirs;
    for (size_t j = 0; j < p.local.size(); ++j) {
      std::vector<int> col;
      for (int h = 0; h < topo.hosts; ++h) col.push_back(topo.ranks_on(h)[static_cast<int>(j)]);
      theirs.push_back(col);
    }
    exchange_blocks(s2, out, block, own, p.column, theirs);
    add_traffic(c, s2);
  }
}

void reduce_scatter_hierarchical(OpContext& c, const void* send, void* recv, size_t count) {
  const Topology& topo = *c.topology;
  const Place p = place_of(topo, c.rank);
  const size_t block = count * c.esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const int hosts = topo.hosts, m = static_cast<int>(p.local.size());
  // Partial sums of this column's H blocks over the host's ranks: H blocks of scratch.
  char* partial = c.scratch->buffer(static_cast<size_t>(hosts) * std::max<size_t>(block, 1));
  for (int h = 0; h < hosts; ++h) {
    if (block) std::memcpy(partial + h * block, in + static_cast<size_t>(p.column[h]) * block, block);
  }
  // Stage 1, inside the host: send local peer j my input for column j's blocks, reduce theirs for mine.
  // Combination only: Avg divides once, in stage 2 (or here when there is a single host).
  if (m > 1) {
    OpContext s1 = group_context(c, p.local, p.li);
    if (hosts > 1) s1.reduce_final = s1.reduce;
    Prims prims(s1);
    for (int k = 1; k < m; ++k) {
      int j = mod(p.li + k, m);
      for (int h = 0; h < hosts; ++h) {
        const char* src = in + static_cast<size_t>(topo.ranks_on(h)[j]) * block;
        for (size_t off = 0; off < block; off += c.slice_bytes) prims.send(j, src + off, std::min(c.slice_bytes, block - off));
      }
    }
    for (int k = 1; k < m; ++k) {
      int j = mod(p.li - k, m);
      for (int h = 0; h < hosts; ++h) {
        char* acc = partial + h * block;
        for (size_t off = 0; off < block; off += c.slice_bytes) {
          prims.recv_reduce(j, acc + off, acc + off, std::min(c.slice_bytes, block - off), hosts == 1 && k == m - 1);
        }
      }
    }
    prims.flush();
    add_traffic(c, s1);
  }
  // Stage 2, across hosts: a pairwise reduce-scatter of the column's partial sums.
  if (hosts > 1) {
    OpContext s2 = group_context(c, p.column, p.host);
    Prims prims(s2);
    for (int k = 1; k < hosts; ++k) {
      int h = mod(p.host + k, hosts);
      for (size_t off = 0; off < block; off += c.slice_bytes)
        prims.send(h, partial + h * block + off, std::min(c.slice_bytes, block - off));
    }
    char* mine = partial + p.host * block;
    for (int k = 1; k < hosts; ++k) {
      int h = mod(p.host - k, hosts);
      for (size_t off = 0; off < block; off += c.slice_bytes) {
        size_t len = std::min(c.slice_bytes, block - off);
        prims.recv_reduce(h, k == hosts - 1 ? out + off : mine + off, mine + off, len, k == hosts - 1);
      }
    }
    prims.flush();
    add_traffic(c, s2);
  } else if (block) {
    std::memcpy(out, partial, block);
    if (m == 1 && c.divide) c.divide(out, out, count, static_cast<uint64_t>(c.world_size));
  }
}

void broadcast_hierarchical(OpContext& c, const void* send, void* recv, size_t count, int root) {
  const Topology& topo = *c.topology;
  const Place p = place_of(topo, c.rank);
  const int root_li = topo.local_index(root), root_host = topo.host_of[root];
  CallShape shape;
  shape.esize = c.esize;
  shape.count = count;
  shape.slice_bytes = c.slice_bytes;
  const LinkModel inter = c.inter_link ? *c.inter_link : LinkModel{};
  // Each stage runs the cheaper of a binomial tree and a pipelined chain for its group.
  auto stage = [&](const std::vector<int>& group, int index, int group_root, const void* src) {
    OpContext g = group_context(c, group, index);
    shape.size = g.size;
    bool chain = find_algorithm(Collective::Broadcast, "chain")->cost(shape, inter).total() <
                 find_algorithm(Collective::Broadcast, "binomial")->cost(shape, inter).total();
    if (chain) {
      broadcast_chain(g, src, recv, count, group_root);
    } else {
      broadcast_binomial(g, src, recv, count, group_root);
    }
    add_traffic(c, g);
  };
  // Stage 1: the root's column across hosts. Stage 2: inside each host, from the rank that got it.
  if (topo.hosts > 1 && p.li == root_li) stage(p.column, p.host, root_host, send);
  // The root takes part in at least one stage (a communicator of one rank never gets here), and a stage's
  // root copies its input to its output slice by slice (broadcast_binomial, broadcast_chain).
  if (p.local.size() > 1) stage(p.local, p.li, root_li, c.rank == root ? send : recv);
}

}  // namespace chorus::algo
