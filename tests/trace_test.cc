// The timeline recorder: the Chrome trace file's structure, event order and thread names, the output path
// rules, writing when the last communicator closes and at exit, nothing recorded with tracing off, and
// scripts/plot-trace.py on a recorded trace.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chorus/chorus.h"

#include "chorus/trace.h"
#include "core/trace.h"
#include "subprocess.h"

namespace chorus::testing {
namespace {

namespace fs = std::filesystem;
namespace trace = core::trace;
using nlohmann::json;

fs::path make_temp_dir() {
  std::string templ = (fs::temp_directory_path() / "chorus-trace-test-XXXXXX").string();
  EXPECT_NE(::mkdtemp(templ.data()), nullptr);
  return templ;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no file " << path;
  return json::parse(in);
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(e.path());
  return out;
}

void busy_for(std::chrono::microseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

class Trace : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    trace::set_output_for_testing(dir_.string());
  }
  void TearDown() override {
    trace::set_output_for_testing("");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(Trace, SpansFromThreadsAndScopesMakeAChromeTrace) {
  ASSERT_TRUE(trace_enabled());
  trace::set_rank(3);
  trace::set_rank(5);  // the first rank wins
  {
    TraceScope step("step");
    {
      TraceScope layer("backward layer 12");
      busy_for(std::chrono::microseconds(200));
    }
    int64_t t0 = trace::now_us();
    busy_for(std::chrono::microseconds(100));
    trace::record_span("memcpy", "p2p", t0, trace::now_us());
  }
  std::thread named([] {
    trace::set_thread_name("progress world r3");
    int64_t t0 = trace::now_us();
    busy_for(std::chrono::microseconds(100));
    trace::record_span("all_reduce", "collective", t0, trace::now_us(), R"({"bytes":4096,"algorithm":"ring","seq":1})");
    trace::record_instant("enqueue", "collective", R"({"seq":2})");
  });
  named.join();
  std::thread unnamed([] {
    int64_t t0 = trace::now_us();
    trace::record_span("quote\"and\\slash\n", "compute", t0, t0 + 5, "not json");
  });
  unnamed.join();
  EXPECT_EQ(trace::event_count_for_testing(), 6u);
  trace_flush();

  json doc = read_json(dir_ / "chorus-trace-rank3.json");
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["rank"], 3);
  EXPECT_EQ(doc["otherData"]["clock"], "realtime us");
  ASSERT_TRUE(doc["traceEvents"].is_array());

  std::map<int, std::string> thread_names;
  std::map<std::string, json> by_name;
  int64_t last_ts = 0;
  int64_t realtime_now =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  for (const auto& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3) << e;
    std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
      if (e["name"] == "process_name") {
        EXPECT_EQ(e["args"]["name"], "rank 3");
      }
      continue;
    }
    ASSERT_TRUE(ph == "X" || ph == "i") << e;
    int64_t ts = e["ts"];
    EXPECT_GE(ts, last_ts) << "events are written in time order: " << e;
    last_ts = ts;
    // Realtime microseconds, so that ranks on one host line up.
    EXPECT_LE(ts, realtime_now);
    EXPECT_GT(ts, realtime_now - int64_t{600} * 1000 * 1000);
    if (ph == "X") {
      EXPECT_GE(e["dur"].get<int64_t>(), 0) << e;
    }
    EXPECT_TRUE(e["tid"].is_number_integer());
    by_name[e["name"]] = e;
  }
  ASSERT_EQ(by_name.size(), 6u);

  const json& step = by_name["step"];
  const json& layer = by_name["backward layer 12"];
  const json& memcpy_span = by_name["memcpy"];
  EXPECT_EQ(step["cat"], "compute");
  EXPECT_EQ(layer["cat"], "compute");
  EXPECT_EQ(memcpy_span["cat"], "p2p");
  EXPECT_GE(layer["dur"].get<int64_t>(), 200);
  // The step contains the layer and the copy; parents come first.
  for (const json* child : {&layer, &memcpy_span}) {
    EXPECT_LE(step["ts"].get<int64_t>(), (*child)["ts"].get<int64_t>());
    EXPECT_GE(step["ts"].get<int64_t>() + step["dur"].get<int64_t>(),
              (*child)["ts"].get<int64_t>() + (*child)["dur"].get<int64_t>());
  }
  EXPECT_LE(layer["ts"].get<int64_t>() + layer["dur"].get<int64_t>(), memcpy_span["ts"].get<int64_t>());

  const json& ar = by_name["all_reduce"];
  EXPECT_EQ(ar["cat"], "collective");
  EXPECT_EQ(ar["ph"], "X");
  EXPECT_EQ(ar["args"]["bytes"], 4096);
  EXPECT_EQ(ar["args"]["algorithm"], "ring");
  const json& enq = by_name["enqueue"];
  EXPECT_EQ(enq["ph"], "i");
  EXPECT_EQ(enq["s"], "t");
  EXPECT_EQ(enq["args"]["seq"], 2);
  EXPECT_GE(enq["ts"].get<int64_t>(), ar["ts"].get<int64_t>() + ar["dur"].get<int64_t>());
  const json& odd = by_name["quote\"and\\slash\n"];
  EXPECT_EQ(odd["args"]["text"], "not json");
  EXPECT_EQ(odd["dur"], 5);

  // Threads: this test runs on the process's main thread ("caller"); the named one; the unnamed default.
  int main_tid = step["tid"], named_tid = ar["tid"], unnamed_tid = odd["tid"];
  EXPECT_EQ(layer["tid"], main_tid);
  EXPECT_EQ(enq["tid"], named_tid);
  EXPECT_EQ(std::set<int>({main_tid, named_tid, unnamed_tid}).size(), 3u);
  EXPECT_EQ(thread_names[main_tid], "caller");
  EXPECT_EQ(thread_names[named_tid], "progress world r3");
  EXPECT_EQ(thread_names[unnamed_tid], "thread " + std::to_string(unnamed_tid));

  // Flushing again rewrites the file with everything so far.
  trace::record_instant("later", "group");
  trace_flush();
  EXPECT_EQ(read_json(dir_ / "chorus-trace-rank3.json")["traceEvents"].back()["name"], "later");
  EXPECT_EQ(files_in(dir_).size(), 1u) << "no temporary file is left behind";
  // Nothing new, but the file is gone: written again.
  fs::remove(dir_ / "chorus-trace-rank3.json");
  trace_flush();
  EXPECT_EQ(read_json(dir_ / "chorus-trace-rank3.json")["traceEvents"].back()["name"], "later");
}

TEST_F(Trace, RecordingWhileFlushing) {
  trace::set_rank(0);
  constexpr int kThreads = 3, kSpans = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      trace::set_thread_name("worker " + std::to_string(t));
      for (int i = 0; i < kSpans; ++i) {
        TraceScope s("span", t % 2 ? "compute" : "collective");
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    trace_flush();
    EXPECT_TRUE(read_json(dir_ / "chorus-trace-rank0.json")["traceEvents"].is_array());
  }
  for (auto& t : threads) t.join();
  trace_flush();
  json doc = read_json(dir_ / "chorus-trace-rank0.json");
  int spans = 0;
  for (const auto& e : doc["traceEvents"]) spans += e["ph"] == "X";
  EXPECT_EQ(spans, kThreads * kSpans);
}

TEST_F(Trace, ARealRunRecordsEveryOperationOnTheThreadThatRanIt) {
  // Two ranks as threads of one process: one file holds both ranks' events.
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options;
      options.transport = TransportKind::InProc;
      auto comm = Communicator::create(store, r, 2, options);
      std::vector<float> v(1000, 1.0f), w(8, 1.0f);
      Work a = comm->all_reduce_async(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
      {
        TraceScope s("backward layer 0");
        busy_for(std::chrono::microseconds(200));
      }
      a.wait();
      comm->all_reduce(w, ReduceOp::Max);                   // synchronous: on the caller's thread
      comm->group_start();
      comm->send(w, 1 - r);
      comm->recv(v.data(), 8, DataType::Float32, 1 - r);
      comm->group_end();  // synchronous: on the caller's thread too
    });
  }
  for (auto& t : threads) t.join();
  // Both communicators are gone: the file was written, named after whichever rank finished connecting first
  // (both connect at the same moment; in a real job each process has one rank).
  std::vector<fs::path> files = files_in(dir_);
  ASSERT_EQ(files.size(), 1u);
  json doc = read_json(files[0]);
  std::map<int, std::string> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"].get<int>()] = e["args"]["name"];
  }
  int async_on_progress = 0, sync_on_caller = 0, groups = 0, p2p = 0, compute = 0, queued = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "i" && e["cat"] == "queue") ++queued;
    if (e["ph"] != "X") continue;
    std::string thread = thread_names[e["tid"].get<int>()];
    if (e["cat"] == "collective" && e["name"] == "allreduce") {
      if (e["args"]["count"] == 1000) {
        EXPECT_EQ(thread.rfind("progress world r", 0), 0u) << thread;
        ++async_on_progress;
      } else {
        EXPECT_EQ(thread.find("progress"), std::string::npos) << thread;
        EXPECT_EQ(e["args"]["bytes"], 32);
        ++sync_on_caller;
      }
      EXPECT_TRUE(e["args"].contains("algorithm"));
    }
    if (e["cat"] == "group") {
      EXPECT_EQ(thread.find("progress"), std::string::npos) << "group_end runs on the caller's thread: " << thread;
      ++groups;
    }
    p2p += e["cat"] == "p2p";
    compute += e["cat"] == "compute";
  }
  EXPECT_EQ(async_on_progress, 2);
  EXPECT_EQ(sync_on_caller, 2);
  EXPECT_EQ(groups, 2);
  EXPECT_EQ(p2p, 2);
  EXPECT_EQ(compute, 2);
  EXPECT_EQ(queued, 2);  // one async all_reduce per rank (group_end runs the group on the caller's thread)
}

TEST_F(Trace, TraceScopeFunctionAndInstants) {
  trace::set_rank(0);
  {
    auto s = trace_scope("backward layer 12");
    trace_instant("bucket 3 ready", "reducer");
  }
  trace_flush();
  json doc = read_json(dir_ / "chorus-trace-rank0.json");
  bool span = false, instant = false;
  for (const auto& e : doc["traceEvents"]) {
    span |= e["ph"] == "X" && e["name"] == "backward layer 12" && e["cat"] == "compute";
    instant |= e["ph"] == "i" && e["name"] == "bucket 3 ready" && e["cat"] == "reducer";
  }
  EXPECT_TRUE(span);
  EXPECT_TRUE(instant);
}

TEST_F(Trace, OffRecordsAndWritesNothing) {
  trace::set_output_for_testing("");
  EXPECT_FALSE(trace_enabled());
  EXPECT_FALSE(trace::enabled());
  trace::set_rank(0);
  trace::set_thread_name("x");
  { TraceScope s("compute"); }
  trace::record_span("a", "collective", 1, 2);
  trace::record_instant("b", "collective");
  trace::communicator_opened();
  trace::communicator_closed();
  trace_flush();
  EXPECT_EQ(trace::event_count_for_testing(), 0u);
  EXPECT_EQ(trace::output_path(), "");
  EXPECT_TRUE(files_in(dir_).empty());
}

TEST_F(Trace, WrittenWhenTheLastCommunicatorCloses) {
  trace::communicator_opened();
  trace::set_rank(1);
  trace::communicator_opened();
  { TraceScope s("forward"); }
  trace::communicator_closed();
  EXPECT_TRUE(files_in(dir_).empty());
  trace::communicator_closed();
  EXPECT_EQ(trace::output_path(), (dir_ / "chorus-trace-rank1.json").string());
  json doc = read_json(dir_ / "chorus-trace-rank1.json");
  EXPECT_EQ(doc["traceEvents"].back()["name"], "forward");
}

TEST_F(Trace, PathTemplatesAndMissingDirectories) {
  trace::set_output_for_testing((dir_ / "run-%r.json").string());
  trace::set_rank(4);
  { TraceScope s("x"); }
  trace_flush();
  EXPECT_TRUE(fs::exists(dir_ / "run-4.json"));

  trace::set_output_for_testing((dir_ / "a" / "b").string());
  trace::set_rank(0);
  { TraceScope s("y"); }
  trace_flush();
  EXPECT_EQ(read_json(dir_ / "a" / "b" / "chorus-trace-rank0.json")["otherData"]["rank"], 0);

  // Without a communicator there is no rank: the file is named after the process.
  trace::set_output_for_testing(dir_.string());
  { TraceScope s("z"); }
  trace_flush();
  EXPECT_TRUE(fs::exists(dir_ / ("chorus-trace-pid" + std::to_string(::getpid()) + ".json")));
}

TEST_F(Trace, AnUnwritablePathIsAWarningNotAnError) {
  std::ofstream(dir_ / "file").put('x');
  trace::set_output_for_testing((dir_ / "file").string());  // a file where a directory should be
  { TraceScope s("x"); }
  EXPECT_NO_THROW(trace_flush());
  EXPECT_EQ(files_in(dir_).size(), 1u);
}

// ---- the environment variable and the flush at exit, in a child process ----

// Run only as a child of EnvironmentVariableAndExit (disabled in a normal run).
TEST(TraceChild, DISABLED_RecordAndExit) {
  const char* env = std::getenv("CHORUS_TRACE");
  ASSERT_EQ(trace_enabled(), env != nullptr && *env != '\0');
  trace::set_rank(7);
  TraceScope s("child scope");
  busy_for(std::chrono::microseconds(50));
}

TEST(TraceEnv, EnvironmentVariableAndExit) {
  fs::path dir = make_temp_dir();
  ::unsetenv("CHORUS_TRACE");
  auto run_child = [&](std::vector<std::string> env) {
    std::vector<Child> child{
        spawn({fs::read_symlink("/proc/self/exe").string(), "--gtest_filter=TraceChild.DISABLED_RecordAndExit",
               "--gtest_also_run_disabled_tests"},
              env, true)};
    wait_all(child, std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(child[0].status) && WEXITSTATUS(child[0].status) == 0) << child[0].output;
  };
  run_child({});
  EXPECT_TRUE(files_in(dir).empty());
  run_child({"CHORUS_TRACE=" + (dir / "traces").string()});
  json doc = read_json(dir / "traces" / "chorus-trace-rank7.json");
  bool found = false;
  for (const auto& e : doc["traceEvents"]) found = found || e["name"] == "child scope";
  EXPECT_TRUE(found) << doc.dump(1);
  fs::remove_all(dir);
}

// ---- scripts/plot-trace.py ----

std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

TEST_F(Trace, PlotScriptDrawsAndSummarises) {
  int status = -1;
  run_capture("/usr/bin/python3 -c 'import matplotlib' 2>&1", &status);
  if (status != 0) GTEST_SKIP() << "python3-matplotlib is not installed (scripts/setup.sh installs it)";

  // Two ranks, made by hand: compute [0, 10) ms and communication [5, 20) ms overlap for 5 ms.
  for (int rank : {0, 1}) {
    trace::set_output_for_testing(dir_.string());
    trace::set_rank(rank);
    int64_t t0 = trace::now_us();
    trace::record_span("backward", "compute", t0, t0 + 10000);
    std::thread progress([&] {
      trace::set_thread_name("progress");
      trace::record_span("all_reduce", "collective", t0 + 5000, t0 + 15000);
      trace::record_span("send", "p2p", t0 + 12000, t0 + 20000);  // its union with the all_reduce is 15 ms
    });
    progress.join();
    trace::record_instant("bucket 0 ready", "reducer");
    trace_flush();
  }
  std::string png = (dir_ / "timeline.png").string();
  std::string out = run_capture("/usr/bin/python3 " CHORUS_SOURCE_DIR "/scripts/plot-trace.py --summary --out " + png +
                                    " " + dir_.string() + " 2>&1",
                                &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_GT(fs::file_size(png), 1000u);
  for (int rank : {0, 1}) {
    std::string line = "rank " + std::to_string(rank) +
                       ": compute_ms=10.000 comm_ms=15.000 overlapped_ms=5.000 exposed_comm_ms=10.000";
    EXPECT_NE(out.find(line), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace chorus::testing
