// The execution backend: what runs a tenant's workload on the node and GPUs
// the scheduler allocated, watches it and stops it. Two implementations sit
// behind this one interface and pass the same conformance tests
// (tests/exec/backend_conformance.h):
//  - `local` (src/exec_local): processes on this machine, each in its own
//    bubblewrap sandbox with cgroup limits; the default of `atrium dev`.
//  - `slurm` (src/slurm): a real Slurm cluster that Atrium drives; Atrium
//    stays the authority for tenancy, quotas and placement, Slurm executes,
//    confines and accounts.
//
// The job service (src/jobs) is the only caller. It owns the job rows and
// their states; a backend only knows workloads, one per start of a job (a
// requeued job gets a new workload id). Every call is idempotent by
// workload id, and a backend keeps what it needs to answer for a workload on
// durable storage of its own (a directory, Slurm's state), so a control
// plane killed with `kill -9` finds its workloads again with `List()`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "exec/end_markers.h"

namespace atrium::exec {

// One GPU the workload may use, as the scheduler placed it. A workload
// holds whole GPUs, or exactly one MIG instance, or exactly one share.
struct GpuGrant {
  int index = 0;            // device index on the node (the scheduler's)
  std::string mig_profile;  // "" = the whole GPU or a share of it
  int mig_start = -1;       // MIG: memory slot where the instance starts (0..7)
  // MIG: the GPU instance and compute instance ids the driver gave the
  // instance at mig_start (their capability device files are the workload's
  // way in); -1 = not known yet: the backend finds them on the node
  // (exec_local: LocalBackendOptions::resolve_mig) or refuses.
  int mig_gi = -1;
  int mig_ci = -1;
  // MIG: the MIG device's UUID ("MIG-..."), and the parent GPU's ("GPU-..."),
  // when discovery knows them; "" otherwise.
  std::string mig_uuid;
  std::string gpu_uuid;
  int32_t share_milli = 0;  // share: the fraction of the GPU, 1..999 (0 = whole)
  int64_t memory_cap_mib = 0;
};

// What every backend tells a workload that holds a time-sliced share of a
// GPU (share_milli > 0), beside the visible devices: ATRIUM_GPU_SHARE_MILLI,
// and the MPS client limits CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// (ceil(milli / 10), 1..100) and, with a memory cap,
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<cap>MB", for the one device the
// workload sees). The MPS limits bind only where an MPS server serves the
// workload; without one a share's compute and memory are not capped.
// Empty for any other grant.
std::vector<std::pair<std::string, std::string>> ShareEnvironment(const GpuGrant& grant);

// Everything needed to start one workload. Validated by the job service
// before it reaches a backend; a backend still refuses (InvalidArgument)
// what it cannot run safely rather than run it with less confinement.
struct LaunchSpec {
  std::string workload_id;  // unique per start: "<job id>.<attempt>"
  std::string job_id;
  std::string tenant_id;
  std::string project;
  std::string node;            // the node the scheduler chose
  std::vector<GpuGrant> gpus;  // on that node; empty = CPU only
  int64_t cpu_milli = 0;       // 0 = no CPU limit beyond the node's
  int64_t memory_mib = 0;      // 0 = no memory limit beyond the node's
  int64_t pids_max = 0;        // 0 = the backend's default
  // What to run: argv[0] is looked up in the sandbox's PATH. When `script`
  // is set it is written to the workload's directory and run with
  // `/bin/sh <script> args...` instead of argv.
  std::vector<std::string> argv;
  std::string script;
  std::vector<std::pair<std::string, std::string>> env;
  // An archive (tar, optionally gzip) extracted into the working directory
  // before start; "" = none. A path on the control plane's disk.
  std::string archive_path;
  // The environment template's root filesystem (a directory); "" = the
  // host's /usr, /bin, /lib read-only.
  std::string root_fs;
  int64_t time_limit_s = 0;  // 0 = none; the job service enforces it too
  std::string priority;      // interactive | batch | preemptible (Slurm: QOS)
  // The tenant's tier demands full confinement: refuse to start (rather
  // than run with less) when the host refuses a mechanism (cgroups, namespaces).
  bool require_full_confinement = false;
  // The platform's own model servers (src/serving) only, never a tenant's
  // job: share the node's network, so the gateway reaches the server's
  // port (the local sandbox keeps no network namespace of its own), and
  // show host folders read-only inside the sandbox: (where inside, the
  // host's path), e.g. the engine and the model's weights. The Slurm
  // backend refuses binds without a root_fs (it sandboxes only then).
  bool host_network = false;
  std::vector<std::pair<std::string, std::string>> read_only_binds;
};

enum class WorkloadPhase {
  kStarting,  // accepted, not running yet (Slurm: pending in its queue)
  kRunning,
  kExited,  // ended: see exit_code / signal
  kLost,    // the backend no longer knows it, or its node is gone
};
std::string_view PhaseName(WorkloadPhase phase);  // "starting", "running", "exited", "lost"

struct WorkloadStatus {
  std::string workload_id;
  std::string backend_ref;  // local: the supervisor's pid; Slurm: its job id
  WorkloadPhase phase = WorkloadPhase::kStarting;
  int exit_code = -1;       // kExited by exit: 0..255; -1 otherwise
  int signal = 0;           // kExited by a signal: its number; 0 otherwise
  int64_t started_ms = -1;  // when it began running (ms since epoch); -1 not yet
  int64_t ended_ms = -1;    // when it ended; -1 while alive
  // GPU indices the backend actually gave it (Slurm reads them back); for
  // the local backend the granted ones.
  std::vector<int> gpus;
  std::string detail;  // words for a person: why lost, what the host refused
};

// A piece of the workload's log (stdout and stderr interleaved as written).
struct LogChunk {
  std::string data;
  int64_t offset = 0;       // where `data` starts in the log
  int64_t next_offset = 0;  // where the next read continues
  // Bytes lost before `offset` because the log was rotated (bounded size).
  int64_t dropped = 0;
  bool complete = false;  // the workload ended and everything was read
};

// A tenant as the backend needs to know it (Slurm: an account with limits
// and QOS). The local backend has nothing to do for it.
struct TenantAccount {
  std::string tenant_id;
  std::string state;  // active | suspended | evicting | deleted
  // The most whole GPUs the tenant may hold at once, by model ("" = all):
  // the scheduler's limits, mirrored as a second fence (Slurm GrpTRES).
  std::vector<std::pair<std::string, int64_t>> gpu_limits;
};

class ExecutionBackend {
 public:
  virtual ~ExecutionBackend() = default;

  virtual std::string_view name() const = 0;  // "local" | "slurm"

  // Starts the workload. A second Start for a workload id it already knows
  // starts nothing and returns that workload's status. InvalidArgument for
  // a spec it cannot run safely; Unavailable when the backend is down.
  virtual Result<WorkloadStatus> Start(const LaunchSpec& spec) = 0;
  // The workload's status now. NotFound for an id it never started or
  // already forgot.
  virtual Result<WorkloadStatus> Inspect(const std::string& workload_id) = 0;
  // Every workload it knows, running or ended and not forgotten: the job
  // service reconciles with this at start.
  virtual Result<std::vector<WorkloadStatus>> List() = 0;
  // The status of each of `workload_ids` it knows, by id, asked in one
  // look where the backend can (Slurm: one scontrol for them all, not one
  // per job): the job service's reconcile asks it once per tick for every
  // live job. Ids it does not know are left out (Inspect says NotFound for
  // them). The default asks Inspect for each.
  virtual Result<std::map<std::string, WorkloadStatus>> InspectMany(
      const std::vector<std::string>& workload_ids);
  // SIGTERM to every process of the workload, then SIGKILL after `grace_ms`.
  // Returns at once; Inspect reports kExited once every process is gone.
  // Stopping an ended workload is not an error.
  virtual Status Stop(const std::string& workload_id, int64_t grace_ms) = 0;
  // Reads its log from `offset`, at most `max_bytes`.
  virtual Result<LogChunk> ReadLog(const std::string& workload_id, int64_t offset,
                                   int64_t max_bytes) = 0;
  // Deletes what it keeps of an ended workload (directory, log). Refused
  // (FailedPrecondition) while it runs.
  virtual Status Forget(const std::string& workload_id) = 0;
  // The job service has recorded the workload's end: frees what it holds on
  // the node (processes left over, its working directory, its uid) and
  // keeps only its end and log for Inspect and ReadLog, until Forget or the
  // backend's log retention. Releasing twice is not an error; a backend
  // that frees something refuses (FailedPrecondition) while it runs. The
  // default does nothing: for backends that hold nothing per workload
  // beyond its records and log.
  virtual Status Release(const std::string& workload_id) {
    (void)workload_id;
    return OkStatus();
  }
  // Makes the backend's view of a tenant match `account` (created, limited,
  // suspended, deleted). Idempotent.
  virtual Status SyncTenant(const TenantAccount& account) = 0;
  // From now on, calls `hint` with a workload's id when the backend hears
  // that it may have ended (end_markers.h), on a thread of its own, so the
  // job service looks at once instead of at its next reconcile. Only a
  // hint: it may be late, twice or never. The default never calls it (the
  // reconcile alone sees ends). Unavailable when the backend cannot watch;
  // the caller goes on without hints.
  virtual Status WatchEnds(const EndHint& hint) {
    (void)hint;
    return OkStatus();
  }
  // No hint is called once this returns. Idempotent.
  virtual void StopWatchingEnds() {}
};

}  // namespace atrium::exec
