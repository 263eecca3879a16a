// Which fleet a control plane starts on ([fleet] discover), against the fake
// NVML built in tests/nvml: the host's node under auto and nvml, the
// simulated fleet where NVML cannot give one (auto), a clear refusal where
// it must (nvml), and the real Platform running on the discovered node.
#include "runtime/fleet_discovery.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>

#include "common/clock.h"
#include "nvml/fake_nvml_config.h"
#include "runtime/gpu_health_watcher.h"
#include "runtime/platform.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"

namespace atrium {
namespace {

class FleetDiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDirectory("fleet-discovery");
    testing::UseFakeNvmlConfig(dir_, testing::TwoH100HostOneInMig());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Config WithFake(const std::string& mode) {
    Config c;
    c.fleet_discover = mode;
    c.fleet_nvml_library = FAKE_NVML_LIBRARY;
    c.fleet_node_name = "gpu-host-1";
    return c;
  }
  void Host(const nlohmann::json& config) { testing::UseFakeNvmlConfig(dir_, config); }

  std::filesystem::path dir_;
};

TEST_F(FleetDiscoveryTest, AutoRunsOnThisHostsGpusWhenNvmlHasThem) {
  auto d = DiscoverFleet(WithFake("auto"));
  ASSERT_TRUE(d.has_value()) << d.error().message;
  ASSERT_TRUE(d->fleet.has_value()) << d->summary;
  EXPECT_EQ(d->fleet->spec, "nvml:gpu-host-1");
  ASSERT_EQ(d->fleet->nodes.size(), 1u);
  const FleetNodeRecord& node = d->fleet->nodes[0];
  EXPECT_EQ(node.name, "gpu-host-1");
  EXPECT_EQ(node.gpu_model, "H100-80GB");
  ASSERT_EQ(node.gpus.size(), 2u);
  EXPECT_TRUE(node.gpus[1].mig_enabled);
  EXPECT_GT(node.cpu_milli, 0);
  EXPECT_GT(node.memory_mib, 0);
  ASSERT_TRUE(d->host.has_value());
  EXPECT_EQ(d->host->driver_version, "550.54.15");
  EXPECT_EQ(d->host->cuda_driver_version, "12.4");
  EXPECT_NE(d->library, nullptr);
  EXPECT_NE(d->summary.find("2 x H100-80GB"), std::string::npos) << d->summary;
}

TEST_F(FleetDiscoveryTest, WithoutANodeNameTheNodeIsNamedAfterTheHost) {
  Config c = WithFake("nvml");
  c.fleet_node_name = "";
  char name[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  if (!ValidateNodeName(name).has_value()) GTEST_SKIP() << "this host's name is no node name";
  auto d = DiscoverFleet(c);
  ASSERT_TRUE(d.has_value()) << d.error().message;
  ASSERT_TRUE(d->fleet.has_value());
  EXPECT_EQ(d->fleet->nodes[0].name, name);
}

TEST_F(FleetDiscoveryTest, AutoWithoutTheLibraryUsesTheSimulatedFleetAndSaysWhy) {
  Config c = WithFake("auto");
  c.fleet_nvml_library = (dir_ / "no-such-libnvidia-ml.so.1").string();
  auto d = DiscoverFleet(c);
  ASSERT_TRUE(d.has_value()) << d.error().message;
  EXPECT_FALSE(d->fleet.has_value());
  EXPECT_EQ(d->library, nullptr);
  EXPECT_NE(d->summary.find("NVML is not available"), std::string::npos) << d->summary;
}

TEST_F(FleetDiscoveryTest, NvmlRequiredWithoutTheLibraryRefusesToStartNamingIt) {
  Config c = WithFake("nvml");
  c.fleet_nvml_library = (dir_ / "no-such-libnvidia-ml.so.1").string();
  auto d = DiscoverFleet(c);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(d.error().message.find("no-such-libnvidia-ml.so.1"), std::string::npos)
      << d.error().message;
  EXPECT_NE(d.error().message.find("[fleet] discover = \"nvml\""), std::string::npos);
}

TEST_F(FleetDiscoveryTest, WhatNvmlCannotGiveIsSimulatedUnderAutoAndAnErrorUnderNvml) {
  nlohmann::json driver_down = testing::TwoH100HostOneInMig();
  driver_down["init_error"] = 9;
  nlohmann::json no_gpu = testing::TwoH100HostOneInMig();
  no_gpu["devices"] = nlohmann::json::array();
  nlohmann::json unknown = testing::TwoH100HostOneInMig();
  unknown["devices"][0]["name"] = "NVIDIA B200";
  unknown["devices"][0]["memory_total_bytes"] = 183359ULL << 20;
  const std::pair<nlohmann::json, std::string> cases[] = {
      {driver_down, "Driver Not Loaded"},
      {no_gpu, "no GPU"},
      {unknown, "NVIDIA B200"},
  };
  for (const auto& [host, words] : cases) {
    Host(host);
    auto simulated = DiscoverFleet(WithFake("auto"));
    ASSERT_TRUE(simulated.has_value()) << simulated.error().message;
    EXPECT_FALSE(simulated->fleet.has_value()) << words;
    EXPECT_NE(simulated->summary.find(words), std::string::npos) << simulated->summary;
    auto refused = DiscoverFleet(WithFake("nvml"));
    ASSERT_FALSE(refused.has_value()) << words;
    EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(refused.error().message.find(words), std::string::npos) << refused.error().message;
  }
}

TEST_F(FleetDiscoveryTest, OffAndAnExplicitSpecKeepTheSimulatedFleet) {
  auto off = DiscoverFleet(WithFake("off"));
  ASSERT_TRUE(off.has_value()) << off.error().message;
  EXPECT_FALSE(off->fleet.has_value());
  Config spec = WithFake("auto");
  spec.scheduler_fleet = "1xL4x2";
  auto kept = DiscoverFleet(spec);
  ASSERT_TRUE(kept.has_value()) << kept.error().message;
  EXPECT_FALSE(kept->fleet.has_value());
  // "nvml" is the operator asking for the host: it wins over the spec.
  spec.fleet_discover = "nvml";
  auto host = DiscoverFleet(spec);
  ASSERT_TRUE(host.has_value()) << host.error().message;
  EXPECT_TRUE(host->fleet.has_value());
}

TEST_F(FleetDiscoveryTest, APlatformUnderAutoRunsOnTheDiscoveredNode) {
  Config c = WithFake("auto");
  c.store_url = "sqlite://" + (dir_ / "atrium.db").string();
  c.signing_key_file = (dir_ / "signing.key").string();
  c.api_listen = "127.0.0.1:0";
  c.scheduler_tick_ms = 60'000;
  {
    Platform platform(c);
    auto urls = platform.Start();
    ASSERT_TRUE(urls.has_value()) << urls.error().message;
    ASSERT_TRUE(platform.fleet_discovery().fleet.has_value());
    auto stored = platform.store().LoadFleet();
    ASSERT_TRUE(stored.has_value() && stored->has_value());
    EXPECT_EQ((*stored)->spec, "nvml:gpu-host-1");
    ASSERT_EQ((*stored)->nodes.size(), 1u);
    EXPECT_EQ((*stored)->nodes[0].gpu_model, "H100-80GB");
    platform.Stop();
  }
  // "nvml" on a host without the library does not start.
  c.fleet_discover = "nvml";
  c.fleet_nvml_library = (dir_ / "no-such-libnvidia-ml.so.1").string();
  Platform refused(c);
  auto urls = refused.Start();
  ASSERT_FALSE(urls.has_value());
  EXPECT_EQ(urls.error().code, ErrorCode::kFailedPrecondition);
  refused.Stop();
}

TEST_F(FleetDiscoveryTest, AGpuThatTurnsUnhealthyIsTakenOutOfPlacementOnce) {
  auto store = Store::Open("sqlite://" + (dir_ / "watch.db").string(), 1);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  auto d = DiscoverFleet(WithFake("auto"));
  ASSERT_TRUE(d.has_value() && d->fleet.has_value());
  ManualClock clock;
  scheduling::SchedulingOptions o;
  o.fleet = d->fleet;
  o.tick_ms = 0;
  scheduling::SchedulingService scheduling(**store, clock, o);
  ASSERT_TRUE(scheduling.Start().has_value());
  GpuHealthWatcher watcher(*d->library, scheduling, "gpu-host-1", {}, 0);
  auto quiet = watcher.CheckOnce();
  ASSERT_TRUE(quiet.has_value()) << quiet.error().message;
  EXPECT_TRUE(quiet->empty());

  nlohmann::json hot = testing::TwoH100HostOneInMig();
  hot["devices"][0]["temperature_c"] = 95;
  Host(hot);
  auto marked = watcher.CheckOnce();
  ASSERT_TRUE(marked.has_value()) << marked.error().message;
  EXPECT_EQ(*marked, std::vector<int>{0});
  auto node = scheduling.Node("", "gpu-host-1");
  ASSERT_TRUE(node.has_value());
  EXPECT_FALSE(node->gpus[0].healthy);
  EXPECT_TRUE(node->gpus[1].healthy);
  // Still hot: not marked again. Cool again: still unhealthy until an
  // operator says otherwise.
  auto again = watcher.CheckOnce();
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->empty());
  Host(testing::TwoH100HostOneInMig());
  ASSERT_TRUE(watcher.CheckOnce().has_value());
  EXPECT_FALSE(scheduling.Node("", "gpu-host-1")->gpus[0].healthy);
  scheduling.Stop();
}

}  // namespace
}  // namespace atrium
