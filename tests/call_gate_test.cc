// The API and execution locks of a communicator in one word (core/call_gate.h).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/call_gate.h"

namespace chorus::core {
namespace {

TEST(CallGate, ASynchronousCallTakesBothAndGivesBothBack) {
  CallGate g;
  bool exec = false;
  ASSERT_TRUE(g.try_lock_both(&exec));
  EXPECT_TRUE(exec);
  EXPECT_FALSE(g.try_lock_api());   // a second thread is refused
  EXPECT_FALSE(g.try_lock_exec());  // the progress thread and abort() wait
  bool other = false;
  EXPECT_FALSE(g.try_lock_both(&other));
  g.unlock_both();
  EXPECT_TRUE(g.try_lock_api());
  EXPECT_TRUE(g.try_lock_exec());
}

TEST(CallGate, WhileAnotherThreadExecutesTheCallGetsOnlyTheApiBit) {
  CallGate g;
  ASSERT_TRUE(g.try_lock_exec());  // the progress thread runs a task
  bool exec = true;
  ASSERT_TRUE(g.try_lock_both(&exec));
  EXPECT_FALSE(exec);
  EXPECT_FALSE(g.try_lock_api());
  g.unlock_exec();  // the task ends
  g.lock_exec();    // the call takes it once the queue has drained
  g.unlock_both();
  bool again = false;
  EXPECT_TRUE(g.try_lock_both(&again));
  EXPECT_TRUE(again);
}

TEST(CallGate, ARefusedCallLeavesTheExecutionBitAsItWas) {
  CallGate g;
  ASSERT_TRUE(g.try_lock_api());  // an asynchronous call is queueing
  bool exec = false;
  EXPECT_FALSE(g.try_lock_both(&exec));  // a second thread: refused, and it must not keep EXEC
  EXPECT_TRUE(g.try_lock_exec());        // the progress thread can still run
  EXPECT_FALSE(g.try_lock_both(&exec));  // refused again, and EXEC stays with the progress thread
  EXPECT_FALSE(g.try_lock_exec());
  g.unlock_exec();
  g.unlock_api();
  EXPECT_TRUE(g.try_lock_both(&exec));
  EXPECT_TRUE(exec);
}

// Threads that call (both bits, as synchronous calls do) and threads that execute (EXEC alone, as the progress
// thread and abort() do): at most one of them is ever inside the execution section, and the plain counter it
// guards sees every increment.
TEST(CallGate, ExecutionIsExclusiveUnderContention) {
  CallGate g;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  long counter = 0;  // guarded by EXEC only
  constexpr int kIters = 20000;
  auto section = [&] {
    if (inside.fetch_add(1) != 0) overlap = true;
    ++counter;
    inside.fetch_sub(1);
  };
  std::vector<std::thread> threads;
  std::atomic<long> done{0};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {  // callers
      for (int i = 0; i < kIters; ++i) {
        bool exec = false;
        if (!g.try_lock_both(&exec)) continue;  // the other caller has the communicator
        if (!exec) g.lock_exec();
        section();
        done.fetch_add(1);
        g.unlock_both();
      }
    });
  }
  threads.emplace_back([&] {  // executor
    for (int i = 0; i < kIters / 10; ++i) {
      g.lock_exec();
      section();
      done.fetch_add(1);
      g.unlock_exec();
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(counter, done.load());
  bool exec = false;
  EXPECT_TRUE(g.try_lock_both(&exec));  // nothing left held
  EXPECT_TRUE(exec);
}

}  // namespace
}  // namespace chorus::core
