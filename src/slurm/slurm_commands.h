// The Slurm command lines Atrium runs, as argv vectors. Pure: no I/O.
//
// Nothing here is ever handed to a shell. Tenant-chosen text (the command,
// its arguments, its environment, its script) never appears in an sbatch
// argument either: it goes into the workload's launch file, NUL-separated,
// which a fixed batch script (BatchScript()) reads as data with `mapfile`
// and `exec`s. What does appear in argv (workload id, tenant id, node name)
// is checked here against a narrow alphabet first, so it can break neither
// an option nor Slurm's own parsing (commas, '%' patterns, spaces).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"

namespace atrium::slurm {

using Argv = std::vector<std::string>;

// Where a workload's files live under the backend's workload root:
//   <root>/<workload id>/            root, 0711: only known names pass
//   <root>/<workload id>/state       root, 0600: the backend's own record
//   <root>/<workload id>/job.sbatch  root, 0644: BatchScript()
//   <root>/<workload id>/log         the tenant's user, 0600: stdout+stderr
//   <root>/<workload id>/archive     the tenant's user, 0400 (optional)
//   <root>/<workload id>/report      the tenant's user, 0600: how a
//                                    sandboxed command ended (root_fs only)
//   <root>/<workload id>/work/       the tenant's user, 0700: the working
//                                    directory, with launch.argv and the script
struct WorkloadPaths {
  std::string dir;
  std::string state;
  std::string batch_script;
  std::string log;
  std::string archive;
  std::string report;
  std::string work;
  std::string launch;
  std::string script;
};
WorkloadPaths PathsFor(std::string_view root, std::string_view workload_id);

// 1..128 of [A-Za-z0-9_.-], not starting with '.' or '-'.
bool IsSafeWorkloadId(std::string_view id);
// A Slurm node name: 1..64 of [A-Za-z0-9_.-], not starting with '-'.
bool IsSafeNodeName(std::string_view node);

// A tenant's Slurm account: its id, which must be 1..64 of [a-z0-9_-]
// (Atrium's ids are lower-case base32 with a prefix; Slurm folds account
// names to lower case, so an upper-case id could collide and is refused).
Result<std::string> AccountForTenant(std::string_view tenant_id);
// The unprivileged Unix user a tenant's workloads run as: `prefix` + the
// tenant id; a valid user name ([a-z_][a-z0-9_-]*, at most 32 bytes).
Result<std::string> UnixUserForTenant(std::string_view prefix, std::string_view tenant_id);
// The QOS of a priority class: interactive | batch | preemptible ("" =
// batch). InvalidArgument for any other.
Result<std::string> QosForPriority(std::string_view priority);

// Everything the submission needs besides the spec.
struct SubmitContext {
  std::string sbatch = "sbatch";
  WorkloadPaths paths;
  std::string account;
  std::string qos;
  std::string user;       // --uid
  std::string group;      // --gid: without it the job keeps root's group
  std::string partition;  // "" = the cluster's default
  // Each GPU of the node is its own GRES type `idx<N>` (deploy/slurm
  // gres.conf), so the exact indices the scheduler chose can be asked for;
  // otherwise only a count can (`--gres=gpu:N`) and Slurm picks which.
  bool gpu_types_are_indices = true;
};

// `sbatch --parsable ...` for the spec. Whole GPUs are `--gres=gpu:idxN:1`
// each; a time-sliced share of GPU N is `--gres=shard:idxN:<milli>` (1000
// shards per GPU). InvalidArgument (naming the field) for a workload id or
// node outside the alphabets above, a GPU index out of range or granted
// twice, a MIG instance (docs/slurm.md says why), a share outside 1..999
// milli or beside other GPUs, negative resources or time limit.
Result<Argv> BuildSbatchArgv(const exec::LaunchSpec& spec, const SubmitContext& context);

// The launch file: NUL-terminated entries the batch script runs as one argv:
//   /usr/bin/env -- PATH=... HOME=<work> <spec env...> <share env...> <command...>
// where the command is spec.argv, or `/bin/sh <script name> spec.argv...`
// when the spec has a script. `wrapper` (e.g. a sandbox's argv) goes in
// front when not empty. InvalidArgument for an empty command, a NUL byte
// anywhere, an environment name that is not [A-Za-z_][A-Za-z0-9_]*, or a
// command whose first word contains '=' (env would read it as a variable).
Result<std::string> BuildLaunchFile(const exec::LaunchSpec& spec, const WorkloadPaths& paths,
                                    const Argv& wrapper = {});

// How a job whose spec has an environment template's root filesystem
// (spec.root_fs) is sandboxed on its node: the batch script execs
// bubblewrap with the same plan as the local backend's (exec::PlanSandbox):
// the template's root read-only as /, a fresh /dev with only the granted
// GPUs (and the control devices the node has), a private /tmp, the working
// directory at /work, new pid, ipc, uts and network namespaces, the tenant's
// own uid. Every path here is the node's.
struct NodeSandbox {
  std::string bwrap_path = "/usr/bin/bwrap";
  // atrium-sandbox-init, installed at this path on every node; "" = the
  // cluster cannot run templates (Start refuses them).
  std::string init_path;
  // Where the GPU device files of the gres.conf `File=` lines are.
  std::string device_dir = "/dev";
  // Bound when present on the node (bubblewrap's --dev-bind-try).
  std::vector<std::string> control_devices = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                              "nvidia-modeset"};
};

// The launch file of a spec with root_fs (same format as BuildLaunchFile):
//   /usr/bin/env -i -- <the sandbox's environment> <bubblewrap's argv>
// The environment is exactly the one the local backend gives a workload
// (the spec's, PATH, HOME=/work, TMPDIR, ATRIUM_*, CUDA_/NVIDIA_VISIBLE_
// DEVICES). The sandbox's init reports "exit N" / "signal N" on fd 3,
// which the batch script opens on paths.report. InvalidArgument (naming the
// field) for whatever exec::PlanSandbox refuses, and for a sandbox without
// an init or a uid/gid of 0.
Result<std::string> BuildSandboxedLaunchFile(const exec::LaunchSpec& spec,
                                             const WorkloadPaths& paths, const NodeSandbox& sandbox,
                                             uint32_t uid, uint32_t gid);

// The file descriptor the batch script opens on paths.report.
inline constexpr int kReportFd = 3;

// The batch script every workload is submitted with: the same text for
// all, no tenant data in it.
std::string_view BatchScript();

// `--time` from seconds: "<minutes>:<seconds>" (Slurm rounds up to minutes).
std::string SlurmTimeLimit(int64_t seconds);

// Lookups and signals; job ids are digits (ParseSbatchJobId).
Argv ScontrolShowJobArgv(std::string_view job_id);
// Every job the controller knows, in one call (ParseScontrolJobs).
Argv ScontrolShowJobsArgv();
Argv SacctJobArgv(std::string_view job_id);
// The accounting records of every one of `job_ids`, in one call.
Argv SacctJobsArgv(const std::vector<std::string>& job_ids);
Argv SacctByNameArgv(std::string_view workload_id);
Argv SqueueByNameArgv(std::string_view workload_id);
// SIGTERM (or another signal) to every process of the job, batch script
// included (--full: without it Slurm signals only srun steps).
Argv ScancelSignalArgv(std::string_view job_id, std::string_view signal);
// Ends the job: Slurm sends SIGTERM, then SIGKILL after KillWait.
Argv ScancelArgv(std::string_view job_id);

// What the backend found out about a tenant before syncing it.
struct TenantFacts {
  bool account_exists = false;
  bool association_exists = false;  // the tenant's user in its account
  bool unix_user_exists = false;
};

// The `GrpTRES=` value mirroring the scheduler's GPU limits: the "" (all
// models) limit when there is one, else the sum of the per-model ones (the
// loosest fence that still holds each; Slurm's GRES types here are GPU
// indices, not models); "gres/gpu=-1" (no limit) when there are none.
std::string GrpTresForLimits(const std::vector<std::pair<std::string, int64_t>>& limits);

// The commands that make Slurm's view of the tenant match `account`, in
// order. active: the Unix user (when `create_unix_users`), the account and
// the user's association exist, GrpTRES mirrors the limits and submissions
// are allowed (GrpSubmitJobs=-1); suspended and evicting: submissions are
// refused (GrpSubmitJobs=0) and its jobs cancelled (scancel -A); deleted:
// jobs cancelled, association and account removed (sacctmgr refuses while
// jobs are still ending; the caller retries). InvalidArgument for a tenant
// id or state it cannot map.
Result<std::vector<Argv>> PlanTenantSync(const exec::TenantAccount& account,
                                         std::string_view unix_user_prefix, bool create_unix_users,
                                         const TenantFacts& facts);

// The priority-class QOS, created once: preemptible (PreemptMode=REQUEUE,
// GraceTime = the scheduler's grace period), then batch and interactive,
// which may preempt it. `existing` = names `sacctmgr show qos` lists.
std::vector<Argv> PlanQosSetup(const std::vector<std::string>& existing, int64_t grace_s);

}  // namespace atrium::slurm
