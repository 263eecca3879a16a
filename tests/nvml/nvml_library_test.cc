// The NVML loader against the fake library built from NVIDIA's reference
// (fake_nvml.cc): discovery, MIG instances, health signals, and every way
// loading can fail or degrade.
#include "nvml/nvml_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nvml/fake_nvml_config.h"
#include "nvml/node_mapping.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"

namespace atrium::nvml {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class NvmlLibraryTest : public ::testing::Test {
 protected:
  void Use(const nlohmann::json& config) {
    testing::UseFakeNvmlConfig(TestDirectory("nvml-library"), config);
  }
  DiscoveredHost DiscoverWith(const char* library) {
    auto nvml = NvmlLibrary::Open(library);
    EXPECT_TRUE(nvml.has_value()) << nvml.error().message;
    if (!nvml) return {};
    auto host = (*nvml)->Discover();
    EXPECT_TRUE(host.has_value()) << host.error().message;
    return host.has_value() ? *host : DiscoveredHost{};
  }
};

TEST_F(NvmlLibraryTest, DiscoversTwoH100sWithOneInMigModeAndItsInstances) {
  Use(testing::TwoH100HostOneInMig());
  DiscoveredHost host = DiscoverWith(FAKE_NVML_LIBRARY);
  EXPECT_EQ(host.driver_version, "550.54.15");
  EXPECT_EQ(host.cuda_driver_version, "12.4");
  EXPECT_THAT(host.missing_symbols, IsEmpty());
  ASSERT_EQ(host.gpus.size(), 2u);
  for (const DiscoveredGpu& g : host.gpus) {
    EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.memory_mib, 81559);
    EXPECT_THAT(g.unavailable, IsEmpty());
    EXPECT_EQ(g.health.temperature_c, 34u);
    EXPECT_EQ(g.health.slowdown_temperature_c, 87u);
    EXPECT_EQ(g.health.power_limit_mw, 700000u);
    EXPECT_EQ(g.health.ecc_uncorrected_volatile, 0u);
    EXPECT_EQ(g.health.remapped_rows_pending, false);
  }
  EXPECT_EQ(host.gpus[0].uuid, "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(host.gpus[1].uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(host.gpus[0].mig_enabled, false);
  EXPECT_THAT(host.gpus[0].mig_instances, IsEmpty());
  EXPECT_EQ(host.gpus[1].mig_enabled, true);
  // In placement order, whatever order the driver lists profiles in.
  ASSERT_EQ(host.gpus[1].mig_instances.size(), 3u);
  EXPECT_EQ(host.gpus[1].mig_instances[0].profile_id, 9u);
  EXPECT_EQ(host.gpus[1].mig_instances[0].start, 0u);
  EXPECT_EQ(host.gpus[1].mig_instances[0].size, 4u);
  EXPECT_EQ(host.gpus[1].mig_instances[1].profile_id, 14u);
  EXPECT_EQ(host.gpus[1].mig_instances[1].start, 4u);
  EXPECT_EQ(host.gpus[1].mig_instances[2].profile_id, 19u);
  EXPECT_EQ(host.gpus[1].mig_instances[2].start, 6u);
  EXPECT_THAT(host.nvlink_groups, ElementsAre(ElementsAre(0, 1)));

  auto node =
      MapHostToNode(host, {.name = "gpu-host-1", .cpu_milli = 64'000, .memory_mib = 512 * 1024});
  ASSERT_OK(node);
  EXPECT_EQ(node->node.gpu_model, "H100-80GB");
  ASSERT_EQ(node->node.gpus.size(), 2u);
  EXPECT_FALSE(node->node.gpus[0].mig_enabled);
  EXPECT_TRUE(node->node.gpus[1].mig_enabled);
  EXPECT_TRUE(node->node.gpus[0].healthy && node->node.gpus[1].healthy);
  EXPECT_THAT(node->gpus[1].mig_instances, ElementsAre("3g.40gb@0", "2g.20gb@4", "1g.10gb@6"));
}

TEST_F(NvmlLibraryTest, AFailingInitIsAClearErrorInNvmlsWords) {
  nlohmann::json config = testing::TwoH100HostOneInMig();
  config["init_error"] = 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  Use(config);
  auto nvml = NvmlLibrary::Open(FAKE_NVML_LIBRARY);
  ASSERT_FALSE(nvml.has_value());
  EXPECT_EQ(nvml.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(nvml.error().message,
              HasSubstr("nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)"));
}

TEST_F(NvmlLibraryTest, NoPermissionIsPermissionDenied) {
  nlohmann::json config = testing::TwoH100HostOneInMig();
  config["init_error"] = 4;  // NVML_ERROR_NO_PERMISSION
  Use(config);
  EXPECT_ERROR(NvmlLibrary::Open(FAKE_NVML_LIBRARY), ErrorCode::kPermissionDenied);
}

TEST_F(NvmlLibraryTest, ALibraryThatIsNotThereIsNotFoundNamingThePath) {
  auto nvml = NvmlLibrary::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.has_value());
  EXPECT_EQ(nvml.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(nvml.error().message, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
}

TEST_F(NvmlLibraryTest, ALibraryWithoutARequiredSymbolIsRefusedNamingIt) {
  Use(testing::TwoH100HostOneInMig());
  auto nvml = NvmlLibrary::Open(FAKE_NVML_NO_COUNT_V2_LIBRARY);
  ASSERT_FALSE(nvml.has_value());
  EXPECT_EQ(nvml.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(nvml.error().message, HasSubstr("nvmlDeviceGetCount_v2"));
}

TEST_F(NvmlLibraryTest, AnOlderDriverWithoutOptionalSymbolsStillDiscoversAndSaysWhatIsMissing) {
  Use(testing::TwoH100HostOneInMig());
  DiscoveredHost host = DiscoverWith(FAKE_NVML_OLD_DRIVER_LIBRARY);
  EXPECT_THAT(host.missing_symbols,
              ::testing::IsSupersetOf({"nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetMigMode",
                                       "nvmlDeviceGetRemappedRows", "nvmlEventSetWait_v2"}));
  EXPECT_EQ(host.cuda_driver_version, "");
  EXPECT_THAT(host.unavailable, ::testing::Contains(HasSubstr("XID events")));
  ASSERT_EQ(host.gpus.size(), 2u);
  EXPECT_EQ(host.gpus[1].mig_enabled, std::nullopt);
  EXPECT_THAT(host.gpus[1].mig_instances, IsEmpty());
  EXPECT_EQ(host.gpus[1].health.remapped_rows_pending, std::nullopt);
  EXPECT_EQ(host.gpus[1].health.temperature_c, 34u);  // what it has, it still reports
  // MIG unknown reads as off: the node still maps.
  auto node = MapHostToNode(host, {.name = "old", .cpu_milli = 1000, .memory_mib = 1024});
  ASSERT_OK(node);
  EXPECT_FALSE(node->node.gpus[1].mig_enabled);
}

TEST_F(NvmlLibraryTest, AnOptionalSignalThatFailsIsListedAndTheRestReported) {
  nlohmann::json config = testing::TwoH100HostOneInMig();
  config["devices"][0]["errors"] = {{"nvmlDeviceGetTotalEccErrors", 3}};  // NOT_SUPPORTED
  Use(config);
  DiscoveredHost host = DiscoverWith(FAKE_NVML_LIBRARY);
  ASSERT_EQ(host.gpus.size(), 2u);
  EXPECT_EQ(host.gpus[0].health.ecc_uncorrected_volatile, std::nullopt);
  EXPECT_THAT(host.gpus[0].unavailable,
              ElementsAre("ECC errors: nvmlDeviceGetTotalEccErrors failed: Not Supported (NVML "
                          "error 3)"));
  EXPECT_EQ(host.gpus[1].health.ecc_uncorrected_volatile, 0u);
}

TEST_F(NvmlLibraryTest, ALostGpuFailsDiscoveryNamingTheCallAndTheGpu) {
  nlohmann::json config = testing::TwoH100HostOneInMig();
  config["devices"][1]["errors"] = {{"nvmlDeviceGetName", 15}};  // GPU_IS_LOST
  Use(config);
  auto nvml = NvmlLibrary::Open(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(nvml.has_value()) << nvml.error().message;
  auto host = (*nvml)->Discover();
  ASSERT_FALSE(host.has_value());
  EXPECT_EQ(host.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(host.error().message,
              HasSubstr("nvmlDeviceGetName (GPU 1) failed: GPU is lost (NVML error 15)"));
}

TEST_F(NvmlLibraryTest, CriticalXidsReachTheGpuOnceAndMakeItUnhealthy) {
  nlohmann::json config = testing::TwoH100HostOneInMig();
  config["devices"][1]["xid_errors"] = {79};  // fallen off the bus
  Use(config);
  auto nvml = NvmlLibrary::Open(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(nvml.has_value()) << nvml.error().message;
  auto host = (*nvml)->Discover();
  ASSERT_OK(host);
  EXPECT_THAT(host->gpus[0].health.xid_errors, IsEmpty());
  EXPECT_THAT(host->gpus[1].health.xid_errors, ElementsAre(79u));
  GpuVerdict verdict = JudgeGpuHealth(host->gpus[1]);
  EXPECT_FALSE(verdict.healthy);
  EXPECT_THAT(verdict.reasons, ElementsAre("critical XID 79 reported"));
  auto again = (*nvml)->PollXidErrors();
  ASSERT_OK(again);
  EXPECT_THAT(*again, IsEmpty());
}

TEST_F(NvmlLibraryTest, EccErrorsAndHeatReadThroughTheLibraryGiveTheirVerdicts) {
  nlohmann::json config = testing::TwoH100HostOneInMig();
  config["devices"][0]["ecc_uncorrected_volatile"] = 2;
  config["devices"][1]["temperature_c"] = 88;
  Use(config);
  DiscoveredHost host = DiscoverWith(FAKE_NVML_LIBRARY);
  auto node = MapHostToNode(host, {.name = "n", .cpu_milli = 1000, .memory_mib = 1024});
  ASSERT_OK(node);
  EXPECT_FALSE(node->node.gpus[0].healthy);
  EXPECT_THAT(node->gpus[0].verdict.reasons,
              ElementsAre("2 uncorrectable ECC errors since the driver loaded"));
  EXPECT_FALSE(node->node.gpus[1].healthy);
  EXPECT_THAT(node->gpus[1].verdict.reasons,
              ElementsAre("at 88 °C, at or above its slowdown threshold 87 °C"));
}

TEST(CudaVersionTextTest, ReadsNvmlsEncoding) {
  EXPECT_EQ(CudaVersionText(12040), "12.4");
  EXPECT_EQ(CudaVersionText(11080), "11.8");
  EXPECT_EQ(CudaVersionText(0), "");
}

}  // namespace
}  // namespace atrium::nvml
