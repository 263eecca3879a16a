#include "capacity/inventory.h"

#include <gtest/gtest.h>

#include <functional>

#include "support/result_matchers.h"

namespace atrium::capacity {
namespace {

Node H100Node(std::string name, std::string pool, std::string rack) {
  Node node{.name = std::move(name),
            .pool = std::move(pool),
            .rack = std::move(rack),
            .cpu_milli = 224'000,
            .memory_mib = 2 << 20,
            .gpu_model = "H100-80GB",
            .idle_power_watts = 2400};
  for (int i = 0; i < 8; ++i) {
    node.gpus.push_back(Gpu{.index = i, .model = "H100-80GB", .memory_mib = 81559});
  }
  node.nvlink_groups = {{0, 1, 2, 3, 4, 5, 6, 7}};
  return node;
}

// Two sites in one region, a general pool and a sensitive one.
Fleet SmallFleet() {
  Fleet fleet;
  EXPECT_OK(fleet.AddSite({.name = "eu-1", .region = "eu", .power_budget_watts = 500'000}));
  EXPECT_OK(fleet.AddSite({.name = "eu-2", .region = "eu"}));
  EXPECT_OK(fleet.AddRack({.name = "r1", .site = "eu-1", .power_budget_watts = 40'000}));
  EXPECT_OK(fleet.AddRack({.name = "r2", .site = "eu-2"}));
  EXPECT_OK(fleet.AddPool(
      {.name = "general", .region = "eu", .site = "eu-1", .labels = {"batch", "interactive"}}));
  EXPECT_OK(fleet.AddPool({.name = "vault",
                           .region = "eu",
                           .site = "eu-2",
                           .labels = {"sensitive", "fine-tune"},
                           .allowed_tenants = {"tn_bank", "tn_clinic"}}));
  EXPECT_OK(fleet.AddNode(H100Node("n1", "general", "r1")));
  EXPECT_OK(fleet.AddNode(H100Node("n2", "vault", "r2")));
  return fleet;
}

TEST(InventoryTest, LookupByName) {
  Fleet fleet = SmallFleet();
  ASSERT_OK(ValidateFleet(fleet));
  EXPECT_EQ(fleet.FindSite("eu-1")->power_budget_watts, 500'000);
  EXPECT_EQ(fleet.FindRack("r2")->site, "eu-2");
  EXPECT_TRUE(fleet.FindPool("vault")->HasLabel(kLabelSensitive));
  EXPECT_EQ(fleet.FindNode("n2")->pool, "vault");
  EXPECT_EQ(fleet.FindNode("n3"), nullptr);
  EXPECT_EQ(fleet.FindPool(""), nullptr);
  EXPECT_EQ(fleet.TotalGpus(), 16);
  EXPECT_EQ(fleet.nodes()[0].name, "n1");  // insertion order

  fleet.FindMutableNode("n1")->cordoned = true;
  fleet.FindMutableNode("n1")->gpus[3].healthy = false;
  EXPECT_TRUE(fleet.FindNode("n1")->cordoned);
  EXPECT_FALSE(fleet.nodes()[0].gpus[3].healthy);
  EXPECT_EQ(fleet.FindMutableNode("nope"), nullptr);
}

TEST(InventoryTest, AddRefusesDuplicateAndEmptyNames) {
  Fleet fleet = SmallFleet();
  EXPECT_ERROR(fleet.AddSite({.name = "eu-1", .region = "eu"}), ErrorCode::kAlreadyExists);
  EXPECT_ERROR(fleet.AddRack({.name = "r1", .site = "eu-1"}), ErrorCode::kAlreadyExists);
  EXPECT_ERROR(fleet.AddPool({.name = "general"}), ErrorCode::kAlreadyExists);
  EXPECT_ERROR(fleet.AddNode(H100Node("n1", "general", "r1")), ErrorCode::kAlreadyExists);
  EXPECT_ERROR(fleet.AddNode(H100Node("", "general", "r1")), ErrorCode::kInvalidArgument);
  // A name may be reused across kinds.
  EXPECT_OK(fleet.AddRack({.name = "n1", .site = "eu-1"}));
  EXPECT_EQ(fleet.nodes().size(), 2u);
  EXPECT_EQ(fleet.sites().size(), 2u);
}

TEST(InventoryTest, PoolAdmission) {
  NodePool open{.name = "open"};
  EXPECT_TRUE(open.Admits("tn_any"));
  NodePool listed{.name = "listed", .allowed_tenants = {"tn_a", "tn_b"}};
  EXPECT_TRUE(listed.Admits("tn_b"));
  EXPECT_FALSE(listed.Admits("tn_c"));
  NodePool dedicated{.name = "mine", .dedicated_tenant = "tn_a"};
  EXPECT_TRUE(dedicated.Admits("tn_a"));
  EXPECT_FALSE(dedicated.Admits("tn_b"));
}

struct BadFleetCase {
  const char* name;
  std::function<void(Fleet&)> edit;
  const char* expected;
};

TEST(InventoryTest, ValidateFleetNamesTheProblem) {
  auto node = [](Fleet& f) { return f.FindMutableNode("n1"); };
  const BadFleetCase cases[] = {
      {"pool in a missing site",
       [](Fleet& f) { ASSERT_OK(f.AddPool({.name = "p", .region = "eu", .site = "us-1"})); },
       "pool 'p': site 'us-1' does not exist"},
      {"pool region differs from its site",
       [](Fleet& f) { ASSERT_OK(f.AddPool({.name = "p", .region = "us", .site = "eu-1"})); },
       "pool 'p' is in region 'us' but its site 'eu-1' is in region 'eu'"},
      {"site without region", [](Fleet& f) { ASSERT_OK(f.AddSite({.name = "s"})); },
       "site 's' has no region"},
      {"negative site budget",
       [](Fleet& f) {
         ASSERT_OK(f.AddSite({.name = "s", .region = "eu", .power_budget_watts = -1}));
       },
       "site 's': power budget must not be negative"},
      {"rack in a missing site",
       [](Fleet& f) { ASSERT_OK(f.AddRack({.name = "r9", .site = "x"})); },
       "rack 'r9': site 'x' does not exist"},
      {"negative rack budget",
       [](Fleet& f) {
         ASSERT_OK(f.AddRack({.name = "r9", .site = "eu-1", .power_budget_watts = -5}));
       },
       "rack 'r9': power budget must not be negative"},
      {"driver version not a version", [&](Fleet& f) { node(f)->driver_version = "550.x"; },
       "node 'n1': driver version \"550.x\": not a number"},
      {"CUDA version with a path in it", [&](Fleet& f) { node(f)->cuda_version = "../12.4"; },
       "node 'n1': CUDA version \"../12.4\": empty component"},
      {"label not a slug",
       [](Fleet& f) {
         ASSERT_OK(
             f.AddPool({.name = "p", .region = "eu", .site = "eu-1", .labels = {"Fine Tune"}}));
       },
       "pool 'p': label 'Fine Tune' is not a slug"},
      {"sensitive pool open to all",
       [](Fleet& f) {
         ASSERT_OK(
             f.AddPool({.name = "p", .region = "eu", .site = "eu-1", .labels = {"sensitive"}}));
       },
       "pool 'p' is labelled sensitive but names no dedicated or allowed tenant"},
      {"dedicated pool allowing another tenant",
       [](Fleet& f) {
         ASSERT_OK(f.AddPool({.name = "p",
                              .region = "eu",
                              .site = "eu-1",
                              .dedicated_tenant = "tn_a",
                              .allowed_tenants = {"tn_a", "tn_b"}}));
       },
       "pool 'p' is dedicated to 'tn_a' but also allows 'tn_b'"},
      {"empty dedicated tenant",
       [](Fleet& f) {
         ASSERT_OK(
             f.AddPool({.name = "p", .region = "eu", .site = "eu-1", .dedicated_tenant = ""}));
       },
       "pool 'p': dedicated tenant is empty"},
      {"empty allowed tenant",
       [](Fleet& f) {
         ASSERT_OK(
             f.AddPool({.name = "p", .region = "eu", .site = "eu-1", .allowed_tenants = {""}}));
       },
       "pool 'p': an allowed tenant is empty"},
      {"node in a missing pool", [&](Fleet& f) { node(f)->pool = "gone"; },
       "node 'n1': pool 'gone' does not exist"},
      {"node in a missing rack", [&](Fleet& f) { node(f)->rack = "gone"; },
       "node 'n1': rack 'gone' does not exist"},
      {"rack and pool in different sites", [&](Fleet& f) { node(f)->rack = "r2"; },
       "node 'n1': rack 'r2' is in site 'eu-2' but pool 'general' is in site 'eu-1'"},
      {"unknown model",
       [&](Fleet& f) {
         node(f)->gpu_model = "B200";
         for (Gpu& g : node(f)->gpus) g.model = "B200";
       },
       "node 'n1': unknown GPU model 'B200' (known: A100-40GB,"},
      {"model in the wrong case", [&](Fleet& f) { node(f)->gpu_model = "h100-80gb"; },
       "unknown GPU model 'h100-80gb'"},
      {"GPUs without a model", [&](Fleet& f) { node(f)->gpu_model = ""; },
       "node 'n1' has GPUs but no GPU model"},
      {"GPU of another model", [&](Fleet& f) { node(f)->gpus[2].model = "A100-80GB"; },
       "node 'n1' GPU 2: model A100-80GB differs from the node's H100-80GB"},
      {"GPU index out of order", [&](Fleet& f) { node(f)->gpus[5].index = 7; },
       "node 'n1' GPU 5 has index 7"},
      {"GPU without memory", [&](Fleet& f) { node(f)->gpus[1].memory_mib = 0; },
       "node 'n1' GPU 1: memory must be positive"},
      {"node without CPU", [&](Fleet& f) { node(f)->cpu_milli = 0; },
       "node 'n1': CPU and memory must be positive"},
      {"node without memory", [&](Fleet& f) { node(f)->memory_mib = -1; },
       "node 'n1': CPU and memory must be positive"},
      {"negative idle power", [&](Fleet& f) { node(f)->idle_power_watts = -1; },
       "node 'n1': idle power must not be negative"},
      {"NVLink index out of range",
       [&](Fleet& f) {
         node(f)->nvlink_groups = {{0, 8}};
       },
       "node 'n1': NVLink group names GPU 8 but the node has 8 GPUs"},
      {"negative NVLink index", [&](Fleet& f) { node(f)->nvlink_groups = {{-1}}; },
       "NVLink group names GPU -1"},
      {"GPU in two NVLink groups",
       [&](Fleet& f) {
         node(f)->nvlink_groups = {{0, 1}, {1, 2}};
       },
       "node 'n1': GPU 1 appears twice in NVLink groups"},
      {"MIG on a model without MIG",
       [&](Fleet& f) {
         Node n = H100Node("n9", "general", "r1");
         n.gpu_model = "L40S";
         for (Gpu& g : n.gpus) g.model = "L40S";
         n.gpus[0].mig_enabled = true;
         ASSERT_OK(f.AddNode(std::move(n)));
       },
       "node 'n9' GPU 0: MIG is enabled but L40S does not support MIG"},
  };
  for (const BadFleetCase& c : cases) {
    SCOPED_TRACE(c.name);
    Fleet fleet = SmallFleet();
    c.edit(fleet);
    Status s = ValidateFleet(fleet);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message.find(c.expected), std::string::npos) << s.error().message;
  }
}

TEST(InventoryTest, ValidFleetVariants) {
  Fleet fleet = SmallFleet();
  // MIG on a MIG-capable model, a CPU-only node, a dedicated sensitive pool.
  fleet.FindMutableNode("n1")->gpus[0].mig_enabled = true;
  ASSERT_OK(fleet.AddNode({.name = "cpu-1",
                           .pool = "general",
                           .rack = "r1",
                           .cpu_milli = 64'000,
                           .memory_mib = 256 * 1024}));
  ASSERT_OK(fleet.AddPool({.name = "own",
                           .region = "eu",
                           .site = "eu-1",
                           .labels = {"sensitive"},
                           .dedicated_tenant = "tn_a",
                           .allowed_tenants = {"tn_a"}}));
  EXPECT_OK(ValidateFleet(fleet));
  EXPECT_OK(ValidateFleet(Fleet()));
}

}  // namespace
}  // namespace atrium::capacity
