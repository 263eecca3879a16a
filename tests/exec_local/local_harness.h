// A LocalBackend world for one test: a state dir, a folder of fake GPUs
// (character devices 195:N made with mknod, as the NVIDIA driver's), its own
// cgroup folder, all removed at the end. Tests run as root (here and in CI):
// the backend needs it to give each workload its own uid and cgroups.
#pragma once

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "exec/backend_harness.h"
#include "exec_local/local_backend.h"
#include "exec_local/workload_files.h"

namespace atrium::exec_local::testing {

inline constexpr int kFakeGpus = 4;

class LocalHarness final : public exec::conformance::BackendHarness {
 public:
  explicit LocalHarness(int64_t log_max_bytes = 8192) {
    static std::atomic<int> counter{0};
    const std::string name =
        "atrium-local-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    root_ = "/tmp/" + name;
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/dev");
    // Workload uids traverse to their own directories and device files.
    ::chmod(root_.c_str(), 0711);
    ::chmod((root_ + "/dev").c_str(), 0755);
    for (int i = 0; i < kFakeGpus; ++i) MakeDevice("nvidia" + std::to_string(i), i);
    MakeDevice("nvidiactl", 255);
    // MIG: fake capability files and the driver's table of their minors,
    // with the simulated fleet's layout (GPU instance = start slot).
    options_.mig_caps_dir = root_ + "/dev/nvidia-caps";
    options_.mig_minors_path = root_ + "/mig-minors";
    auto caps = MakeSimulatedMigDevices(options_.mig_caps_dir, options_.mig_minors_path, kFakeGpus);
    EXPECT_TRUE(caps.has_value()) << caps.error().message;
    options_.resolve_mig = SimulatedMigInstance;
    options_.state_dir = root_ + "/state";
    options_.WithHelpersIn(std::filesystem::path(ATRIUM_SUPERVISOR_PATH).parent_path());
    EXPECT_EQ(options_.sandbox_init_path, ATRIUM_SANDBOX_INIT_PATH)
        << "the helpers sit side by side";
    options_.device_dir = root_ + "/dev";
    options_.log_max_bytes = log_max_bytes;
    options_.cgroup_parent = name;
    options_.uid_base = 300000 + static_cast<uint32_t>((::getpid() % 500) * 1000 + counter * 50);
    options_.uid_count = 50;
  }

  ~LocalHarness() override {
    backend_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
    for (const char* controller : {"freezer", "pids", "memory", "cpu", "devices"}) {
      ::rmdir((options_.cgroup_root + "/" + controller + "/" + options_.cgroup_parent).c_str());
    }
    ::rmdir((options_.cgroup_root + "/" + options_.cgroup_parent).c_str());  // cgroup v2
  }

  LocalBackendOptions& options() { return options_; }
  const std::string& root() const { return root_; }

  Result<std::unique_ptr<LocalBackend>> NewLocalBackend() { return LocalBackend::Create(options_); }

  std::unique_ptr<exec::ExecutionBackend> NewBackend() override {
    auto backend = LocalBackend::Create(options_);
    EXPECT_TRUE(backend.has_value()) << backend.error().message;
    return backend.has_value() ? std::move(*backend) : nullptr;
  }
  std::string Node() override { return "local"; }
  std::vector<int> GpuIndices() override { return {0, 1, 2, 3}; }
  std::string WorkDirOnHost(const std::string& workload_id) override {
    return Own().WorkDirOf(workload_id);
  }
  std::vector<int> HostPids(const std::string& workload_id) override {
    auto pids = Own().HostPids(workload_id);
    EXPECT_TRUE(pids.has_value());
    return pids.has_value() ? *pids : std::vector<int>{};
  }
  std::string ControlPlaneDir() override { return options_.state_dir; }
  std::string EndedDir() override { return options_.state_dir + "/" + kEndedDirName; }
  bool RunsMig() override { return true; }
  std::vector<std::string> MigCapsInWorkload(int index, int start) override {
    exec::GpuGrant grant;
    grant.index = index;
    grant.mig_profile = "1g.10gb";
    grant.mig_start = start;
    auto ids = SimulatedMigInstance(grant);
    auto minors = exec::ParseMigMinors(exec::MigMinorsTable(kFakeGpus));
    if (!ids.has_value() || !minors.has_value()) return {};
    std::vector<std::string> out;
    for (const auto& cap : {exec::MigGpuInstanceCap(index, ids->mig_gi),
                            exec::MigComputeInstanceCap(index, ids->mig_gi, ids->mig_ci)}) {
      out.push_back("/dev/nvidia-caps/nvidia-cap" + std::to_string(minors->at(cap)));
    }
    return out;
  }
  int64_t LogMaxBytes() override { return options_.log_max_bytes; }

 private:
  void MakeDevice(const std::string& name, int minor_number) {
    const std::string path = root_ + "/dev/" + name;
    EXPECT_EQ(::mknod(path.c_str(), S_IFCHR | 0666, makedev(195, minor_number)), 0) << path;
    ::chmod(path.c_str(), 0666);
  }
  LocalBackend& Own() {
    if (backend_ == nullptr) {
      auto backend = LocalBackend::Create(options_);
      EXPECT_TRUE(backend.has_value());
      backend_ = std::move(*backend);
    }
    return *backend_;
  }

  std::string root_;
  LocalBackendOptions options_;
  std::unique_ptr<LocalBackend> backend_;  // the harness's own view, for pids and paths
};

}  // namespace atrium::exec_local::testing
