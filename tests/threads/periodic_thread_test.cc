#include "threads/periodic_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "support/wait.h"
#include "threads/thread_name.h"

namespace atrium {
namespace {

using testing_support::ChangeSignal;

TEST(PeriodicThreadTest, RunsItsRoundEveryIntervalOnAThreadOfItsName) {
  ChangeSignal signal;
  std::atomic<int> rounds{0};
  std::string name;
  PeriodicThread t("tick-test", 1, [&] {
    if (rounds == 0) name = ThisThreadName();
    ++rounds;
    signal.Notify();
  });
  t.Start();
  ASSERT_TRUE(signal.WaitUntil([&] { return rounds >= 3; }));
  t.Stop();
  EXPECT_EQ(name, "tick-test");
  const int after_stop = rounds;
  EXPECT_FALSE(t.running());
  EXPECT_EQ(rounds, after_stop);  // no round after Stop returned
}

TEST(PeriodicThreadTest, StopWakesItWithoutWaitingTheInterval) {
  std::atomic<int> rounds{0};
  PeriodicThread t("slow", 3'600'000, [&] { ++rounds; });
  t.Start();
  const auto before = std::chrono::steady_clock::now();
  t.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(30));
  EXPECT_EQ(rounds, 0);  // the first round comes one interval after Start
}

TEST(PeriodicThreadTest, AtOnceRunsTheFirstRoundWithoutWaitingTheInterval) {
  ChangeSignal signal;
  std::atomic<int> rounds{0};
  PeriodicThread t("eager", 3'600'000, [&] {
    ++rounds;
    signal.Notify();
  });
  t.Start(PeriodicThread::First::kAtOnce);
  ASSERT_TRUE(signal.WaitUntil([&] { return rounds >= 1; }));
  t.Stop();
  EXPECT_EQ(rounds, 1);  // the second waits the hour, and Stop cut it short
}

TEST(PeriodicThreadTest, NoIntervalStartsNothingAndAStoppedOneStartsAgain) {
  std::atomic<int> rounds{0};
  PeriodicThread off("off", 0, [&] { ++rounds; });
  off.Start();
  EXPECT_FALSE(off.running());

  ChangeSignal signal;
  PeriodicThread t("again", 1, [&] {
    ++rounds;
    signal.Notify();
  });
  t.Start();
  ASSERT_TRUE(signal.WaitUntil([&] { return rounds >= 1; }));
  t.Stop();
  t.Stop();  // idempotent
  const int first = rounds;
  t.Start();
  EXPECT_TRUE(t.running());
  ASSERT_TRUE(signal.WaitUntil([&] { return rounds > first; }));
}

}  // namespace
}  // namespace atrium
