// What the Slurm 22.05 CLIs print, read into records. Pure: the backend's
// shell runs the commands (with SLURM_TIME_FORMAT=%s, so every time is
// seconds since the epoch) and hands their output here; the unit tests feed
// captures of the real commands (tests/slurm/slurm_text_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"

namespace atrium::slurm {

// One Slurm job as `scontrol show job -d -o` or `sacct -P` report it.
struct SlurmJobRecord {
  std::string job_id;  // "24000003"; a sacct step line keeps its ".batch"
  std::string name;    // the job's name: Atrium's workload id
  std::string state;   // first word: "RUNNING", "CANCELLED" (not "CANCELLED by 0")
  std::string reason;  // scontrol only: "Resources", "NonZeroExitCode", ...
  int exit_code = 0;   // ExitCode=<code>:<signal>
  int exit_signal = 0;
  int64_t start_s = -1;    // -1 = not started ("Unknown", or a pending job's forecast)
  int64_t end_s = -1;      // -1 = not ended (or a running job's forecast)
  int64_t elapsed_s = -1;  // sacct ElapsedRaw; -1 when not given
  // The GPU indices on the node (scontrol -d: "GRES=gpu:idx1:1(IDX:1)").
  std::vector<int> gpu_indices;
  int64_t gpus = 0;  // gres/gpu in TRES (scontrol) or AllocTRES (sacct)
  std::string account;
  int restarts = 0;
};

// The job id from `sbatch --parsable`: "<id>" or "<id>;<cluster>".
// InvalidArgument for anything else.
Result<std::string> ParseSbatchJobId(std::string_view out);

// Every job in `scontrol show job -d -o` output (one line per job).
// InvalidArgument for a line without JobId=.
Result<std::vector<SlurmJobRecord>> ParseScontrolJobs(std::string_view out);

// The fields `sacct -n -P` must be asked for, in this order, for ParseSacct.
inline constexpr char kSacctFormat[] =
    "JobID,JobName,State,ExitCode,Start,End,ElapsedRaw,AllocTRES,Account";

// Every line of `sacct -n -P --format=<kSacctFormat>`, steps included
// ("123.batch"). InvalidArgument for a line with another field count.
Result<std::vector<SlurmJobRecord>> ParseSacct(std::string_view out);

// The records by job id, the first of each id kept; a sacct step line
// ("123.batch") is kept apart from its job's ("123").
std::map<std::string, SlurmJobRecord> JobsById(std::vector<SlurmJobRecord> records);

// GPU indices in a GRES detail: "gpu:2(IDX:0-1)", "gpu:idx1:1(IDX:1),
// gpu:idx3:1(IDX:3)", "gpu:3(IDX:0,2-3)"; "" and "(null)" give none.
// InvalidArgument for a malformed IDX list.
Result<std::vector<int>> ParseGresIndices(std::string_view gres);

// The gres/gpu count in a TRES list ("billing=11,cpu=1,gres/gpu=2,node=1");
// 0 when absent.
int64_t GpuCountInTres(std::string_view tres);

// Non-empty trimmed lines (sacctmgr -n -P lists, squeue -h -o %A).
std::vector<std::string> NonEmptyLines(std::string_view out);

// Where a Slurm job state puts a workload: PENDING/REQUEUED/CONFIGURING are
// starting; RUNNING, COMPLETING (processes still being reaped), SUSPENDED,
// STOPPED, SIGNALING are running; NODE_FAIL, BOOT_FAIL and REVOKED are lost
// (its node is gone); every other ended state is exited.
exec::WorkloadPhase PhaseOfSlurmState(std::string_view state);

// The workload's status from its Slurm job. For an exited job `signal`
// is ExitCode's signal when non-zero; a job CANCELLED, PREEMPTED or
// TIMEOUT with no signal recorded ended by Slurm's SIGTERM (15).
exec::WorkloadStatus StatusFromRecord(const std::string& workload_id, const SlurmJobRecord& job);

// A sandboxed job (root_fs) exits as bubblewrap does: a command killed by
// signal N makes it exit 128+N. Its init's report ("signal N\n", the
// workload's `report` file) tells that apart from a plain `exit 128+N`:
// when the report says signal N and the exit code is 128+N, `status`
// becomes "killed by N". Anything else leaves it as it is.
void ApplySandboxReport(std::string_view report, exec::WorkloadStatus& status);

// GPU-seconds a finished job held according to Slurm's accounting: the
// allocation line of job `job_id` (not its steps), AllocTRES gres/gpu ×
// ElapsedRaw. The metering cross-check; 0 when sacct has none. By id, not
// name: slurmdbd first records a job's name as "allocation".
int64_t GpuSecondsFromSacct(const std::vector<SlurmJobRecord>& records, std::string_view job_id);

// What `scontrol show config` says the cluster confines; an empty list =
// fully confined (cgroup proctrack and tasks for devices, job_container/
// tmpfs for a private /tmp), else the missing mechanisms in words.
std::vector<std::string> MissingConfinement(std::string_view show_config);

}  // namespace atrium::slurm
