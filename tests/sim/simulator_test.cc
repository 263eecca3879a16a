#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/result_matchers.h"

namespace atrium::sim {
namespace {

Trace DefaultTrace() {
  const std::string dir = std::string(ATRIUM_DATA_DIR) + "/alibaba-gpu-v2023/";
  return *LoadTrace(dir + "openb_node_list_gpu_node.csv", dir + "openb_pod_list_default.csv");
}

TEST(SimulatorTest, ArrivalsAreAShuffleOfThePodsThenClonesUpToTheTarget) {
  const Trace trace = DefaultTrace();
  std::vector<int32_t> rank;
  const auto pods = ArrivalSequence(trace, 1.3, 42, &rank);
  ASSERT_GT(pods.size(), trace.pods.size());
  std::vector<std::string> head;
  for (size_t i = 0; i < trace.pods.size(); ++i) head.push_back(pods[i].name);
  std::vector<std::string> names;
  for (const auto& p : trace.pods) names.push_back(p.name);
  EXPECT_NE(head, names) << "shuffled";
  std::sort(head.begin(), head.end());
  EXPECT_EQ(head, names) << "every original pod exactly once, before the clones";
  int64_t total = 0;
  for (const auto& p : pods) total += int64_t{p.num_gpu} * p.milli;
  const double target = 1.3 * 6212000;
  EXPECT_LE(total, target + 7000) << "a multi-GPU clone overshoots by at most 7 GPUs";
  EXPECT_GT(total, target - 1000) << "cloning stops only at the first overshoot";
  // The tie rank is a permutation.
  std::sort(rank.begin(), rank.end());
  for (size_t i = 0; i < rank.size(); ++i) ASSERT_EQ(rank[i], static_cast<int32_t>(i));
  // Same seed, same sequence; another seed, another.
  EXPECT_EQ(ArrivalSequence(trace, 1.3, 42, nullptr).size(), pods.size());
  EXPECT_NE(ArrivalSequence(trace, 1.3, 43, nullptr)[0].name == pods[0].name &&
                ArrivalSequence(trace, 1.3, 43, nullptr)[1].name == pods[1].name,
            true);
}

TEST(SimulatorTest, TuningDownRemovesPods) {
  const Trace trace = DefaultTrace();
  const auto pods = ArrivalSequence(trace, 0.5, 7, nullptr);
  int64_t total = 0;
  for (const auto& p : pods) total += int64_t{p.num_gpu} * p.milli;
  EXPECT_LE(total, 0.5 * 6212000);
  EXPECT_LT(pods.size(), trace.pods.size());
}

TEST(SimulatorTest, DiscretizeAveragesRoundedRatiosPerRoundedColumn) {
  // Capacity 1000 GPUs: 10,000 milli is 1 % of it.
  const int64_t capacity = 1000 * 1000;
  // Arrivals at 0.5 % (rounds half to even: column 0), 1.0 %, 1.4 %, 2.5 % (→ 2).
  std::vector<int64_t> arrived = {5000, 10000, 14000, 25000};
  std::vector<int64_t> used = {5000, 10000, 12000, 20000};
  auto cells = Discretize(arrived, used, capacity);
  ASSERT_EQ(cells.size(), static_cast<size_t>(kColumns));
  EXPECT_DOUBLE_EQ(*cells[0], 0.5);
  EXPECT_DOUBLE_EQ(*cells[1], 1.1);  // mean of 1.0 and 1.2
  EXPECT_DOUBLE_EQ(*cells[2], 2.0);
  // Column 3 has no rows: it falls back to columns 2..4.
  EXPECT_DOUBLE_EQ(*cells[3], 2.0);
  EXPECT_FALSE(cells[10].has_value());
}

TEST(SimulatorTest, RunsAreDeterministicPerSeed) {
  const Trace trace = DefaultTrace();
  auto a = SimulateRun(trace, RunOptions{"fgd", 44, 1.3});
  auto b = SimulateRun(trace, RunOptions{"fgd", 44, 1.3});
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->alloc_pct, b->alloc_pct);
  EXPECT_EQ(a->failed_pods, b->failed_pods);
  EXPECT_ERROR(SimulateRun(trace, RunOptions{"no-such-policy", 1, 1.3}),
               ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace atrium::sim
