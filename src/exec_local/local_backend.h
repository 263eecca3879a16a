// The `local` execution backend: each workload is a bubblewrap sandbox on
// this machine (exec/sandbox.h), in its own cgroups (cgroups.h), run by a
// small detached supervisor process (atrium-workload-supervisor) that
// outlives the control plane: `kill -9` of Atrium leaves workloads running,
// and a new LocalBackend over the same state dir finds them (List), reads
// the ends they met meanwhile, and can stop them.
//
// Per workload: its own uid and gid from a range (so even without
// namespaces no workload can read another's directory or signal its
// processes), a directory 0700 owned by that uid, a log bounded to
// `log_max_bytes` that keeps the newest bytes. Every state lives in files
// under state_dir (workload_files.h); the object itself holds only a cache
// of the uids in use.
//
// A uid is held from Start until Release (the job service calls it once it
// has recorded the end) or Forget: then no process of the uid is left
// (killed), its directory and archive copy are removed, and the uid is
// free for the next workload, so short jobs and restarts do not use up the
// range. What stays is root's (records and log, outside any sandbox):
// Inspect and ReadLog answer until Forget or until `log_retention_s` after
// the release.
//
// Thread-safe: one mutex serialises the calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"
#include "exec/end_marker_watcher.h"
#include "exec/sandbox.h"

namespace atrium::exec_local {

struct LocalBackendOptions {
  // Where workloads' records, logs and directories live; created 0711.
  std::string state_dir;
  // The two helper executables (built next to atrium).
  std::string supervisor_path;
  std::string sandbox_init_path;
  std::string bwrap_path = "/usr/bin/bwrap";
  // Where GPU device files live ("/dev"; tests: a folder of `mknod` fakes).
  std::string device_dir = "/dev";
  // NVIDIA control devices bound into a sandbox with GPUs, when present.
  std::vector<std::string> control_devices = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                              "nvidia-modeset"};
  // MIG: where the capability device files live (the driver's, with
  // nv_cap_enable_devfs=1; tests: `mknod` fakes) and the driver's table of
  // their minors, read at each start of a MIG workload.
  std::string mig_caps_dir = "/dev/nvidia-caps";
  std::string mig_minors_path = "/proc/driver/nvidia-caps/mig-minors";
  // The GPU instance and compute instance (and UUIDs) of a MIG grant that
  // does not name them: the node's MIG layout as discovery knows it, or
  // SimulatedMigInstance on the simulated fleet. Unset: such a grant is
  // refused (FailedPrecondition), never guessed.
  std::function<Result<exec::GpuGrant>(const exec::GpuGrant&)> resolve_mig;
  // Each workload runs as its own uid (and gid) from [uid_base, uid_base + uid_count).
  uint32_t uid_base = 200000;
  uint32_t uid_count = 50000;
  int64_t log_max_bytes = 8 << 20;
  // cgroup v1 mount root and the folder under each controller for Atrium's.
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string cgroup_parent = "atrium";
  int64_t default_pids_max = 4096;
  // The memory limit of a workload whose spec gives none (memory_mib 0):
  // every workload has one. Default 4 GiB.
  int64_t default_memory_mib = 4096;
  // The size of a sandbox's private /tmp and of its /dev/shm, each
  // (tmpfs; their pages count against the memory limit too). Default 1 GiB.
  int64_t tmpfs_mib = 1024;
  // The largest file a workload may write (RLIMIT_FSIZE; SIGXFSZ beyond):
  // a bound per file, not for the whole of /work. 0 = none (the default).
  int64_t max_file_mib = 0;
  // How long the log and end of a released workload are kept; then they
  // are deleted as by Forget. 0 = until Forget (the tenant's deletion).
  // Default 30 days.
  int64_t log_retention_s = int64_t{30} * 24 * 3600;
  // Refuse (FailedPrecondition) every workload the host cannot fully
  // confine, not only those whose spec asks for it.
  bool require_full_confinement = false;

  // Sets the two helper paths to `dir`/atrium-workload-supervisor and
  // `dir`/atrium-sandbox-init: the build and an install put them next to
  // the atrium binary.
  LocalBackendOptions& WithHelpersIn(const std::string& dir) {
    supervisor_path = dir + "/atrium-workload-supervisor";
    sandbox_init_path = dir + "/atrium-sandbox-init";
    return *this;
  }
};

// The character-device major of simulated MIG capability files: one the
// kernel reserves for local use (Documentation/admin-guide/devices.txt),
// so no driver answers an open of a fake (ENXIO), as for the fake GPUs.
inline constexpr unsigned kSimulatedMigCapMajor = 60;

// Fakes of the driver's MIG capability files for `gpus` GPUs: a `mknod`
// character device per GPU instance and compute instance in `caps_dir`
// (nvidia-capN, as exec::MigMinorsTable numbers them; not the config and
// monitor ones) and the table itself at `minors_path`. Idempotent; needs
// root. FailedPrecondition when a file in the way is not such a fake.
Status MakeSimulatedMigDevices(const std::string& caps_dir, const std::string& minors_path,
                               int gpus);

// The simulated fleet's MIG layout: the instance at memory slot S of a GPU
// is GPU instance S with compute instance 0 (instances of one GPU never
// share a start slot, so no two hold the same ids), with no UUIDs. The
// fakes of its capability files follow exec::MigMinorsTable.
Result<exec::GpuGrant> SimulatedMigInstance(const exec::GpuGrant& grant);

class LocalBackend final : public exec::ExecutionBackend {
 public:
  // InvalidArgument for options it cannot work with (relative paths, an
  // empty uid range or one that includes root); Unavailable when the state
  // dir cannot be created.
  static Result<std::unique_ptr<LocalBackend>> Create(LocalBackendOptions options);

  std::string_view name() const override { return "local"; }
  Result<exec::WorkloadStatus> Start(const exec::LaunchSpec& spec) override;
  Result<exec::WorkloadStatus> Inspect(const std::string& workload_id) override;
  Result<std::vector<exec::WorkloadStatus>> List() override;
  Status Stop(const std::string& workload_id, int64_t grace_ms) override;
  Result<exec::LogChunk> ReadLog(const std::string& workload_id, int64_t offset,
                                 int64_t max_bytes) override;
  Status Forget(const std::string& workload_id) override;
  Status Release(const std::string& workload_id) override;
  // Watches state_dir/ended, where each supervisor marks its workload's
  // end (exec/end_markers.h).
  Status WatchEnds(const exec::EndHint& hint) override;
  void StopWatchingEnds() override;
  Status SyncTenant(const exec::TenantAccount& account) override;

  // The host pids of a workload: its supervisor and every process in its
  // cgroups (for operators, and for the isolation tests' attacks).
  Result<std::vector<int>> HostPids(const std::string& workload_id);
  // The host path of a workload's own directory (its /work).
  std::string WorkDirOf(const std::string& workload_id) const;

 private:
  explicit LocalBackend(LocalBackendOptions options);
  std::string RecordDirOf(const std::string& workload_id) const;
  Result<exec::WorkloadStatus> InspectLocked(const std::string& workload_id);
  Status ProbeSandboxLocked();
  Result<uint32_t> AllocateUidLocked();
  // The spec's MIG grants with their instance ids, and the host's MIG
  // capability table in `host` (only when the spec has a MIG grant).
  Result<exec::LaunchSpec> ResolveMig(const exec::LaunchSpec& spec, exec::SandboxHost& host) const;
  // Frees what an ended workload holds (see the header comment); Ok when
  // it was released before. Unavailable when a process or file of its uid
  // remains: the uid stays held.
  Status ReleaseLocked(const std::string& workload_id);
  // Deletes released workloads whose retention has passed; at most once
  // per min(log_retention_s, 1 h).
  void PruneExpiredLocked();
  void RemoveRecordLocked(const std::string& workload_id);
  std::vector<exec::HostPath> SystemPaths() const;

  const LocalBackendOptions options_;
  const std::string workloads_dir_;
  std::mutex mu_;
  std::optional<std::set<uint32_t>> uids_in_use_;  // GUARDED_BY(mu_); loaded on first Start
  std::optional<Status> sandbox_probe_;            // GUARDED_BY(mu_)
  int64_t last_prune_ms_ = 0;                      // GUARDED_BY(mu_)
  exec::EndMarkerWatcher ends_;                    // started by WatchEnds
};

}  // namespace atrium::exec_local
