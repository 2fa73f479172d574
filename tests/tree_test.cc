// The double binary tree (structure, traffic, results) and the direct all_reduce.
//
// The algorithms are run here below the Communicator: each rank is a thread with its own transport (in-process
// or tcp on loopback) wrapped in a counting forwarder, and an OpContext built the way core builds one. That
// lets the test pick the algorithm and measure each rank's payload bytes whatever core selects.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "algo/algorithms.h"
#include "algo/registry.h"
#include "test_util.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::testing {
namespace {

using algo::TreeNode;

// ---------------------------------------------------------------- tree structure

int ceil_log2(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }

struct Trees {
  std::vector<TreeNode> t[2];
};

Trees build(int size) {
  Trees trees;
  trees.t[0].resize(static_cast<size_t>(size));
  trees.t[1].resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) algo::double_binary_tree(r, size, &trees.t[0][r], &trees.t[1][r]);
  return trees;
}

// Checks that `nodes` is one tree over every rank rooted at `root`: parent and child links agree, and a walk
// from the root reaches every rank once, no deeper than ceil(log2 size) + 1 levels.
void expect_tree(const std::vector<TreeNode>& nodes, int root, const std::string& what) {
  const int size = static_cast<int>(nodes.size());
  std::vector<int> parent_links(static_cast<size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    const TreeNode& n = nodes[r];
    ASSERT_LE(n.num_children(), 2) << what << " rank " << r;
    if (n.child[1] >= 0) {
      EXPECT_GE(n.child[0], 0) << what << " rank " << r << ": right child without a left";
    }
    for (int c : n.child) {
      if (c < 0) continue;
      ASSERT_LT(c, size) << what << " rank " << r;
      EXPECT_NE(c, r) << what;
      EXPECT_EQ(nodes[c].parent, r) << what << ": " << c << " is a child of " << r << " but names parent "
                                    << nodes[c].parent;
      ++parent_links[c];
    }
    if (n.parent >= 0) {
      ASSERT_LT(n.parent, size) << what << " rank " << r;
      const TreeNode& p = nodes[n.parent];
      EXPECT_TRUE(p.child[0] == r || p.child[1] == r)
          << what << ": " << r << " names parent " << n.parent << ", which does not list it as a child";
    }
  }
  EXPECT_EQ(nodes[root].parent, -1) << what << ": root " << root;
  for (int r = 0; r < size; ++r) {
    if (r != root) {
      EXPECT_EQ(parent_links[r], 1) << what << ": rank " << r << " is the child of " << parent_links[r] << " nodes";
      EXPECT_GE(nodes[r].parent, 0) << what << ": rank " << r << " has no parent";
    }
  }
  std::vector<int> depth(static_cast<size_t>(size), -1);
  std::queue<int> todo;
  depth[root] = 1;
  todo.push(root);
  int reached = 0, max_depth = 0;
  while (!todo.empty()) {
    int r = todo.front();
    todo.pop();
    ++reached;
    max_depth = std::max(max_depth, depth[r]);
    for (int c : nodes[r].child) {
      if (c < 0) continue;
      ASSERT_EQ(depth[c], -1) << what << ": rank " << c << " reached twice";
      depth[c] = depth[r] + 1;
      todo.push(c);
    }
  }
  EXPECT_EQ(reached, size) << what << ": the tree does not span every rank";
  EXPECT_LE(max_depth, ceil_log2(size) + 1) << what;
}

TEST(DoubleBinaryTree, BothTreesSpanEveryRankWithShallowBinaryNodes) {
  for (int size = 1; size <= 64; ++size) {
    Trees trees = build(size);
    expect_tree(trees.t[0], 0, "size " + std::to_string(size) + " tree 0");
    expect_tree(trees.t[1], size > 1 ? 1 : 0, "size " + std::to_string(size) + " tree 1");
  }
}

TEST(DoubleBinaryTree, TreeZeroIsTheLowestSetBitTree) {
  for (int size = 2; size <= 64; ++size) {
    Trees trees = build(size);
    const int top = static_cast<int>(std::bit_floor(static_cast<unsigned>(size - 1)));
    EXPECT_EQ(trees.t[0][0].child[0], top) << "size " << size;
    EXPECT_EQ(trees.t[0][0].child[1], -1) << "size " << size;
    for (int r = 1; r < size; ++r) {
      const int b = r & -r;
      const TreeNode& n = trees.t[0][r];
      if (b == 1) {
        EXPECT_EQ(n.num_children(), 0) << "size " << size << ": odd rank " << r << " is a leaf of tree 0";
      } else {
        EXPECT_EQ(n.child[0], r - b / 2) << "size " << size << " rank " << r;
      }
      // The parent is r - b or r + b.
      EXPECT_TRUE(n.parent == r - b || n.parent == r + b) << "size " << size << " rank " << r;
    }
  }
}

TEST(DoubleBinaryTree, TreeOneIsTreeZeroShiftedByOne) {
  for (int size = 2; size <= 64; ++size) {
    Trees trees = build(size);
    auto real = [&](int x) { return x < 0 ? -1 : (x + 1) % size; };
    for (int x = 0; x < size; ++x) {
      const TreeNode& zero = trees.t[0][x];
      const TreeNode& one = trees.t[1][real(x)];
      EXPECT_EQ(one.parent, real(zero.parent)) << "size " << size << " position " << x;
      EXPECT_EQ(one.child[0], real(zero.child[0])) << "size " << size << " position " << x;
      EXPECT_EQ(one.child[1], real(zero.child[1])) << "size " << size << " position " << x;
    }
    // The leaves of tree 0 (odd ranks) do the reductions of tree 1.
    for (int r = 1; r < size; r += 2) {
      EXPECT_GT(trees.t[1][r].num_children(), 0) << "size " << size << ": odd rank " << r << " is a leaf in both";
    }
  }
}

TEST(DoubleBinaryTree, SplitGivesEachElementToOneTree) {
  for (size_t count : {0, 1, 2, 3, 1000, 6007}) {
    size_t first = algo::tree_split(count);
    EXPECT_LE(first, count);
    EXPECT_LE(count - first, first) << "tree 0 carries the larger half";
    EXPECT_LE(first - (count - first), 1u);
  }
  EXPECT_EQ(algo::tree_split(1), 1u);
}

// ---------------------------------------------------------------- running algorithms below the Communicator

// Forwards to a real transport and counts payload bytes.
class CountingTransport final : public transport::Transport {
 public:
  explicit CountingTransport(std::unique_ptr<transport::Transport> inner)
      : Transport(inner->rank(), inner->size()), inner_(std::move(inner)) {}

  std::string_view name() const noexcept override { return inner_->name(); }
  transport::SendHandle isend(int peer, const transport::MessageTag& tag, const void* data, size_t len,
                              const base::Deadline& deadline, transport::SenderWork work) override {
    sent += len;
    return inner_->isend(peer, tag, data, len, deadline, work);
  }
  void recv(int peer, const transport::MessageTag& tag, void* dst, size_t len,
            const base::Deadline& deadline) override {
    received += len;
    inner_->recv(peer, tag, dst, len, deadline);
  }
  void recv_reduce(int peer, const transport::MessageTag& tag, void* dst, const void* local, size_t len,
                   const transport::Reduction& reduction, const base::Deadline& deadline) override {
    received += len;
    inner_->recv_reduce(peer, tag, dst, local, len, reduction, deadline);
  }
  void wait_send(transport::SendHandle handle, const base::Deadline& deadline) override {
    inner_->wait_send(handle, deadline);
  }
  void flush(const base::Deadline& deadline) override { inner_->flush(deadline); }
  void check_peers() override { inner_->check_peers(); }
  void fail(const Error& error) noexcept override { inner_->fail(error); }
  void abort(const std::string& reason) noexcept override { inner_->abort(reason); }
  void close() noexcept override { inner_->close(); }

  uint64_t sent = 0, received = 0;

 private:
  std::unique_ptr<transport::Transport> inner_;
};

struct RankState {
  int rank = 0, size = 1;
  std::unique_ptr<CountingTransport> transport;
  algo::Scratch scratch;
  uint64_t seq = 0;
};

constexpr uint64_t kCommTag = 0x7ee5eed5eed5eedull;

void run_ranks(TransportKind kind, int size, const std::function<void(RankState&)>& fn) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto deadline = base::Deadline::after(std::chrono::seconds(60));
        std::unique_ptr<transport::Transport> t;
        if (kind == TransportKind::InProc) {
          t = transport::InProcTransport::connect(*store, "inproc", r, size, kCommTag, deadline);
          // As core does: rank 0 keeps the fabric until every rank attached.
          store->set("attached/" + std::to_string(r), "1");
          std::vector<std::string> keys;
          for (int q = 0; q < size; ++q) keys.push_back("attached/" + std::to_string(q));
          store->wait(keys, std::chrono::seconds(60));
        } else {
          t = transport::TcpTransport::connect(*store, "tcp/", r, size, kCommTag, transport::TcpOptions{}, std::nullopt,
                                               /*all_local=*/true, deadline);
        }
        RankState st;
        st.rank = r;
        st.size = size;
        st.transport = std::make_unique<CountingTransport>(std::move(t));
        try {
          fn(st);
        } catch (const Error& e) {
          st.transport->fail(e);  // so that the other ranks stop waiting for this one
          throw;
        } catch (const std::exception& e) {
          st.transport->fail(Error(ErrorCode::Internal, e.what()));
          throw;
        }
        st.transport->close();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

// An OpContext for one all_reduce, built as core builds it.
algo::OpContext all_reduce_context(RankState& st, transport::AlgoId algo, size_t count, DataType type, ReduceOp op,
                                   size_t slice_bytes) {
  algo::OpContext c;
  c.transport = st.transport.get();
  c.scratch = &st.scratch;
  c.rank = st.rank;
  c.size = st.size;
  c.tag.op = transport::OpKind::AllReduce;
  c.tag.dtype = type;
  c.tag.algo = algo;
  c.tag.root = -1;
  c.tag.count = count;
  c.tag.seq = st.seq++;
  c.tag.has_reduce_op = true;
  c.tag.reduce_op = op;
  c.deadline = base::Deadline::after(std::chrono::seconds(60));
  c.dtype = type;
  c.esize = dtype_size(type);
  c.slice_bytes = std::max(c.esize, slice_bytes - slice_bytes % c.esize);
  c.op = op;
  c.reduce.fn = kernels::reduce_fn(type, op);
  c.reduce.elem_size = c.esize;
  c.reduce_final = c.reduce;
  if (op == ReduceOp::Avg) {
    c.reduce_final.sum_div = kernels::sum_div_fn(type);
    c.reduce_final.divisor = static_cast<uint64_t>(st.size);
    c.divide = kernels::div_fn(type);
  }
  return c;
}

const algo::Algorithm& all_reduce_algorithm(const std::string& name) {
  const algo::Algorithm* a = algo::find_algorithm(algo::Collective::AllReduce, name);
  if (!a) throw std::runtime_error("no all_reduce algorithm " + name);
  return *a;
}

// ---------------------------------------------------------------- results against a serial reference

struct AlgoParam {
  std::string algorithm;
  TransportKind transport;
  int world_size;
};

std::string algo_param_name(const ::testing::TestParamInfo<AlgoParam>& info) {
  return info.param.algorithm + "_" + transport_label(info.param.transport) + "_" +
         std::to_string(info.param.world_size) + "ranks";
}

class AllReduceAlgorithm : public ::testing::TestWithParam<AlgoParam> {};

TEST_P(AllReduceAlgorithm, MatchesSerialReference) {
  const AlgoParam p = GetParam();
  const int n = p.world_size;
  const algo::Algorithm& algorithm = all_reduce_algorithm(p.algorithm);
  // collectives_test runs these algorithms with 1 KiB slices (CHORUS_ALGO); here 40-byte slices make even
  // 1000 elements take many slices, and odd counts give the two trees different numbers of slices. The
  // largest edge count (kManySlices) keeps 1 KiB slices: at 40 bytes it would cut 1,200 slices per tree, one
  // wake-up each for 9-13 threads on the test machine's two cores, and took most of the suite's time (8-30 s
  // a world size) without reaching any path that 1000 elements in 40-byte slices do not.
  run_ranks(p.transport, n, [&](RankState& st) {
    const int r = st.rank;
    for (DataType t : all_dtypes()) {
      const size_t es = dtype_size(t);
      for (ReduceOp op : all_ops()) {
        for (size_t count : edge_counts(n)) {
          const size_t slice_bytes = count >= kManySlices ? 1024 : 40;
          for (bool in_place : {false, true}) {
            std::vector<char> in(count * es), out(count * es, 0x5a);
            for (size_t i = 0; i < count; ++i) store_value(t, in.data(), i, input_value(t, op, r, i));
            algo::OpContext c = all_reduce_context(st, algorithm.id, count, t, op, slice_bytes);
            if (in_place) {
              algorithm.run(c, in.data(), in.data(), count, -1);
              out = in;
            } else {
              algorithm.run(c, in.data(), out.data(), count, -1);
            }
            size_t wrong = 0, first = 0;
            double got = 0, want = 0;
            std::vector<double> vals(static_cast<size_t>(n));
            for (size_t i = 0; i < count; ++i) {
              for (int q = 0; q < n; ++q) vals[static_cast<size_t>(q)] = input_value(t, op, q, i);
              double w = reference_reduce(t, op, vals), g = load_value(t, out.data(), i);
              if (!(g == w) && wrong++ == 0) {
                first = i;
                got = g;
                want = w;
              }
            }
            ASSERT_EQ(wrong, 0u) << p.algorithm << " rank " << r << " " << to_string(t) << " " << to_string(op)
                                 << " count " << count << (in_place ? " in-place" : " out-of-place") << " slice "
                                 << slice_bytes << ": " << wrong << " wrong; first at " << first << ": got " << got
                                 << ", want " << want;
          }
        }
      }
    }
  });
}

std::vector<AlgoParam> algo_params() {
  std::vector<AlgoParam> v;
  for (const char* a : {"tree", "direct"}) {
    // The collective matrix covers 1-8 and 16 on both transports; these are the sizes it does not.
    for (int n : {9, 11, 13}) v.push_back({a, TransportKind::InProc, n});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllReduceAlgorithm, ::testing::ValuesIn(algo_params()), algo_param_name);

// Messages far larger than the in-process eager limit and the socket buffers, with the default 512 KiB
// slices: sends really point into the user's buffers while the partial sums there are rewritten, in place
// and out of place.
class AllReduceLarge : public ::testing::TestWithParam<AlgoParam> {};

TEST_P(AllReduceLarge, MatchesSerialReference) {
  const AlgoParam p = GetParam();
  const int n = p.world_size;
  const algo::Algorithm& algorithm = all_reduce_algorithm(p.algorithm);
  const size_t count = (size_t{3} << 20) + 17;  // 12 MiB of float32
  run_ranks(p.transport, n, [&](RankState& st) {
    const int r = st.rank;
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      for (bool in_place : {false, true}) {
        std::vector<float> in(count), out(count, -1.0f);
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i * 7 + static_cast<size_t>(r) * 13) % 1000);
        algo::OpContext c = all_reduce_context(st, algorithm.id, count, DataType::Float32, op, 512 * 1024);
        float* dst = in_place ? in.data() : out.data();
        algorithm.run(c, in.data(), dst, count, -1);
        size_t wrong = 0, first = 0;
        for (size_t i = 0; i < count; ++i) {
          double sum = 0;
          for (int q = 0; q < n; ++q) sum += static_cast<double>((i * 7 + static_cast<size_t>(q) * 13) % 1000);
          float want = op == ReduceOp::Avg ? static_cast<float>(sum) / static_cast<float>(n) : static_cast<float>(sum);
          if (!(dst[i] == want) && wrong++ == 0) first = i;
        }
        ASSERT_EQ(wrong, 0u) << p.algorithm << " rank " << r << " " << to_string(op)
                             << (in_place ? " in-place" : " out-of-place") << "; first wrong at " << first << ": got "
                             << dst[first];
      }
    }
  });
}

std::vector<AlgoParam> large_params() {
  std::vector<AlgoParam> v;
  for (const char* a : {"tree", "direct"}) {
    for (TransportKind t : {TransportKind::InProc, TransportKind::Tcp}) {
      for (int n : {2, 3, 6}) v.push_back({a, t, n});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllReduceLarge, ::testing::ValuesIn(large_params()), algo_param_name);

// ---------------------------------------------------------------- traffic: measured == predicted

class AllReduceTraffic : public ::testing::TestWithParam<AlgoParam> {};

TEST_P(AllReduceTraffic, MeasuredBytesMatchTheRegistry) {
  const AlgoParam p = GetParam();
  const int n = p.world_size;
  const algo::Algorithm& algorithm = all_reduce_algorithm(p.algorithm);
  run_ranks(p.transport, n, [&](RankState& st) {
    for (DataType t : {DataType::Int8, DataType::Float32, DataType::Float64}) {
      for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n + 1), size_t{1000}, kManySlices}) {
        for (size_t slice_bytes : {size_t{40}, size_t{1024}}) {
          std::vector<char> in(count * dtype_size(t), 0), out(count * dtype_size(t));
          algo::OpContext c = all_reduce_context(st, algorithm.id, count, t, ReduceOp::Sum, slice_bytes);
          const uint64_t sent0 = st.transport->sent, received0 = st.transport->received;
          algorithm.run(c, in.data(), out.data(), count, -1);
          algo::CallShape shape;
          shape.coll = algo::Collective::AllReduce;
          shape.size = n;
          shape.rank = st.rank;
          shape.count = count;
          shape.esize = dtype_size(t);
          shape.slice_bytes = c.slice_bytes;
          algo::Traffic want = algorithm.traffic(shape);
          EXPECT_EQ(st.transport->sent - sent0, want.sent)
              << p.algorithm << " rank " << st.rank << " of " << n << " " << to_string(t) << " count " << count;
          EXPECT_EQ(st.transport->received - received0, want.received)
              << p.algorithm << " rank " << st.rank << " of " << n << " " << to_string(t) << " count " << count;
        }
      }
    }
  });
}

std::vector<AlgoParam> traffic_params() {
  std::vector<AlgoParam> v;
  for (const char* a : {"tree", "direct"}) {
    for (int n : {2, 3, 5, 8, 12, 16}) v.push_back({a, TransportKind::InProc, n});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllReduceTraffic, ::testing::ValuesIn(traffic_params()), algo_param_name);

// Every rank of the double binary tree sends and receives each half at most three times (an interior node
// of a binary tree has a parent and two children), and twice the data summed over the ranks.
TEST(AllReduceTreeTraffic, EachHalfCrossesEveryTreeEdgeTwice) {
  for (int n = 2; n <= 64; ++n) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
      uint64_t total_sent = 0, total_received = 0;
      for (int r = 0; r < n; ++r) {
        algo::CallShape s;
        s.size = n;
        s.rank = r;
        s.count = count;
        s.esize = 4;
        algo::Traffic t = algo::all_reduce_tree_traffic(s);
        EXPECT_LE(t.sent, 3 * 4 * count) << n << " ranks, rank " << r;
        total_sent += t.sent;
        total_received += t.received;
      }
      // Each tree has n - 1 edges, each carrying its half once up and once down.
      EXPECT_EQ(total_sent, 2u * static_cast<uint64_t>(n - 1) * count * 4) << n << " ranks";
      EXPECT_EQ(total_received, total_sent);
    }
  }
}

// Through the public API: CHORUS_ALGO=allreduce:tree forces the tree (read when the communicator is
// created), a CallOptions name forces direct, and last_operation() reports the measured and predicted bytes.
TEST(AllReduceThroughCommunicator, ForcedAlgorithmsRunAndTheirTrafficMatches) {
  for (int n : {2, 3, 5, 8}) {
    ::setenv("CHORUS_ALGO", "allreduce:tree", 1);
    CommOptions options;
    options.transport = TransportKind::InProc;
    options.timeout = std::chrono::seconds(60);
    options.slice_bytes = 1024;
    run_world(n, options, [&](Communicator& comm) {
      for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n + 1), kManySlices}) {
        for (const char* name : {"tree", "direct"}) {
          std::vector<int32_t> in(count, comm.rank() + 1), out(count, 0);
          const bool by_option = std::string(name) == "direct";
          if (by_option) {
            comm.all_reduce(in.data(), out.data(), count, DataType::Int32, ReduceOp::Sum, CallOptions{name});
          } else {
            comm.all_reduce(in.data(), out.data(), count, DataType::Int32, ReduceOp::Sum);
          }
          const int32_t want = n * (n + 1) / 2;
          EXPECT_EQ(std::count(out.begin(), out.end(), want), static_cast<std::ptrdiff_t>(count))
              << name << " rank " << comm.rank() << " of " << n << " count " << count;
          OperationInfo info = comm.last_operation();
          EXPECT_EQ(info.algorithm, name);
          EXPECT_TRUE(info.forced);
          algo::CallShape shape;
          shape.size = n;
          shape.rank = comm.rank();
          shape.count = count;
          shape.esize = 4;
          shape.slice_bytes = 1024;
          algo::Traffic want_traffic = all_reduce_algorithm(name).traffic(shape);
          EXPECT_EQ(info.bytes_sent, want_traffic.sent) << name << " rank " << comm.rank() << " count " << count;
          EXPECT_EQ(info.bytes_received, want_traffic.received) << name << " rank " << comm.rank();
          EXPECT_EQ(info.predicted_sent, want_traffic.sent) << name << " rank " << comm.rank();
          EXPECT_EQ(info.predicted_received, want_traffic.received) << name << " rank " << comm.rank();
        }
      }
    });
    ::unsetenv("CHORUS_ALGO");
  }
}

}  // namespace
}  // namespace chorus::testing
