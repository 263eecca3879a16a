// A SlurmBackend world for one test, on the cluster scripts/slurm-dev.sh
// started (ATRIUM_TEST_SLURM_DIR): a fresh workload root under the cluster's
// jobs/ folder, removed at the end; the cluster's fake GPUs
// (DIR/fakedev/nvidiaN, character devices 195:N). Without a cluster the
// conformance suite skips, or fails when ATRIUM_TEST_REQUIRE_SLURM=1.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "exec/backend_harness.h"
#include "slurm/command_runner.h"
#include "slurm/slurm_backend.h"

namespace atrium::slurm::testing {

// The cluster's folder, or "" when none is configured.
inline std::string SlurmTestDir() {
  const char* dir = std::getenv("ATRIUM_TEST_SLURM_DIR");
  return dir && *dir ? dir : "";
}

inline bool SlurmRequired() {
  const char* require = std::getenv("ATRIUM_TEST_REQUIRE_SLURM");
  return require && std::string(require) == "1";
}

inline std::unique_ptr<ProcessCommandRunner> NewSlurmRunner(const std::string& dir) {
  return std::make_unique<ProcessCommandRunner>(
      std::vector<std::pair<std::string, std::string>>{
          {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
          {"SLURM_CONF", dir + "/slurm.conf"},
          {"SLURM_TIME_FORMAT", "%s"}},
      30000);
}

class SlurmHarness final : public exec::conformance::BackendHarness {
 public:
  explicit SlurmHarness(int64_t log_max_bytes = 8192) : dir_(SlurmTestDir()) {
    const char* node = std::getenv("ATRIUM_SLURM_NODE");
    node_ = node && *node ? node : "localhost";
    runner_ = NewSlurmRunner(dir_);
    std::random_device rd;
    root_ = dir_ + "/jobs/conformance-" + std::to_string(::getpid()) + "-" +
            std::to_string(rd() % 1000000);
    std::filesystem::create_directories(root_);
    ::chmod(root_.c_str(), 0711);
    options_.workload_root = root_;
    options_.unix_user_prefix = "atr_";
    options_.create_unix_users = true;
    options_.log_max_bytes = log_max_bytes;
    options_.preempt_grace_s = 5;
    // The cluster's EpilogSlurmctld marks ended jobs here
    // (deploy/slurm/job_ended.sh.in); every harness on it watches the one
    // folder and takes only its own workloads' markers.
    options_.ended_dir = dir_ + "/ended";
    // Template jobs run in bubblewrap on the node: this build's init, the
    // cluster's fake GPUs.
    options_.sandbox.init_path = ATRIUM_SANDBOX_INIT_PATH;
    options_.sandbox.device_dir = dir_ + "/fakedev";
  }
  ~SlurmHarness() override {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  std::unique_ptr<exec::ExecutionBackend> NewBackend() override {
    return std::make_unique<SlurmBackend>(options_, *runner_, clock_);
  }
  std::string Node() override { return node_; }
  std::vector<int> GpuIndices() override { return {0, 1, 2, 3}; }
  std::string WorkDirOnHost(const std::string& workload_id) override {
    return PathsFor(root_, workload_id).work;
  }
  // The job's processes as its node's slurmd knows them (`scontrol
  // listpids`, run on the node: here, this host).
  std::vector<int> HostPids(const std::string& workload_id) override {
    std::vector<int> pids;
    SlurmBackend backend(options_, *runner_, clock_);
    auto status = backend.Inspect(workload_id);
    if (!status) return pids;
    auto out = runner_->Run({"scontrol", "listpids", status->backend_ref});
    if (!out || out->exit_code != 0) return pids;
    std::istringstream lines(out->out);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      long pid = 0;
      if (fields >> pid && pid > 1) pids.push_back(static_cast<int>(pid));
    }
    return pids;
  }
  std::string ControlPlaneDir() override { return root_; }
  std::string EndedDir() override { return options_.ended_dir; }
  int64_t LogMaxBytes() override { return options_.log_max_bytes; }
  std::string DevicePathInWorkload(int index) override {
    return dir_ + "/fakedev/nvidia" + std::to_string(index);
  }
  std::chrono::milliseconds PollInterval() override { return std::chrono::milliseconds(100); }

 private:
  std::string dir_, node_, root_;
  SlurmBackendOptions options_;
  SystemClock clock_;
  std::unique_ptr<ProcessCommandRunner> runner_;
};

}  // namespace atrium::slurm::testing
