// The correctness matrix: every collective on every transport and world size, for every dtype and op, for
// counts 0, 1, fewer than the world size, not divisible by it, and large enough to take many pipeline
// slices (at 16 ranks, that one for a type of each element size), in place and out of place. Results are
// checked against a serial reference computed here.
#include <gtest/gtest.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>

#include "test_util.h"

namespace chorus::testing {
namespace {

enum class Coll { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Barrier, SendRecv };

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "AllReduce";
    case Coll::Broadcast: return "Broadcast";
    case Coll::Reduce: return "Reduce";
    case Coll::AllGather: return "AllGather";
    case Coll::ReduceScatter: return "ReduceScatter";
    case Coll::AllToAll: return "AllToAll";
    case Coll::Gather: return "Gather";
    case Coll::Scatter: return "Scatter";
    case Coll::Barrier: return "Barrier";
    case Coll::SendRecv: return "SendRecv";
  }
  return "?";
}

struct MatrixParam {
  TransportKind transport;
  int world_size;
  Coll coll;
  std::string algorithm;  // forced through CHORUS_ALGO; empty for send/recv
  // Large: 128 KiB slices and counts up to 300007, so in-process sends go zero-copy (above the 64 KiB eager
  // size) and shared-memory ones single-copy; fewer dtypes and ops to keep it quick.
  bool large = false;
  // Shared memory only: stream every payload through the rings (no cross-memory attach).
  bool streaming = false;
};

std::string param_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  return transport_label(info.param.transport) + "_" + std::to_string(info.param.world_size) + "ranks_" +
         coll_name(info.param.coll) + (info.param.algorithm.empty() ? "" : "_" + info.param.algorithm) +
         (info.param.large ? "_large" : "") + (info.param.streaming ? "_streaming" : "");
}

// The registry's name for a collective (CHORUS_ALGO's spelling).
const char* registry_name(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "allreduce";
    case Coll::Broadcast: return "broadcast";
    case Coll::Reduce: return "reduce";
    case Coll::AllGather: return "allgather";
    case Coll::ReduceScatter: return "reducescatter";
    case Coll::AllToAll: return "alltoall";
    case Coll::Gather: return "gather";
    case Coll::Scatter: return "scatter";
    case Coll::Barrier: return "barrier";
    case Coll::SendRecv: return "";
  }
  return "";
}

// The edge counts for world size n (test_util.h), or for the large cases one element and one count of many
// 128 KiB slices.
std::vector<size_t> counts_for(int n, bool large) {
  if (large) return {1, 300007};
  return edge_counts(n);
}

// At 16 ranks the count that spans many slices costs most of the matrix's time (reduce_scatter moves 15 of
// its chunks per rank per call in 1 KiB slices, with 16 ranks sharing the machine's cores), and slicing
// depends on bytes, not on the type. So there it runs for one type of each element size; every other count
// runs for every type, at every world size.
bool runs_count(int n, DataType t, size_t count) {
  if (n < 16 || count != kManySlices) return true;
  return t == DataType::Int8 || t == DataType::Float16 || t == DataType::Float32 || t == DataType::Float64;
}

// A rank's buffer for the matrix's calls, kept from call to call. Fresh vectors of up to a few hundred KiB per
// call cost the AddressSanitizer build about a third of the matrix's time: its allocator maps and unmaps such
// blocks, so every call faulted its pages in again and, with ranks as threads, shot down the other threads' TLB
// entries. Under ASan the bytes past the call's size are poisoned, so an algorithm that touches the user's
// buffer past its end is still reported, as it would be with a block of exactly that size. Zero bytes give a
// null pointer, as an empty vector's data() does. Sized once for the largest call, so no call maps pages anew.
class CallBuffer {
 public:
  explicit CallBuffer(size_t capacity) : storage_(capacity) {}
  CallBuffer(const CallBuffer&) = delete;
  CallBuffer& operator=(const CallBuffer&) = delete;
  ~CallBuffer() { ASAN_UNPOISON_MEMORY_REGION(storage_.data(), storage_.size()); }

  // `bytes` bytes of unspecified contents.
  char* get(size_t bytes) {
    ASAN_UNPOISON_MEMORY_REGION(storage_.data(), storage_.size());
    if (bytes > storage_.size()) storage_.resize(std::max(bytes, 2 * storage_.size()));
    ASAN_POISON_MEMORY_REGION(storage_.data() + bytes, storage_.size() - bytes);
    return bytes ? storage_.data() : nullptr;
  }
  // `bytes` bytes, each set to `fill`.
  char* get(size_t bytes, char fill) {
    char* p = get(bytes);
    if (bytes) std::memset(p, fill, bytes);
    return p;
  }

 private:
  std::vector<char> storage_;
};

class CollectiveMatrix : public ::testing::TestWithParam<MatrixParam> {
 protected:
  CommOptions options() const {
    CommOptions o;
    o.transport = GetParam().transport;
    o.timeout = std::chrono::seconds(60);
    // Small slices so modest counts exercise the pipelines; large ones for the zero-copy variant.
    o.slice_bytes = GetParam().large ? 128 * 1024 : 1024;
    return o;
  }
};

// The matrix computes inputs and references once per residue of the element index; that holds only while
// the value functions repeat with the periods test_util.h states.
TEST(TestInputs, RepeatWithThePeriodsTheMatrixAssumes) {
  for (DataType t : all_dtypes()) {
    for (int r = 0; r < 16; ++r) {
      const size_t mp = movement_period(t);
      for (size_t i = 0; i < 3 * mp; ++i) ASSERT_EQ(movement_value(t, r, i), movement_value(t, r, i + mp)) << i;
      for (ReduceOp op : all_ops()) {
        const size_t ip = input_period(op);
        for (size_t i = 0; i < 3 * ip; ++i) ASSERT_EQ(input_value(t, op, r, i), input_value(t, op, r, i + ip)) << i;
      }
    }
  }
}

TEST_P(CollectiveMatrix, MatchesSerialReference) {
  const MatrixParam p = GetParam();
  const int n = p.world_size;
  std::atomic<int> barrier_arrivals{0};
  ScopedEnv forced("CHORUS_ALGO", p.algorithm.empty() ? "" : std::string(registry_name(p.coll)) + ":" + p.algorithm);
  // The other shm runs use cross-memory attach wherever the kernel allows it, whatever its cost here (the
  // automatic choice may well stream: CrossMemoryAttach tests that).
  ScopedEnv streaming("CHORUS_SHM_CMA", p.streaming ? "0" : "1");
  run_world(n, options(), [&](Communicator& comm) {
    const int r = comm.rank();
    // The largest call: the largest count, of 8-byte elements, n blocks of it.
    const std::vector<size_t> counts = counts_for(n, p.large);
    const size_t most = *std::max_element(counts.begin(), counts.end()) * sizeof(double) * static_cast<size_t>(n);
    CallBuffer in_buf(most), out_buf(most);
    ASSERT_EQ(comm.size(), n);
    ASSERT_EQ(transport_label(comm.options().transport), transport_label(p.transport));
    if (p.transport == TransportKind::Shm) {
      ASSERT_EQ(comm.transport_name(), "shm");
    }
    const std::vector<DataType> types =
        p.large ? std::vector<DataType>{DataType::Float32, DataType::Float16} : all_dtypes();
    for (DataType t : types) {
      const size_t es = dtype_size(t);
      bool reducing = p.coll == Coll::AllReduce || p.coll == Coll::Reduce || p.coll == Coll::ReduceScatter;
      std::vector<ReduceOp> ops = !reducing ? std::vector<ReduceOp>{ReduceOp::Sum}
                                  : p.large  ? std::vector<ReduceOp>{ReduceOp::Sum, ReduceOp::Avg}
                                             : all_ops();
      for (ReduceOp op : ops) {
        // Every rank's input values and the serial reference reduction, once per residue of the element
        // index (input_period, movement_period): the 16-rank cases spent most of their time recomputing
        // them for every element.
        const size_t period = reducing ? input_period(op) : movement_period(t);
        std::vector<double> inputs(static_cast<size_t>(n) * period), references(reducing ? period : 0);
        for (int q = 0; q < n; ++q) {
          for (size_t j = 0; j < period; ++j) {
            inputs[static_cast<size_t>(q) * period + j] =
                reducing ? input_value(t, op, q, j) : movement_value(t, q, j);
          }
        }
        for (size_t j = 0; j < references.size(); ++j) {
          std::vector<double> column(static_cast<size_t>(n));
          for (int q = 0; q < n; ++q) column[static_cast<size_t>(q)] = inputs[static_cast<size_t>(q) * period + j];
          references[j] = reference_reduce(t, op, column);
        }
        for (size_t count : counts_for(n, p.large)) {
          if (!runs_count(n, t, count)) continue;
          for (bool in_place : {false, true}) {
            int root = static_cast<int>((count + static_cast<size_t>(t) + (in_place ? 1 : 0)) % static_cast<size_t>(n));
            std::string what = std::string(coll_name(p.coll)) + " rank " + std::to_string(r) + " " +
                               std::string(to_string(t)) + (reducing ? " " + std::string(to_string(op)) : "") +
                               " count " + std::to_string(count) + (in_place ? " in-place" : " out-of-place") +
                               " root " + std::to_string(root);
            auto in_val = [&](int rank, size_t i) { return inputs[static_cast<size_t>(rank) * period + i % period]; };
            auto reduced = [&](size_t i) { return references[i % period]; };  // over all ranks' element i
            // This rank's first `elems` input elements: one period encoded, then copied along.
            auto fill_inputs = [&](char* buf, size_t elems) {
              const size_t block = std::min(elems, period) * es;
              for (size_t j = 0; j < std::min(elems, period); ++j) store_value(t, buf, j, in_val(r, j));
              for (size_t off = block; off < elems * es; off += block) {
                std::memcpy(buf + off, buf, std::min(block, elems * es - off));
              }
            };
            switch (p.coll) {
              case Coll::AllReduce: {
                char* in = in_buf.get(count * es);
                char* out = out_buf.get(count * es, 0x5a);
                fill_inputs(in, count);
                if (in_place) {
                  comm.all_reduce(in, in, count, t, op);
                  if (count) std::memcpy(out, in, count * es);
                } else {
                  comm.all_reduce(in, out, count, t, op);
                }
                expect_elements(t, out, count, reduced, what);
                break;
              }
              case Coll::Reduce: {
                char* in = in_buf.get(count * es);
                char* out = out_buf.get(count * es, 0x5a);
                fill_inputs(in, count);
                if (in_place) {
                  comm.reduce(in, in, count, t, op, root);
                  if (count) std::memcpy(out, in, count * es);
                } else {
                  comm.reduce(in, r == root ? out : nullptr, count, t, op, root);
                }
                if (r == root) {
                  expect_elements(t, out, count, reduced, what);
                }
                break;
              }
              case Coll::ReduceScatter: {
                char* in = in_buf.get(count * es * n);
                char* out = out_buf.get(count * es, 0x5a);
                fill_inputs(in, count * n);
                if (in_place) {
                  char* mine = in + static_cast<size_t>(r) * count * es;
                  comm.reduce_scatter(in, mine, count, t, op);
                  if (count) std::memcpy(out, mine, count * es);
                } else {
                  comm.reduce_scatter(in, out, count, t, op);
                }
                expect_elements(
                    t, out, count, [&](size_t i) { return reduced(static_cast<size_t>(r) * count + i); }, what);
                break;
              }
              case Coll::Broadcast: {
                char* in = in_buf.get(count * es);
                char* out = out_buf.get(count * es, 0x5a);
                fill_inputs(in, count);
                if (in_place) {
                  if (r == root && count) std::memcpy(out, in, count * es);
                  comm.broadcast(out, out, count, t, root);
                } else {
                  comm.broadcast(r == root ? in : nullptr, out, count, t, root);
                }
                expect_elements(
                    t, out, count, [&](size_t i) { return in_val(root, i); }, what);
                break;
              }
              case Coll::AllGather: {
                char* in = in_buf.get(count * es);
                char* out = out_buf.get(count * es * n, 0x5a);
                fill_inputs(in, count);
                if (in_place) {
                  char* mine = out + static_cast<size_t>(r) * count * es;
                  if (count) std::memcpy(mine, in, count * es);
                  comm.all_gather(mine, out, count, t);
                } else {
                  comm.all_gather(in, out, count, t);
                }
                expect_elements(
                    t, out, count * n,
                    [&](size_t i) {
                      return in_val(static_cast<int>(i / std::max<size_t>(count, 1)), i % std::max<size_t>(count, 1));
                    },
                    what);
                break;
              }
              case Coll::AllToAll: {
                char* in = in_buf.get(count * es * n);
                char* out = out_buf.get(count * es * n, 0x5a);
                fill_inputs(in, count * n);
                if (in_place) {
                  comm.all_to_all(in, in, count, t);
                  if (count) std::memcpy(out, in, count * es * n);
                } else {
                  comm.all_to_all(in, out, count, t);
                }
                // Block j of the result is block r of rank j's input.
                expect_elements(
                    t, out, count * n,
                    [&](size_t i) {
                      size_t c = std::max<size_t>(count, 1);
                      return in_val(static_cast<int>(i / c), static_cast<size_t>(r) * count + i % c);
                    },
                    what);
                break;
              }
              case Coll::Gather: {
                char* in = in_buf.get(count * es);
                char* out = out_buf.get(count * es * n, 0x5a);
                fill_inputs(in, count);
                if (in_place && r == root) {
                  char* mine = out + static_cast<size_t>(r) * count * es;
                  if (count) std::memcpy(mine, in, count * es);
                  comm.gather(mine, out, count, t, root);
                } else {
                  comm.gather(in, r == root ? out : nullptr, count, t, root);
                }
                if (r == root) {
                  expect_elements(
                      t, out, count * n,
                      [&](size_t i) {
                        size_t c = std::max<size_t>(count, 1);
                        return in_val(static_cast<int>(i / c), i % c);
                      },
                      what);
                }
                break;
              }
              case Coll::Scatter: {
                char* in = in_buf.get(count * es * n);
                char* out = out_buf.get(count * es, 0x5a);
                fill_inputs(in, count * n);
                if (in_place && r == root) {
                  char* mine = in + static_cast<size_t>(r) * count * es;
                  comm.scatter(in, mine, count, t, root);
                  if (count) std::memcpy(out, mine, count * es);
                } else {
                  comm.scatter(r == root ? in : nullptr, out, count, t, root);
                }
                expect_elements(
                    t, out, count, [&](size_t i) { return in_val(root, static_cast<size_t>(r) * count + i); }, what);
                break;
              }
              case Coll::Barrier: {
                if (t != DataType::Int8 || count > 1 || in_place) break;  // the barrier has no data: run it a few times
                for (int round = 0; round < 3; ++round) {
                  std::this_thread::sleep_for(std::chrono::microseconds((r * 131 + round * 17) % 700));
                  barrier_arrivals.fetch_add(1);
                  comm.barrier();
                  // Nobody leaves round k before all n ranks arrived at it.
                  EXPECT_GE(barrier_arrivals.load(), n * (round + 1 + static_cast<int>(count) * 3)) << what;
                  comm.barrier();
                }
                break;
              }
              case Coll::SendRecv: {
                if (n == 1 || in_place) break;
                // A ring of messages: even ranks send first, odd ranks receive first.
                int to = (r + 1) % n, from = (r + n - 1) % n;
                char* in = in_buf.get(count * es);
                char* out = out_buf.get(count * es, 0x5a);
                fill_inputs(in, count);
                if (r % 2 == 0) {
                  comm.send(in, count, t, to);
                  comm.recv(out, count, t, from);
                } else {
                  comm.recv(out, count, t, from);
                  comm.send(in, count, t, to);
                }
                expect_elements(
                    t, out, count, [&](size_t i) { return in_val(from, i); }, what);
                break;
              }
            }
            // The forced algorithm really ran: no silent fallback.
            if (!p.algorithm.empty() && p.coll != Coll::Barrier) {
              EXPECT_EQ(comm.last_operation().algorithm, p.algorithm) << what;
            }
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

std::vector<MatrixParam> matrix_params() {
  std::vector<MatrixParam> v;
  for (TransportKind tk : {TransportKind::InProc, TransportKind::Tcp, TransportKind::Shm}) {
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
      for (Coll c : {Coll::AllReduce, Coll::Broadcast, Coll::Reduce, Coll::AllGather, Coll::ReduceScatter,
                     Coll::AllToAll, Coll::Gather, Coll::Scatter, Coll::Barrier, Coll::SendRecv}) {
        if (c == Coll::SendRecv) {
          v.push_back({tk, n, c, ""});
          continue;
        }
        for (const std::string& algo : algorithm_names(registry_name(c))) v.push_back({tk, n, c, algo});
      }
    }
  }
  for (int n : {3, 5}) {
    for (Coll c : {Coll::AllReduce, Coll::Broadcast, Coll::Reduce, Coll::AllGather, Coll::ReduceScatter,
                   Coll::AllToAll, Coll::Gather, Coll::Scatter}) {
      for (const std::string& algo : algorithm_names(registry_name(c))) {
        v.push_back({TransportKind::InProc, n, c, algo, /*large=*/true});
        v.push_back({TransportKind::Shm, n, c, algo, /*large=*/true});
        if (n == 3) v.push_back({TransportKind::Shm, n, c, algo, /*large=*/true, /*streaming=*/true});
      }
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Worlds, CollectiveMatrix, ::testing::ValuesIn(matrix_params()), param_name);

// Shared memory, every wait sleeping (CHORUS_SHM_SPIN=0), so every frame's sender must see the receiver asleep
// and wake it. A wake-up missed costs the sleeper its whole 100 ms slice, and the transport counts it. Both
// ways of ordering the sender's store against its look at the sleeper: membarrier (the default, where the
// kernel offers it) and a locked instruction per frame.
class ShmWakeups : public ::testing::TestWithParam<bool> {};

TEST_P(ShmWakeups, EveryFrameWakesItsSleepingReceiver) {
  ScopedEnv spin("CHORUS_SHM_SPIN", "0");
  ScopedEnv membarrier("CHORUS_SHM_MEMBARRIER", GetParam() ? "1" : "0");
  CommOptions o;
  o.transport = TransportKind::Shm;
  o.timeout = std::chrono::seconds(60);
  constexpr int kRanks = 3;
  std::atomic<uint64_t> sleeps{0};
  run_world(kRanks, o, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int i = 0; i < 400; ++i) {
      const size_t count = 1 + static_cast<size_t>(i % 7) * 37;
      std::vector<int32_t> v(count);
      for (size_t k = 0; k < count; ++k) v[k] = static_cast<int32_t>((r + 1) * (i + 1) + k);
      comm.all_reduce(v.data(), v.data(), count, DataType::Int32, ReduceOp::Sum);
      for (size_t k = 0; k < count; ++k) {
        // sum over ranks q of (q + 1)(i + 1) + k
        ASSERT_EQ(v[k], static_cast<int32_t>(kRanks * (kRanks + 1) / 2 * (i + 1) + kRanks * k)) << i;
      }
      int32_t b = r == i % kRanks ? i : -1;
      comm.broadcast(&b, &b, 1, DataType::Int32, i % kRanks);
      ASSERT_EQ(b, i);
    }
    TrafficCounters t = comm.traffic();
    sleeps += t.sleeps;
    EXPECT_EQ(t.missed_wakeups, 0u) << "rank " << r << " slept " << t.sleeps << " times";
  });
  // The ranks slept (the test exercised the wake-ups). Not every rank need have: under ctest's parallel jobs one
  // rank of a CI run (2026-12-07) found its data there at every wait's last look, 800 calls long.
  EXPECT_GT(sleeps.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Ordering, ShmWakeups, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Membarrier" : "Locked"; });

// A rank's own block of a gathering or all-to-all call, and a root's out-of-place copy, stream from 1 MiB
// with CHORUS_STREAM_COPY=1 (algo::local_copy): every algorithm of those collectives, out of place, with
// blocks of a mebibyte and 12 bytes, so that the copies' heads and tails are not whole lines.
TEST(StreamingCopies, EveryAlgorithmThatCopiesItsOwnBlockGivesTheReference) {
  // Anything but auto, 0 or 1 is refused at creation, naming the variable.
  for (const char* bad : {"2", "yes", "-1"}) {
    ScopedEnv env("CHORUS_STREAM_COPY", bad);
    const std::string what = expect_error(
        ErrorCode::InvalidArgument, [] { Communicator::create(std::make_shared<MemoryStore>(), 0, 1, CommOptions{}); });
    EXPECT_NE(what.find("CHORUS_STREAM_COPY"), std::string::npos) << bad << ": " << what;
  }
  ScopedEnv stream("CHORUS_STREAM_COPY", "1");
  constexpr size_t kCount = (size_t{1} << 18) + 3;  // floats per block
  auto value = [](int rank, size_t i) { return static_cast<float>(rank * 1000003 + static_cast<int>(i % 999983)); };
  for (TransportKind t : {TransportKind::InProc, TransportKind::Shm}) {
    for (int n : {2, 3}) {
      CommOptions o;
      o.transport = t;
      o.timeout = std::chrono::seconds(120);
      run_world(n, o, [&](Communicator& comm) {
        const int r = comm.rank();
        const std::string where = transport_label(t) + ", " + std::to_string(n) + " ranks, rank " + std::to_string(r);
        auto expect_blocks = [&](const std::vector<float>& got, auto&& want, const std::string& what) {
          size_t wrong = 0;
          for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want(i);
          EXPECT_EQ(wrong, 0u) << what << ", " << where;
        };
        std::vector<float> mine(kCount), all(kCount * static_cast<size_t>(n));
        for (size_t i = 0; i < kCount; ++i) mine[i] = value(r, i);
        for (const std::string& a : algorithm_names("allgather")) {
          CallOptions co;
          co.algorithm = a;
          std::fill(all.begin(), all.end(), -1.0f);
          comm.all_gather(mine.data(), all.data(), kCount, DataType::Float32, co);
          expect_blocks(
              all, [&](size_t i) { return value(static_cast<int>(i / kCount), i % kCount); }, "allgather " + a);
        }
        std::vector<float> a2a_in(kCount * static_cast<size_t>(n)), a2a_out(a2a_in.size());
        // Block q of rank r's input goes to rank q: value(r, q * kCount + i).
        for (size_t i = 0; i < a2a_in.size(); ++i) a2a_in[i] = value(r, i);
        for (const std::string& a : algorithm_names("alltoall")) {
          CallOptions co;
          co.algorithm = a;
          std::fill(a2a_out.begin(), a2a_out.end(), -1.0f);
          comm.all_to_all(a2a_in.data(), a2a_out.data(), kCount, DataType::Float32, co);
          expect_blocks(
              a2a_out,
              [&](size_t i) {
                return value(static_cast<int>(i / kCount), static_cast<size_t>(r) * kCount + i % kCount);
              },
              "alltoall " + a);
        }
        const int root = n - 1;
        for (const std::string& a : algorithm_names("broadcast")) {
          CallOptions co;
          co.algorithm = a;
          std::vector<float> out(kCount, -1.0f);
          comm.broadcast(mine.data(), out.data(), kCount, DataType::Float32, root, co);
          expect_blocks(
              out, [&](size_t i) { return value(root, i); }, "broadcast " + a);
        }
        for (const std::string& a : algorithm_names("gather")) {
          CallOptions co;
          co.algorithm = a;
          std::fill(all.begin(), all.end(), -1.0f);
          comm.gather(mine.data(), r == root ? all.data() : nullptr, kCount, DataType::Float32, root, co);
          if (r == root) {
            expect_blocks(
                all, [&](size_t i) { return value(static_cast<int>(i / kCount), i % kCount); }, "gather " + a);
          }
        }
        for (const std::string& a : algorithm_names("scatter")) {
          CallOptions co;
          co.algorithm = a;
          std::vector<float> out(kCount, -1.0f);
          comm.scatter(r == root ? a2a_in.data() : nullptr, out.data(), kCount, DataType::Float32, root, co);
          expect_blocks(
              out, [&](size_t i) { return value(root, static_cast<size_t>(r) * kCount + i); }, "scatter " + a);
        }
      });
    }
  }
}

}  // namespace
}  // namespace chorus::testing
