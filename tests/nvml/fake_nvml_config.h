// Hosts for the fake NVML (tests/nvml/fake_nvml.cc): JSON answers written to
// a file that FAKE_NVML_CONFIG names.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace atrium::testing {

// What an "NVIDIA H100 80GB HBM3" reports: 81,559 MiB.
inline constexpr unsigned long long kH100MemoryBytes = 81559ULL * 1024 * 1024;

// One healthy, idle H100 SXM (figures as nvidia-smi shows them).
inline nlohmann::json FakeH100(int index) {
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(index)},
          {"memory_total_bytes", kH100MemoryBytes},
          {"mig_mode", 0},
          {"ecc_uncorrected_volatile", 0},
          {"retired_pages_pending", false},
          {"remapped_rows_pending", false},
          {"remapped_rows_failed", false},
          {"temperature_c", 34},
          {"slowdown_c", 87},
          {"shutdown_c", 92},
          {"power_mw", 71000},
          {"power_limit_mw", 700000}};
}

// Two NVLinked H100s, GPU 1 in MIG mode with 3g.40gb@0, 2g.20gb@4 and
// 1g.10gb@6.
inline nlohmann::json TwoH100HostOneInMig() {
  nlohmann::json gpu0 = FakeH100(0);
  gpu0["nvlink_peers"] = {1};
  nlohmann::json gpu1 = FakeH100(1);
  gpu1["nvlink_peers"] = {0};
  gpu1["mig_mode"] = 1;
  gpu1["gpu_instances"] = {{{"profile_id", 19}, {"start", 6}},
                           {{"profile_id", 9}, {"start", 0}},
                           {{"profile_id", 14}, {"start", 4}}};
  return {
      {"driver_version", "550.54.15"}, {"cuda_driver_version", 12040}, {"devices", {gpu0, gpu1}}};
}

// Writes `config` to `dir`/fake-nvml.json and points FAKE_NVML_CONFIG at it.
inline void UseFakeNvmlConfig(const std::filesystem::path& dir, const nlohmann::json& config) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "fake-nvml.json";
  std::ofstream(path) << config.dump(2);
  ::setenv("FAKE_NVML_CONFIG", path.c_str(), 1);
}

}  // namespace atrium::testing
