// Recursive doubling and halving (see docs/algorithms.md): all_reduce by recursive doubling and by
// Rabenseifner's halving + doubling, all_gather by recursive doubling, reduce_scatter by recursive halving.
//
// In round m (m = 1, 2, 4, ... when doubling; p/2, ..., 1 when halving) virtual rank v talks only to v ^ m,
// so a power-of-two world finishes in log2 p rounds: these schedules trade bandwidth (recursive doubling)
// or pipelining (the others) for latency. Any other N is folded as MPICH folds it: with p the largest power
// of two <= N and rem = N - p, ranks r < 2 rem pair up, the even one hands its data to r + 1 and sits out,
// and the p survivors run the power-of-two schedule as virtual ranks; the even ranks get their result from
// their partner at the end. Virtual rank v speaks for the blocks of real ranks [first(v), first(v + 1)) (two
// for a folded pair, one otherwise); these are consecutive in v, so a group of virtual ranks is always one
// contiguous range of blocks.
//
// - all_reduce recursive doubling: every slice goes through all rounds before the next one starts. Both
//   partners send their current slice and combine the partner's, as it arrives, into the other of two
//   places (the output slice and one slice of scratch); the place being sent from is rewritten a round
//   later, so each round ends with wait(send). That wait cannot block forever: the partner posts its own
//   send and then receives ours without waiting for anything else from us. Both partners compute a (+) b,
//   in opposite orders; every ReduceOp is commutative, so all ranks hold bitwise identical results. Extra
//   memory: one slice.
// - all_reduce Rabenseifner: recursive halving leaves virtual rank v with part v of p of the reduction,
//   keeping partial sums in the output (the half a rank keeps never overlaps the half it sends, so nothing
//   waits), then recursive doubling gathers the parts: 2 (p-1)/p K per rank instead of log2 p K. A part
//   received in the gather overwrites what went to the same partner in the halving, so that send is waited
//   for first; the partner received it during the halving, which needs nothing from the gather. No extra
//   memory.
// - all_gather recursive doubling: round m swaps the blocks of two groups of m virtual ranks; received
//   blocks land in place, disjoint from those sent, so a rank blocks only in receives.
// - reduce_scatter recursive halving: partial sums of other ranks' blocks have no home in the output, so
//   the input is processed in columns (the same element range of every block) narrow enough that a column's
//   partial sums fill one slice of scratch. Two such buffers alternate between columns; before one is
//   rewritten, the sends that read it two columns earlier are waited for. Those were received by partners
//   within that column, which needs nothing from any later column, so the waits cannot form a cycle.
//   Extra memory: two slices.
//
// The all_reduce fold moves the whole vector before and after the survivors' schedule, without pipelining
// (as MPICH does). Waits rely on sends to one peer completing in order (each pair of ranks is one ordered
// stream), so waiting for the last send of a run covers the run.
#include <algorithm>
#include <bit>
#include <cstring>

#include "algo/algorithms.h"
#include "algo/registry.h"

namespace chorus::algo {

namespace {

using transport::SendHandle;

// The fold of a world of `size` ranks onto p, the largest power of two <= size.
struct Fold {
  int p, rem;
  int vrank = -1;    // this rank's virtual rank; -1 when it sits out
  int partner = -1;  // the rank it folds with; -1 when none

  Fold(int rank, int size) : p(static_cast<int>(std::bit_floor(static_cast<unsigned>(size)))), rem(size - p) {
    if (rank < 2 * rem) {
      partner = rank ^ 1;
      if (rank % 2) vrank = rank / 2;
    } else {
      vrank = rank - rem;
    }
  }
  bool excluded() const { return vrank < 0; }
  bool folded() const { return vrank >= 0 && partner >= 0; }  // a survivor speaking for two ranks
  int rounds() const { return std::countr_zero(static_cast<unsigned>(p)); }
  int real(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  // The first real rank virtual rank v speaks for; first(p) is the world size.
  int first(int v) const { return v < rem ? 2 * v : v + rem; }
};

// The groups of virtual ranks in round m: v's own (holding v) and its partner's, as first virtual ranks.
int own_group(int v, int m) { return v & ~(m - 1); }
int peer_group(int v, int m) { return (v ^ m) & ~(m - 1); }

// Slice-by-slice transfers of a byte range. send_slices returns the last slice's handle (peer -1 when the
// range is empty); wait_sent accepts that.
SendHandle send_slices(Prims& prims, int peer, const char* data, size_t bytes) {
  const size_t slice = prims.ctx().slice_bytes;
  SendHandle h;
  for (size_t off = 0; off < bytes; off += slice) h = prims.send(peer, data + off, std::min(slice, bytes - off));
  return h;
}
void wait_sent(Prims& prims, SendHandle h) {
  if (h.peer >= 0) prims.wait(h);
}
void recv_slices(Prims& prims, int peer, char* dst, size_t bytes) {
  const size_t slice = prims.ctx().slice_bytes;
  for (size_t off = 0; off < bytes; off += slice) prims.recv(peer, dst + off, std::min(slice, bytes - off));
}
void recv_reduce_slices(Prims& prims, int peer, char* dst, const char* local, size_t bytes, bool last) {
  const size_t slice = prims.ctx().slice_bytes;
  for (size_t off = 0; off < bytes; off += slice) {
    prims.recv_reduce(peer, dst + off, local + off, std::min(slice, bytes - off), last);
  }
}

// The all_reduce fold around body(prims, fold, src, out, bytes), which the survivors run on the vector at
// src (the caller's input, or `out` once a partner's input has been combined into it) and leaves the result
// in out. The excluded rank sends its input and receives the result.
template <class Body>
void all_reduce_folded(OpContext& c, const void* send, void* recv, size_t count, Body&& body) {
  Prims prims(c);
  const Fold f(c.rank, c.size);
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const size_t bytes = count * c.esize;
  if (f.excluded()) {
    SendHandle h = send_slices(prims, f.partner, in, bytes);
    // In place the result overwrites what was sent. The partner receives all of it before anything else.
    if (in == out) wait_sent(prims, h);
    recv_slices(prims, f.partner, out, bytes);
  } else {
    const char* src = in;
    if (f.folded()) {
      recv_reduce_slices(prims, f.partner, out, in, bytes, /*last=*/false);
      src = out;
    }
    body(prims, f, src, out, bytes);
    if (f.folded()) send_slices(prims, f.partner, out, bytes);
  }
  prims.flush();
}

// Byte offsets of the p parts Rabenseifner cuts the vector into: parts [lo, lo + m) are [at(lo), at(lo + m)).
struct Parts {
  Partition part;
  size_t esize;
  size_t at(int lo) const { return part.offset(lo) * esize; }
  size_t bytes(int lo, int m) const { return at(lo + m) - at(lo); }
};

}  // namespace

void all_reduce_recursive_doubling(OpContext& c, const void* send, void* recv, size_t count) {
  all_reduce_folded(c, send, recv, count, [&](Prims& prims, const Fold& f, const char* src, char* out, size_t bytes) {
    char* tmp = c.scratch->buffer(std::min(bytes, c.slice_bytes));
    for (size_t off = 0; off < bytes; off += c.slice_bytes) {
      const size_t len = std::min(c.slice_bytes, bytes - off);
      char* home = out + off;
      const char* cur = src + off;
      for (int m = 1; m < f.p; m <<= 1) {
        const int peer = f.real(f.vrank ^ m);
        char* next = cur == home ? tmp : home;
        // Out of place the first step sends the input, which stays as it is: an exchange. In place the step
        // sends what it is about to replace, and waits for the read right after (by attach, mid-sized
        // in-place calls took twice as long).
        SendHandle h = prims.send(
            peer, cur, len,
            cur == src + off && src != out ? transport::SenderWork::exchanged() : transport::SenderWork::busy());
        prims.recv_reduce(peer, next, cur, len, /*last=*/2 * m == f.p);
        prims.wait(h);
        cur = next;
      }
      if (cur != home) std::memcpy(home, cur, len);
    }
  });
}

void all_reduce_rabenseifner(OpContext& c, const void* send, void* recv, size_t count) {
  all_reduce_folded(c, send, recv, count, [&](Prims& prims, const Fold& f, const char* src, char* out, size_t) {
    const Parts parts{{count, f.p}, c.esize};
    const int v = f.vrank;
    SendHandle halving_sent[32];  // by round, log2 m
    for (int m = f.p / 2; m >= 1; m /= 2) {
      const int peer = f.real(v ^ m), keep = own_group(v, m), give = peer_group(v, m);
      halving_sent[std::countr_zero(static_cast<unsigned>(m))] =
          send_slices(prims, peer, src + parts.at(give), parts.bytes(give, m));
      recv_reduce_slices(prims, peer, out + parts.at(keep), src + parts.at(keep), parts.bytes(keep, m), m == 1);
      src = out;
    }
    for (int m = 1; m < f.p; m <<= 1) {
      const int peer = f.real(v ^ m), mine = own_group(v, m), theirs = peer_group(v, m);
      send_slices(prims, peer, out + parts.at(mine), parts.bytes(mine, m));
      // `theirs` went to this peer in halving round m (see the top of the file).
      wait_sent(prims, halving_sent[std::countr_zero(static_cast<unsigned>(m))]);
      recv_slices(prims, peer, out + parts.at(theirs), parts.bytes(theirs, m));
    }
  });
}

void all_gather_recursive_doubling(OpContext& c, const void* send, void* recv, size_t count) {
  Prims prims(c);
  const Fold f(c.rank, c.size);
  const size_t block = count * c.esize;
  auto* out = static_cast<char*>(recv);
  auto at = [&](int b) { return out + static_cast<size_t>(b) * block; };
  auto blocks = [&](int lo, int hi) { return static_cast<size_t>(hi - lo) * block; };
  const OwnBlock own{out, static_cast<size_t>(c.rank) * block, block, static_cast<const char*>(send)};
  // Out of place, this rank's own block is copied into its output after the first sends are posted: sends of
  // ranges that are just this rank's block read the input (see OwnBlock), and a receiver that reads them in
  // place (cross-memory attach) then reads while this rank copies.
  bool own_copied = send == at(c.rank) || block == 0;
  auto copy_own = [&] {
    if (!own_copied) local_copy(c, at(c.rank), send, block, block * static_cast<size_t>(c.size + 1));
    own_copied = true;
  };
  auto send_range = [&](int peer, int lo, int hi) {
    if (lo != c.rank || hi != c.rank + 1) copy_own();  // the range reads this rank's block from the output
    const size_t from = static_cast<size_t>(lo) * block, bytes = blocks(lo, hi);
    for (size_t off = 0; off < bytes; off += c.slice_bytes) {
      const size_t len = std::min(c.slice_bytes, bytes - off);
      prims.send(peer, own.source(from + off, len), len, transport::SenderWork::exchanged());
    }
  };

  if (f.excluded()) {
    send_range(f.partner, c.rank, c.rank + 1);
    copy_own();
    recv_slices(prims, f.partner, at(0), blocks(0, c.rank));
    recv_slices(prims, f.partner, at(c.rank + 1), blocks(c.rank + 1, c.size));
  } else {
    if (f.folded()) recv_slices(prims, f.partner, at(f.partner), block);
    for (int m = 1; m < f.p; m <<= 1) {
      const int peer = f.real(f.vrank ^ m), mine = own_group(f.vrank, m), theirs = peer_group(f.vrank, m);
      send_range(peer, f.first(mine), f.first(mine + m));
      copy_own();
      recv_slices(prims, peer, at(f.first(theirs)), blocks(f.first(theirs), f.first(theirs + m)));
    }
    copy_own();  // one rank alone
    if (f.folded()) {
      send_slices(prims, f.partner, at(0), blocks(0, f.partner));
      send_slices(prims, f.partner, at(f.partner + 1), blocks(f.partner + 1, c.size));
    }
  }
  prims.flush();
}

void reduce_scatter_recursive_halving(OpContext& c, const void* send, void* recv, size_t count) {
  Prims prims(c);
  const Fold f(c.rank, c.size);
  const int n = c.size;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  // A column is `width` elements of every block; its partial sums, piece b for block b, fill about a slice,
  // but a piece is never below 4 KiB: with many ranks and small slices the frames would otherwise shrink to a
  // few bytes each (the extra memory is then 2 x N x 4 KiB).
  const size_t width = std::max<size_t>({1, c.slice_bytes / c.esize / static_cast<size_t>(n), 4096 / c.esize});
  const size_t buf_bytes = static_cast<size_t>(n) * width * c.esize;
  char* pool = f.excluded() || count == 0 ? nullptr : c.scratch->buffer(2 * buf_bytes);
  // Per buffer, the last send of each run that read it (one run per round, one for the fold).
  SendHandle reads[2][33];
  int num_reads[2] = {0, 0};

  size_t col = 0;
  for (size_t first_elem = 0; first_elem < count; first_elem += width, ++col) {
    const size_t len = std::min(width, count - first_elem) * c.esize;
    auto input = [&](int b) { return in + (static_cast<size_t>(b) * count + first_elem) * c.esize; };
    char* result = out + first_elem * c.esize;

    if (f.excluded()) {
      SendHandle own;
      for (int b = 0; b < n; ++b) {
        SendHandle h = prims.send(f.partner, input(b), len);
        if (b == c.rank) own = h;
      }
      // In place the result lands where our own block was sent from. The partner receives all n pieces
      // before anything else of this column.
      if (result == input(c.rank)) prims.wait(own);
      prims.recv(f.partner, result, len);
      continue;
    }

    const int buf = static_cast<int>(col % 2);
    for (int i = 0; i < num_reads[buf]; ++i) prims.wait(reads[buf][i]);
    num_reads[buf] = 0;
    char* partial = pool + static_cast<size_t>(buf) * buf_bytes;
    auto piece = [&](int b) { return partial + static_cast<size_t>(b) * len; };
    bool combined = false;  // whether the pieces hold partial sums yet (else the input is read)
    auto src = [&](int b) -> const char* { return combined ? piece(b) : input(b); };

    if (f.folded()) {
      for (int b = 0; b < n; ++b) prims.recv_reduce(f.partner, piece(b), input(b), len);
      combined = true;
    }
    for (int m = f.p / 2; m >= 1; m /= 2) {
      const int peer = f.real(f.vrank ^ m), keep = own_group(f.vrank, m), give = peer_group(f.vrank, m);
      SendHandle h;
      for (int b = f.first(give); b < f.first(give + m); ++b) h = prims.send(peer, src(b), len);
      if (combined) reads[buf][num_reads[buf]++] = h;
      for (int b = f.first(keep); b < f.first(keep + m); ++b) {
        prims.recv_reduce(peer, m == 1 && b == c.rank ? result : piece(b), src(b), len, /*last=*/m == 1);
      }
      combined = true;
    }
    if (f.folded()) reads[buf][num_reads[buf]++] = prims.send(f.partner, piece(f.partner), len);
  }
  prims.flush();
}

// ---- exact traffic: the same schedules, counting bytes ----

Traffic all_reduce_recursive_doubling_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  const Fold f(s.rank, s.size);
  const uint64_t k = s.count * s.esize;
  if (f.excluded()) return {k, k};
  const uint64_t rounds = static_cast<uint64_t>(f.rounds() + (f.folded() ? 1 : 0));
  return {rounds * k, rounds * k};
}

Traffic all_reduce_rabenseifner_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  const Fold f(s.rank, s.size);
  const uint64_t k = s.count * s.esize;
  if (f.excluded()) return {k, k};
  Traffic t;
  if (f.folded()) t = {k, k};
  const Parts parts{{s.count, f.p}, s.esize};
  for (int m = 1; m < f.p; m <<= 1) {
    const uint64_t mine = parts.bytes(own_group(f.vrank, m), m), theirs = parts.bytes(peer_group(f.vrank, m), m);
    t.sent += mine + theirs;  // halving gives away `theirs`, doubling hands out `mine`
    t.received += mine + theirs;
  }
  return t;
}

Traffic all_gather_recursive_doubling_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  const Fold f(s.rank, s.size);
  const uint64_t block = s.count * s.esize, others = static_cast<uint64_t>(s.size - 1) * block;
  if (f.excluded()) return {block, others};
  Traffic t;
  if (f.folded()) t = {others, block};
  for (int m = 1; m < f.p; m <<= 1) {
    const int mine = own_group(f.vrank, m), theirs = peer_group(f.vrank, m);
    t.sent += static_cast<uint64_t>(f.first(mine + m) - f.first(mine)) * block;
    t.received += static_cast<uint64_t>(f.first(theirs + m) - f.first(theirs)) * block;
  }
  return t;
}

Traffic reduce_scatter_recursive_halving_traffic(const CallShape& s) {
  if (s.size == 1) return {};
  const Fold f(s.rank, s.size);
  const uint64_t block = s.count * s.esize, all = static_cast<uint64_t>(s.size) * block;
  if (f.excluded()) return {all, block};
  Traffic t;
  if (f.folded()) t = {block, all};
  for (int m = f.p / 2; m >= 1; m /= 2) {
    const int keep = own_group(f.vrank, m), give = peer_group(f.vrank, m);
    t.sent += static_cast<uint64_t>(f.first(give + m) - f.first(give)) * block;
    t.received += static_cast<uint64_t>(f.first(keep + m) - f.first(keep)) * block;
  }
  return t;
}

}  // namespace chorus::algo
