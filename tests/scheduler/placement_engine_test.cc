// The placement engine and the policies' scores on small hand-made nodes.
#include <gtest/gtest.h>

#include "scheduler/engine.h"
#include "scheduler/frag.h"
#include "scheduler/policies.h"
#include "support/result_matchers.h"

namespace atrium::sched {
namespace {

NodeState Node(int64_t cpu, std::initializer_list<int32_t> free, int32_t model = 0) {
  NodeState n;
  n.cpu_left = cpu;
  n.mem_left = 1 << 20;
  n.model = model;
  for (int32_t f : free) n.gpu_free[static_cast<size_t>(n.gpu_count++)] = f;
  return n;
}

std::unique_ptr<Policy> Make(std::string_view name, std::vector<TypicalPod> workload = {}) {
  PolicyContext context;
  context.workload = std::move(workload);
  context.node_count = 8;
  auto policy = MakePolicy(name, context);
  EXPECT_TRUE(policy.has_value());
  return std::move(*policy);
}

TEST(NodeStateTest, FitsChecksCpuMemoryModelAndPerGpuRoom) {
  const NodeState n = Node(8000, {1000, 300, 1000});
  EXPECT_TRUE(Fits(n, Request{8000, 1, 2, 1000, 0}));
  EXPECT_FALSE(Fits(n, Request{8001, 1, 1, 100, 0})) << "CPU";
  EXPECT_FALSE(Fits(n, Request{1, n.mem_left + 1, 1, 100, 0})) << "memory";
  EXPECT_FALSE(Fits(n, Request{1, 1, 3, 1000, 0})) << "only two whole GPUs are free";
  EXPECT_TRUE(Fits(n, Request{1, 1, 1, 300, 0}));
  EXPECT_FALSE(Fits(n, Request{1, 1, 1, 300, uint64_t{1} << 1})) << "model 0 not allowed";
  EXPECT_TRUE(Fits(n, Request{1, 1, 0, 0, 0})) << "CPU-only";
}

TEST(NodeStateTest, GpuChoiceHelpers) {
  const NodeState n = Node(8000, {1000, 300, 500, 1000});
  EXPECT_EQ(BestFitGpu(n, Request{0, 0, 1, 250, 0}).index[0], 1);
  EXPECT_EQ(BestFitGpu(n, Request{0, 0, 1, 400, 0}).index[0], 2);
  auto two = FirstFreeGpus(n, Request{0, 0, 2, 1000, 0});
  ASSERT_EQ(two.count, 2);
  EXPECT_EQ(two.index[0], 0);
  EXPECT_EQ(two.index[1], 3);
  auto tight = TightestGpus(n, Request{0, 0, 2, 400, 0});
  ASSERT_EQ(tight.count, 2);
  EXPECT_EQ(tight.index[0], 2);  // 500, then the first 1000
  EXPECT_EQ(tight.index[1], 0);
}

// Vectors from the reference repository's gpu_packing_score_test.go
// (METHOD.md Appendix B).
TEST(PolicyScoreTest, GpuPackingMatchesTheReferenceVectors) {
  auto packing = Make("gpu-packing");
  EXPECT_EQ(packing->Score(0, Node(64000, {200, 1000, 1000, 500}), Request{1000, 1, 2, 1000, 0}),
            48);
  EXPECT_EQ(packing->Score(0, Node(64000, {1000, 1000, 1000, 1000}), Request{1000, 1, 1, 1000, 0}),
            29);
  EXPECT_EQ(packing->Score(0, Node(64000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}),
                           Request{1000, 1, 1, 1000, 0}),
            25);
  EXPECT_EQ(packing->Score(0, Node(64000, {200, 1000, 1000, 500}), Request{1000, 1, 2, 200, 0}),
            93);
}

TEST(PolicyScoreTest, BestFitAndDotProductTruncateLikeTheReference) {
  auto best_fit = Make("best-fit");
  // s = (64000-32000)/128000*0.5 + (8000-1000)/8000*0.5 = 0.125 + 0.4375 -> 43.75 -> 43
  EXPECT_EQ(best_fit->Score(0, Node(64000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}),
                            Request{32000, 1, 1, 1000, 0}),
            43);
  auto dot = Make("dot-product");
  // 1 - (0.5*0.25 + 1*0.125)/2 = 0.875 -> 87
  EXPECT_EQ(dot->Score(0, Node(64000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}),
                       Request{32000, 1, 1, 1000, 0}),
            87);
}

TEST(FragmentTest, FreeGpuTheWorkloadCannotUseIsAFragment) {
  // Two classes: half need 600 milli-GPU and 4 cores, half are CPU-only.
  const std::vector<TypicalPod> workload = {
      {4000, 600, 1, "", 0, 0.5},
      {2000, 0, 0, "", 0, 0.5},
  };
  // GPU 0 has 500 free (too small for the share class), GPU 1 has 1000.
  // Share class: fits on GPU 1; GPU 0's 500 is a fragment -> 0.5 * 500.
  // CPU-only class: all free GPU counts -> 0.5 * 1500.
  EXPECT_DOUBLE_EQ(FragmentOf(Node(8000, {500, 1000}), workload), 250 + 750);
  // Without CPU for the share class, all free GPU is a fragment.
  EXPECT_DOUBLE_EQ(FragmentOf(Node(3000, {500, 1000}), workload), 1500);
}

TEST(FragmentTest, TypicalPodsKeepTheHeadOfTheDistribution) {
  std::vector<WorkloadSample> samples;
  for (int i = 0; i < 90; ++i) samples.push_back({1000, 500, 1, "", 0});
  for (int i = 0; i < 6; ++i) samples.push_back({2000, 1000, 1, "", 0});
  for (int i = 0; i < 4; ++i) samples.push_back({3000, 1000, 8, "", 0});
  // 90 < 95, so the second class is taken; 96 >= 95 stops before the third.
  const auto typical = BuildTypicalPods(samples, 0.95);
  ASSERT_EQ(typical.size(), 2u);
  EXPECT_DOUBLE_EQ(typical[0].popularity, 90.0 / 96);
  EXPECT_DOUBLE_EQ(typical[1].popularity, 6.0 / 96);
}

// Scores each node by a fixed table, counting calls.
class TablePolicy final : public Policy {
 public:
  explicit TablePolicy(std::vector<int64_t> scores) : scores_(std::move(scores)) {}
  std::string_view name() const override { return "table"; }
  int64_t Score(int32_t node, const NodeState& state, const Request&) override {
    ++calls;
    return scores_[static_cast<size_t>(node)] - (8 - state.FullyFreeGpus());
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    return FirstFreeGpus(node, request);
  }
  int calls = 0;

 private:
  std::vector<int64_t> scores_;
};

std::vector<NodeState> EightGpuNodes(int n) {
  return std::vector<NodeState>(static_cast<size_t>(n),
                                Node(96000, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}));
}

TEST(EngineTest, HighestScoreWinsAndTiesGoToTheSmallestRank) {
  TablePolicy policy({10, 30, 30, 5});
  Engine engine(EightGpuNodes(4), {3, 2, 1, 0}, policy, 1);
  const Request one{1000, 1, 1, 1000, 0};
  auto d = engine.Decide(one);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->node, 2) << "nodes 1 and 2 tie; node 2 has the smaller rank";
  EXPECT_EQ(d->gpus.count, 1);
  engine.Commit(*d, one);
  EXPECT_EQ(engine.node(2).FullyFreeGpus(), 7);
  // Node 2 now scores 29: node 1 wins.
  EXPECT_EQ(engine.Decide(one)->node, 1);
}

TEST(EngineTest, CachedScoresAreReusedUntilTheNodeChanges) {
  TablePolicy policy({1, 2, 3, 4});
  Engine engine(EightGpuNodes(4), {}, policy, 1);
  const Request one{1000, 1, 1, 1000, 0};
  auto d = engine.Decide(one);
  EXPECT_EQ(policy.calls, 4);
  engine.Decide(one);
  EXPECT_EQ(policy.calls, 4) << "nothing changed: every score came from the cache";
  engine.Commit(*d, one);
  engine.Decide(one);
  EXPECT_EQ(policy.calls, 5) << "only the changed node is scored again";
  engine.Decide(Request{2000, 1, 1, 1000, 0});
  EXPECT_EQ(policy.calls, 9) << "another request class is scored on its own";
  engine.Release(d->node, one, d->gpus);
  EXPECT_EQ(engine.node(d->node).FullyFreeGpus(), 8);
  engine.Decide(one);
  EXPECT_EQ(policy.calls, 10);
}

TEST(EngineTest, FiltersAndInfeasibleRequests) {
  TablePolicy policy({1, 2, 3, 4});
  Engine engine(EightGpuNodes(4), {}, policy, 1);
  NodeFilter only_first = [](int32_t node) { return node == 0; };
  auto d = engine.Decide(Request{1000, 1, 1, 1000, 0}, &only_first);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->node, 0);
  EXPECT_EQ(policy.calls, 0) << "a single feasible node is not scored";
  EXPECT_FALSE(engine.Decide(Request{1000, 1, 9, 1000, 0}).has_value());
  EXPECT_FALSE(engine.Decide(Request{97000, 1, 1, 1000, 0}).has_value());
}

TEST(PolicyTest, UnknownPolicyNamesTheKnownOnes) {
  auto policy = MakePolicy("fastest", PolicyContext{});
  ASSERT_FALSE(policy.has_value());
  EXPECT_NE(policy.error().message.find("best-fit"), std::string::npos);
  for (const auto& name : PolicyNames()) EXPECT_TRUE(MakePolicy(name, PolicyContext{}).has_value());
}

TEST(PolicyTest, AtriumPacksWithoutATargetWorkload) {
  auto atrium = Make("atrium");
  std::vector<NodeState> nodes = EightGpuNodes(2);
  nodes[1].gpu_free[0] = 0;  // node 1 is partly used
  Engine engine(nodes, {}, *atrium, 1);
  EXPECT_EQ(engine.Decide(Request{1000, 1, 1, 1000, 0})->node, 1);
}

}  // namespace
}  // namespace atrium::sched
