// The pure mapping from NVML's names and signals to the catalog, the node
// record and a health verdict.
#include "nvml/node_mapping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capacity/inventory.h"
#include "support/result_matchers.h"

namespace atrium::nvml {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct NameCase {
  const char* nvml_name;
  int64_t memory_mib;  // as the board reports it
  const char* model;
};

TEST(CatalogModelForTest, MapsTheNamesNvmlGivesToCatalogModels) {
  const NameCase cases[] = {
      {"NVIDIA H100 80GB HBM3", 81559, "H100-80GB"},
      {"NVIDIA H100 PCIe", 81559, "H100-80GB"},
      {"NVIDIA H200", 143771, "H200-141GB"},
      {"NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"},
      {"NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"},
      {"NVIDIA A100 80GB PCIe", 81920, "A100-80GB"},
      {"NVIDIA A10", 23028, "A10"},
      {"NVIDIA L4", 23034, "L4"},
      {"NVIDIA L40S", 46068, "L40S"},
      {"Tesla T4", 15360, "T4"},
      {"Tesla V100-SXM2-16GB", 16160, "V100-16GB"},
      {"Tesla V100-SXM2-32GB", 32768, "V100-32GB"},
  };
  for (const NameCase& c : cases) {
    auto model = CatalogModelFor(c.nvml_name, c.memory_mib);
    ASSERT_TRUE(model.has_value()) << c.nvml_name << ": " << model.error().message;
    EXPECT_EQ((*model)->name, c.model) << c.nvml_name;
  }
}

TEST(CatalogModelForTest, RefusesAModelAtriumDoesNotKnowNamingIt) {
  const NameCase unknown[] = {
      {"NVIDIA H100 NVL", 95830, ""},     // H100 family, but 94 GB
      {"NVIDIA L40", 46068, ""},          // no L40 in the catalog (L40S is another word)
      {"NVIDIA GH200 480GB", 97871, ""},  // GH200 is not H200
      {"NVIDIA B200", 183359, ""},
      {"NVIDIA H100 80GB HBM3", 0, ""},  // nonsense memory
      {"NVIDIA H100 80GB HBM3", INT64_MAX, ""},
  };
  for (const NameCase& c : unknown) {
    auto model = CatalogModelFor(c.nvml_name, c.memory_mib);
    ASSERT_FALSE(model.has_value()) << c.nvml_name << " mapped to " << (*model)->name;
    EXPECT_EQ(model.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(model.error().message, HasSubstr(c.nvml_name));
  }
  EXPECT_THAT(CatalogModelFor("NVIDIA L40", 46068).error().message, HasSubstr("known: "));
}

DiscoveredGpu HealthyH100() {
  DiscoveredGpu g;
  g.name = "NVIDIA H100 80GB HBM3";
  g.uuid = "GPU-1";
  g.memory_mib = 81559;
  g.mig_enabled = false;
  g.health.ecc_uncorrected_volatile = 0;
  g.health.retired_pages_pending = false;
  g.health.remapped_rows_pending = false;
  g.health.remapped_rows_failed = false;
  g.health.temperature_c = 40;
  g.health.slowdown_temperature_c = 87;
  g.health.power_mw = 650'000;
  g.health.power_limit_mw = 700'000;
  return g;
}

TEST(JudgeGpuHealthTest, AHealthyGpuHasNoReasons) {
  EXPECT_EQ(JudgeGpuHealth(HealthyH100()), (GpuVerdict{.healthy = true, .reasons = {}}));
  // A GPU that reports nothing has nothing against it.
  EXPECT_TRUE(JudgeGpuHealth(DiscoveredGpu{}).healthy);
}

TEST(JudgeGpuHealthTest, EachBadSignalIsAReason) {
  struct Case {
    const char* what;
    void (*apply)(GpuHealthSignals&);
    const char* reason;
  };
  const Case cases[] = {
      {"ecc", [](GpuHealthSignals& h) { h.ecc_uncorrected_volatile = 1; },
       "1 uncorrectable ECC errors since the driver loaded"},
      {"retired pages", [](GpuHealthSignals& h) { h.retired_pages_pending = true; },
       "memory pages are pending retirement (a GPU reset retires them)"},
      {"remap pending", [](GpuHealthSignals& h) { h.remapped_rows_pending = true; },
       "memory rows are pending remapping (a GPU reset remaps them)"},
      {"remap failed", [](GpuHealthSignals& h) { h.remapped_rows_failed = true; },
       "a memory row remapping failed"},
      {"hot", [](GpuHealthSignals& h) { h.temperature_c = 87; },
       "at 87 °C, at or above its slowdown threshold 87 °C"},
      {"hot, no threshold",
       [](GpuHealthSignals& h) {
         h.temperature_c = 85;
         h.slowdown_temperature_c.reset();
       },
       "at 85 °C, at or above the limit 85 °C"},
      {"power", [](GpuHealthSignals& h) { h.power_mw = 771'000; },
       "drawing 771 W, beyond its 700 W limit"},
      {"xid", [](GpuHealthSignals& h) { h.xid_errors = {48}; }, "critical XID 48 reported"},
  };
  for (const Case& c : cases) {
    DiscoveredGpu g = HealthyH100();
    c.apply(g.health);
    GpuVerdict v = JudgeGpuHealth(g);
    EXPECT_FALSE(v.healthy) << c.what;
    EXPECT_THAT(v.reasons, ElementsAre(c.reason)) << c.what;
  }
}

TEST(JudgeGpuHealthTest, JustBelowTheLimitsIsHealthy) {
  DiscoveredGpu g = HealthyH100();
  g.health.temperature_c = 86;
  g.health.power_mw = 770'000;  // exactly 110% of 700 W
  EXPECT_TRUE(JudgeGpuHealth(g).healthy);
  g.health.slowdown_temperature_c.reset();
  g.health.temperature_c = 84;
  EXPECT_TRUE(JudgeGpuHealth(g).healthy);
  EXPECT_FALSE(JudgeGpuHealth(g, {.fallback_max_temperature_c = 80}).healthy);
}

const NodeShape kShape{.name = "gpu-host-1", .cpu_milli = 224'000, .memory_mib = 2'097'152};

TEST(MapHostToNodeTest, BuildsANodeTheFleetAccepts) {
  DiscoveredHost host;
  for (unsigned int i = 0; i < 4; ++i) {
    DiscoveredGpu g = HealthyH100();
    g.index = i;
    host.gpus.push_back(g);
  }
  host.gpus[2].mig_enabled = true;
  host.gpus[2].mig_instances = {{.id = 1, .profile_id = 0, .start = 0, .size = 8}};
  host.gpus[3].health.ecc_uncorrected_volatile = 5;
  host.nvlink_groups = {{0, 1, 2, 3}};
  auto mapped = MapHostToNode(host, kShape);
  ASSERT_OK(mapped);
  const FleetNodeRecord& node = mapped->node;
  EXPECT_EQ(node.name, "gpu-host-1");
  EXPECT_EQ(node.gpu_model, "H100-80GB");
  EXPECT_EQ(node.cpu_milli, 224'000);
  EXPECT_EQ(node.memory_mib, 2'097'152);
  ASSERT_EQ(node.gpus.size(), 4u);
  EXPECT_EQ(node.gpus[1].index, 1);
  EXPECT_EQ(node.gpus[1].memory_mib, 81559);
  EXPECT_TRUE(node.gpus[2].mig_enabled);
  EXPECT_FALSE(node.gpus[3].healthy);
  EXPECT_THAT(mapped->gpus[2].mig_instances, ElementsAre("7g.80gb@0"));
  EXPECT_THAT(node.nvlink_groups, ElementsAre(ElementsAre(0, 1, 2, 3)));

  // The one-node fleet is valid as the scheduler checks fleets.
  FleetRecord record = FleetRecordForNode(node);
  EXPECT_EQ(record.spec, "nvml:gpu-host-1");
  capacity::Fleet fleet;
  for (const auto& s : record.sites) ASSERT_OK(fleet.AddSite({.name = s.name, .region = s.region}));
  for (const auto& r : record.racks) ASSERT_OK(fleet.AddRack({.name = r.name, .site = r.site}));
  for (const auto& p : record.pools) {
    capacity::NodePool pool{.name = p.name, .region = p.region, .site = p.site};
    pool.labels.insert(p.labels.begin(), p.labels.end());
    ASSERT_OK(fleet.AddPool(std::move(pool)));
  }
  capacity::Node n{.name = node.name,
                   .pool = node.pool,
                   .rack = node.rack,
                   .cpu_milli = node.cpu_milli,
                   .memory_mib = node.memory_mib,
                   .gpu_model = node.gpu_model,
                   .nvlink_groups = node.nvlink_groups};
  for (const auto& g : node.gpus) {
    n.gpus.push_back({.index = static_cast<int>(g.index),
                      .model = g.model,
                      .memory_mib = g.memory_mib,
                      .mig_enabled = g.mig_enabled,
                      .healthy = g.healthy});
  }
  ASSERT_OK(fleet.AddNode(std::move(n)));
  EXPECT_OK(capacity::ValidateFleet(fleet));
}

TEST(MapHostToNodeTest, AnUnknownModelIsRefused) {
  DiscoveredHost host;
  DiscoveredGpu g = HealthyH100();
  g.name = "NVIDIA B200";
  g.memory_mib = 183'359;
  host.gpus.push_back(g);
  auto mapped = MapHostToNode(host, kShape);
  ASSERT_FALSE(mapped.has_value());
  EXPECT_THAT(mapped.error().message, HasSubstr("'NVIDIA B200'"));
}

TEST(MapHostToNodeTest, RefusesWhatIsNotOneNodeOfOneModel) {
  DiscoveredHost none;
  EXPECT_ERROR(MapHostToNode(none, kShape), ErrorCode::kInvalidArgument);

  DiscoveredHost mixed;
  mixed.gpus.push_back(HealthyH100());
  DiscoveredGpu l4;
  l4.index = 1;
  l4.name = "NVIDIA L4";
  l4.memory_mib = 23034;
  mixed.gpus.push_back(l4);
  auto refused = MapHostToNode(mixed, kShape);
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message, HasSubstr("two models"));

  DiscoveredHost t4;
  DiscoveredGpu g;
  g.name = "Tesla T4";
  g.memory_mib = 15360;
  g.mig_enabled = true;
  t4.gpus.push_back(g);
  EXPECT_ERROR(MapHostToNode(t4, kShape), ErrorCode::kInvalidArgument);

  DiscoveredHost one;
  one.gpus.push_back(HealthyH100());
  EXPECT_ERROR(MapHostToNode(one, {.name = "", .cpu_milli = 1, .memory_mib = 1}),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(MapHostToNode(one, {.name = "n", .cpu_milli = 0, .memory_mib = 1}),
               ErrorCode::kInvalidArgument);
}

TEST(MapHostToNodeTest, AnInstanceOfAProfileTheCatalogLacksKeepsItsId) {
  DiscoveredHost host;
  DiscoveredGpu g = HealthyH100();
  g.mig_enabled = true;
  g.mig_instances = {{.id = 1, .profile_id = 47, .start = 0, .size = 1}};
  host.gpus.push_back(g);
  auto mapped = MapHostToNode(host, kShape);
  ASSERT_OK(mapped);
  EXPECT_THAT(mapped->gpus[0].mig_instances, ElementsAre("profile-47@0"));
}

}  // namespace
}  // namespace atrium::nvml
