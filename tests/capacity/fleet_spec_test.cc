#include "capacity/fleet_spec.h"

#include <gtest/gtest.h>

#include "support/result_matchers.h"

namespace atrium::capacity {
namespace {

TEST(FleetSpecTest, DefaultDevFleet) {
  auto fleet = ParseFleetSpec(kDefaultDevFleetSpec);
  ASSERT_OK(fleet);
  ASSERT_OK(ValidateFleet(*fleet));

  ASSERT_EQ(fleet->sites().size(), 1u);
  EXPECT_EQ(fleet->sites()[0].name, "local-1");
  EXPECT_EQ(fleet->sites()[0].region, "local");
  EXPECT_EQ(fleet->sites()[0].power_budget_watts, 0);
  ASSERT_EQ(fleet->pools().size(), 1u);
  const NodePool& pool = fleet->pools()[0];
  EXPECT_EQ(pool.name, "default");
  EXPECT_EQ(pool.region, "local");
  EXPECT_EQ(pool.site, "local-1");
  EXPECT_EQ(pool.labels, (std::set<std::string, std::less<>>{"batch", "interactive"}));
  EXPECT_TRUE(pool.Admits("tn_anyone"));

  std::vector<std::string> names;
  for (const Node& n : fleet->nodes()) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"h100-80gb-0", "h100-80gb-1", "a100-80gb-0", "l40s-0",
                                             "l40s-1"}));
  EXPECT_EQ(fleet->TotalGpus(), 8 + 8 + 8 + 4 + 4);

  // One rack per 4 nodes, without a power budget.
  ASSERT_EQ(fleet->racks().size(), 2u);
  EXPECT_EQ(fleet->racks()[1].name, "rack-1");
  EXPECT_EQ(fleet->racks()[1].power_budget_watts, 0);
  EXPECT_EQ(fleet->FindNode("l40s-0")->rack, "rack-0");
  EXPECT_EQ(fleet->FindNode("l40s-1")->rack, "rack-1");

  const Node& h100 = *fleet->FindNode("h100-80gb-1");
  EXPECT_EQ(h100.pool, "default");
  EXPECT_EQ(h100.gpu_model, "H100-80GB");
  EXPECT_EQ(h100.cpu_milli, 224'000);
  EXPECT_EQ(h100.memory_mib, int64_t{2} << 20);  // 2 TiB
  EXPECT_EQ(h100.idle_power_watts, 8 * 300);
  EXPECT_FALSE(h100.cordoned);
  EXPECT_FALSE(h100.draining);
  ASSERT_EQ(h100.gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const Gpu& gpu = h100.gpus[i];
    EXPECT_EQ(gpu.index, i);
    EXPECT_EQ(gpu.model, "H100-80GB");
    EXPECT_EQ(gpu.memory_mib, 80 * 1024);
    EXPECT_FALSE(gpu.mig_enabled);
    EXPECT_TRUE(gpu.healthy);
    EXPECT_FALSE(gpu.cordoned);
  }
  EXPECT_EQ(h100.nvlink_groups, (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));

  const Node& l40s = *fleet->FindNode("l40s-0");
  EXPECT_EQ(l40s.cpu_milli, 96'000);        // half of 192 vCPU
  EXPECT_EQ(l40s.memory_mib, 768 * 1024);   // half of 1.5 TiB
  EXPECT_TRUE(l40s.nvlink_groups.empty());  // PCIe cards
}

TEST(FleetSpecTest, SameSpecSameFleet) {
  auto a = ParseFleetSpec("3xT4x1,2xH200-141GBx8");
  auto b = ParseFleetSpec("3xT4x1,2xH200-141GBx8");
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_EQ(a->nodes().size(), b->nodes().size());
  for (size_t i = 0; i < a->nodes().size(); ++i) {
    EXPECT_EQ(a->nodes()[i].name, b->nodes()[i].name);
    EXPECT_EQ(a->nodes()[i].rack, b->nodes()[i].rack);
  }
}

TEST(FleetSpecTest, NamesCountPerModelAcrossItems) {
  auto fleet = ParseFleetSpec("1xH100-80GBx8, 2xL4x2 ,1xh100-80gbx4");
  ASSERT_OK(fleet);
  std::vector<std::string> names;
  for (const Node& n : fleet->nodes()) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"h100-80gb-0", "l4-0", "l4-1", "h100-80gb-1"}));
  EXPECT_EQ(fleet->FindNode("h100-80gb-1")->gpus.size(), 4u);
  EXPECT_EQ(fleet->FindNode("h100-80gb-1")->gpu_model, "H100-80GB");  // canonical spelling
  EXPECT_EQ(fleet->FindNode("h100-80gb-1")->cpu_milli, 112'000);
}

TEST(FleetSpecTest, EveryModelHasANodeShape) {
  for (const GpuModel& model : AllGpuModels()) {
    SCOPED_TRACE(model.name);
    auto shape = SimulatedShapeFor(model, 8);
    ASSERT_TRUE(shape.has_value());
    EXPECT_GT(shape->cpu_milli, 0);
    EXPECT_GT(shape->memory_mib, 0);
    EXPECT_GT(shape->idle_power_watts, 0);
    // A one-GPU node still gets whole vCPUs.
    EXPECT_EQ(SimulatedShapeFor(model, 1)->cpu_milli % 1000, 0);
    auto fleet = ParseFleetSpec("1x" + model.name + "x1");
    ASSERT_OK(fleet);
    EXPECT_TRUE(fleet->nodes()[0].nvlink_groups.empty());  // one GPU: nothing to link
  }
  EXPECT_EQ(SimulatedShapeFor(*FindGpuModel("A100-40GB"), 8)->memory_mib, 1024 * 1024);
  EXPECT_EQ(SimulatedShapeFor(*FindGpuModel("T4"), 4)->cpu_milli, 48'000);
  EXPECT_EQ(SimulatedShapeFor(*FindGpuModel("H200-141GB"), 16)->cpu_milli, 448'000);
}

TEST(FleetSpecTest, RacksHoldFourNodes) {
  auto fleet = ParseFleetSpec("9xA10x1");
  ASSERT_OK(fleet);
  ASSERT_EQ(fleet->racks().size(), 3u);
  EXPECT_EQ(fleet->FindNode("a10-3")->rack, "rack-0");
  EXPECT_EQ(fleet->FindNode("a10-4")->rack, "rack-1");
  EXPECT_EQ(fleet->FindNode("a10-8")->rack, "rack-2");
}

TEST(FleetSpecTest, Limits) {
  EXPECT_OK(ParseFleetSpec("1xT4x16"));
  EXPECT_OK(ParseFleetSpec("10000xT4x1"));
  auto many = ParseFleetSpec("10000xT4x1,10000xL4x1");
  ASSERT_OK(many);
  EXPECT_EQ(many->nodes().size(), 20'000u);
  EXPECT_EQ(many->nodes().back().name, "l4-9999");
}

struct BadSpecCase {
  std::string spec;
  std::string expected;
};

TEST(FleetSpecTest, ErrorsNameTheBadItem) {
  std::string too_many_items;
  for (int i = 0; i <= kMaxFleetSpecItems; ++i) too_many_items += i ? ",1xT4x1" : "1xT4x1";
  std::string too_many_nodes;
  for (int i = 0; i < 11; ++i) too_many_nodes += i ? ",10000xT4x1" : "10000xT4x1";
  const BadSpecCase cases[] = {
      {"", "fleet spec is empty; expected items like 2xH100-80GBx8"},
      {"   ", "fleet spec is empty"},
      {",", "fleet spec item 1 is empty"},
      {"1xT4x1,", "fleet spec item 2 is empty"},
      {"1xT4x1,,1xT4x1", "fleet spec item 2 is empty"},
      {"2xH100-80GB", "fleet spec item '2xH100-80GB' is malformed; expected COUNTxMODELxGPUS"},
      {"H100-80GBx8", "'H100-80GBx8' is malformed"},
      {"2x8", "'2x8' is malformed"},
      {"2xx8", "'2xx8' is malformed"},
      {"2 x H100-80GB x 8", "'2 x H100-80GB x 8' is malformed"},
      {"-1xT4x1", "'-1xT4x1' is malformed"},
      {"1xT4x-1", "'1xT4x-1' is malformed"},
      {"2*H100-80GB*8", "is malformed"},
      {"1xT4x1;1xT4x1", "unknown GPU model 'T4x1;1xT4'"},
      {"2xB200x8",
       "fleet spec item '2xB200x8': unknown GPU model 'B200' (known: A100-40GB, A100-80GB, "
       "H100-80GB, H200-141GB, A10, L4, L40S, T4, V100-16GB, V100-32GB)"},
      {"1xH100x8", "unknown GPU model 'H100'"},
      {"0xH100-80GBx8", "fleet spec item '0xH100-80GBx8': node count must be at least 1"},
      {"1xH100-80GBx0", "fleet spec item '1xH100-80GBx0': GPUs per node must be at least 1"},
      {"1xH100-80GBx17", "'1xH100-80GBx17': at most 16 GPUs per node"},
      {"10001xT4x1", "'10001xT4x1': at most 10000 nodes per item"},
      {"99999999999999999999xT4x1", "at most 10000 nodes per item"},
      {"1xT4x99999999999999999999", "at most 16 GPUs per node"},
      {"1xT4x1,1xT4x1,1xNOPEx1", "fleet spec item '1xNOPEx1'"},
      {too_many_items, "fleet spec has 65 items; at most 64"},
      {too_many_nodes, "fleet spec asks for 110000 nodes; at most 100000"},
      {std::string(5000, '1'), "longer than 4096 characters"},
  };
  for (const BadSpecCase& c : cases) {
    SCOPED_TRACE(c.spec.substr(0, 80));
    auto fleet = ParseFleetSpec(c.spec);
    ASSERT_FALSE(fleet.has_value());
    EXPECT_EQ(fleet.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(fleet.error().message.find(c.expected), std::string::npos) << fleet.error().message;
  }
}

}  // namespace
}  // namespace atrium::capacity
