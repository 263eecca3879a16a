// The `slurm` execution backend: workloads are batch jobs of a real Slurm
// 22.05 cluster, driven through its CLIs (sbatch, scontrol, squeue,
// scancel, sacct, sacctmgr) by way of a CommandRunner. Atrium stays the
// authority for tenancy, quotas and placement: every job is pinned to the
// node and the GPU indices the scheduler chose; Slurm executes, confines
// (cgroup devices) and accounts. README "Running on Slurm" says why CLIs
// rather than slurmrestd, what is confined and how the grace maps.
//
// A job with an environment template (spec.root_fs) runs in a bubblewrap
// sandbox the batch script execs on the node, the local backend's sandbox
// plan: the template's root as /, only its GPUs in /dev, under the same
// cgroup device confinement (docs/slurm.md says why not Slurm's OCI
// `--container` on 22.05).
//
// Durable state is the workload's folder (slurm_commands.h, PathsFor) plus
// Slurm's own: `state` there records the Slurm job id and the tenant; a
// Start interrupted between sbatch and that record finds the job again by
// its name (the workload id), so a workload is never submitted twice.
//
// Calls about different workloads may run at once (the job service makes
// one call per job at a time, on several threads; the tenant sync thread
// calls SyncTenant): each workload's state is its own folder, and what the
// backend learns of the cluster once is guarded by facts_mu_.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "exec/backend.h"
#include "exec/end_marker_watcher.h"
#include "slurm/command_runner.h"
#include "slurm/slurm_commands.h"
#include "slurm/slurm_text.h"

namespace atrium::slurm {

struct SlurmBackendOptions {
  // Where the workloads' folders go (PathsFor); on a cluster, a file system
  // every node mounts at the same path. Must exist, absolute, no '%'.
  std::string workload_root;
  // Tenants' Unix users are `unix_user_prefix` + tenant id (default "").
  std::string unix_user_prefix;
  // Create a missing tenant user with useradd on this host (one-host
  // clusters; a real cluster's users come from its directory service).
  bool create_unix_users = false;
  // See SubmitContext::gpu_types_are_indices (deploy/slurm/gres.conf).
  bool gpu_types_are_indices = true;
  std::string partition;  // "" = the cluster's default
  // The most bytes of a workload's log kept (0 = all): older bytes are
  // dropped (ReadLog says how many) and their disk space punched out of
  // the file, which Slurm keeps appending to.
  int64_t log_max_bytes = 0;
  // The scheduler's preemption grace period, mirrored as the preemptible
  // QOS's GraceTime (SIGTERM, then SIGKILL that much later).
  int64_t preempt_grace_s = 30;
  // How a job with an environment template's root filesystem is sandboxed
  // on its node (bubblewrap; slurm_commands.h). Without an init path such
  // jobs are refused.
  NodeSandbox sandbox;
  // Where the controller's EpilogSlurmctld marks each ended job by its
  // name (deploy/slurm/job_ended.sh.in; exec/end_markers.h), so the job
  // service hears of an end at once; "" = none (it sees ends at its next
  // reconcile). Scanned every ended_scan_ms as well as watched, for a
  // controller on another host writing over a network file system.
  std::string ended_dir;
  int64_t ended_scan_ms = 200;
  // How long a released workload's log and end are kept; then its folder
  // is deleted as by Forget. 0 = until Forget (the tenant's deletion).
  int64_t log_retention_s = int64_t{30} * 24 * 3600;
};

class SlurmBackend : public exec::ExecutionBackend {
 public:
  // `runner` and `clock` must outlive the backend.
  SlurmBackend(SlurmBackendOptions options, CommandRunner& runner, const Clock& clock);

  std::string_view name() const override { return "slurm"; }
  Result<exec::WorkloadStatus> Start(const exec::LaunchSpec& spec) override;
  Result<exec::WorkloadStatus> Inspect(const std::string& workload_id) override;
  Result<std::vector<exec::WorkloadStatus>> List() override;
  // One `scontrol show job` for them all, then sacct for those the
  // controller has forgotten: what List does, for the given ids.
  Result<std::map<std::string, exec::WorkloadStatus>> InspectMany(
      const std::vector<std::string>& workload_ids) override;
  // SIGTERM now (scancel --full --signal=TERM); SIGKILL once `grace_ms`
  // has passed, sent by the first Stop, Inspect or List after that moment,
  // then `scancel` ends the job in Slurm. The deadline is kept in the
  // workload's state, so a restarted control plane sends it too. The job
  // service inspects every live job's workload each tick (job_service.h
  // says why that bounds the delay to one tick).
  Status Stop(const std::string& workload_id, int64_t grace_ms) override;
  Result<exec::LogChunk> ReadLog(const std::string& workload_id, int64_t offset,
                                 int64_t max_bytes) override;
  Status Forget(const std::string& workload_id) override;
  // The job has ended in Slurm (Slurm ended its processes): removes what
  // the tenant's job left in its folder (work/, the archive, the launch
  // files) and keeps the log, the state and the sandbox report for
  // Inspect and ReadLog until log_retention_s has passed. Deletes the
  // folders of workloads released longer ago than that, at most once per
  // min(log_retention_s, 1 h). FailedPrecondition while it runs.
  Status Release(const std::string& workload_id) override;
  Status SyncTenant(const exec::TenantAccount& account) override;
  // Watches ended_dir (nothing to watch without one).
  Status WatchEnds(const exec::EndHint& hint) override;
  void StopWatchingEnds() override;

  // GPU-seconds Slurm's accounting says the workload held (sacct AllocTRES
  // gres/gpu × ElapsedRaw): the metering cross-check. NotFound for an id it
  // does not know; Unavailable until accounting has recorded its end
  // (slurmdbd hears of it shortly after the controller).
  Result<int64_t> SacctGpuSeconds(const std::string& workload_id);

 private:
  struct StateRecord {
    std::string job_id;  // "" = not submitted (yet)
    std::string tenant_id;
    int64_t kill_at_ms = -1;  // a Stop's SIGKILL deadline; -1 = none
    // The GPU indices: the ones asked for (exact when GPU types are
    // indices), then the ones read back while it ran (Slurm shows them
    // only then).
    std::vector<int> gpus;
    int64_t killed_at_ms = -1;  // when the backend sent SIGKILL itself
    int64_t released_ms = -1;   // when Release freed it; -1 = not yet
  };

  Result<StateRecord> ReadState(const WorkloadPaths& paths);
  Status WriteState(const WorkloadPaths& paths, const StateRecord& state);
  // The job named `workload_id`, by name (squeue, then sacct): "" if none.
  Result<std::string> FindJobByName(const std::string& workload_id);
  Result<SlurmJobRecord> LookupJob(const std::string& job_id);
  // The workload's state, its Slurm job id found by name when a Start did
  // not live to record it; NotFound when it never reached Slurm.
  Result<StateRecord> SubmittedState(const std::string& workload_id, const WorkloadPaths& paths);
  // The statuses of those of `workload_ids` that reached Slurm (List,
  // InspectMany).
  Result<std::vector<exec::WorkloadStatus>> StatusesOf(
      const std::vector<std::string>& workload_ids);
  Result<exec::WorkloadStatus> InspectPaths(const std::string& workload_id,
                                            const WorkloadPaths& paths);
  // The workload's status from what Slurm says of its job (`job`: NotFound
  // when neither the controller nor accounting knows it). Sends the
  // SIGKILL of a Stop whose grace has passed, records the GPUs read back
  // and trims the log: every Inspect and List does.
  Result<exec::WorkloadStatus> StatusOfJob(const std::string& workload_id,
                                           const WorkloadPaths& paths, StateRecord& state,
                                           const Result<SlurmJobRecord>& job);
  Result<CommandOutput> RunChecked(const Argv& argv);
  Status EnsureQos();
  // Refuses (FailedPrecondition) when the cluster lacks a mechanism the
  // spec's tenant demands (require_full_confinement); asks once.
  Status CheckConfinement(const exec::LaunchSpec& spec);
  // Drops what lies beyond log_max_bytes from the log's disk space.
  void TrimLog(const WorkloadPaths& paths);
  // Deletes the folders of workloads released log_retention_s ago or more.
  void PruneExpired();

  SlurmBackendOptions options_;
  CommandRunner& runner_;
  const Clock& clock_;
  std::optional<exec::EndMarkerWatcher> ends_;  // with ended_dir; started by WatchEnds
  std::mutex facts_mu_;
  bool qos_ready_ = false;                        // GUARDED_BY(facts_mu_)
  bool confinement_known_ = false;                // GUARDED_BY(facts_mu_)
  std::vector<std::string> missing_confinement_;  // GUARDED_BY(facts_mu_)
  std::mutex prune_mu_;
  int64_t last_prune_ms_ = 0;  // GUARDED_BY(prune_mu_)
};

}  // namespace atrium::slurm
