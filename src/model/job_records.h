// The job rows the store keeps (src/jobs owns their rules). Data only.
#pragma once

#include <cstdint>
#include <string>

namespace atrium {

// One job: a tenant's workload, run once per attempt on the allocation the
// scheduler placed for that attempt.
struct JobRecord {
  std::string id;  // job_...
  std::string tenant_id;
  std::string project;
  std::string name;
  std::string created_by;  // user id of the submitter
  // pending | starting | running | succeeded | failed | cancelled |
  // preempted | timed-out | lost (jobs::JobState).
  std::string state;
  int64_t attempt = 1;        // 1, 2, ...: a requeue starts the next
  int64_t restarts = 0;       // requeues so far (bounded by the restart policy)
  std::string allocation_id;  // this attempt's; chosen before it is submitted
  // The validated spec as canonical JSON (jobs::JobSpecJson): what a requeue
  // submits again and what an idempotent resubmission is compared with.
  std::string spec;
  std::string idempotency_key;  // "" = none; unique per tenant otherwise
  int64_t exit_code = -1;       // of the last attempt that exited; -1 otherwise
  int64_t signal = 0;
  std::string reason;  // words of the latest transition
  // A stop the service asked the backend for and why (cancel, time-limit,
  // preemption, allocation-released, eviction; "" = none), who asked, and
  // when its grace ends. Persisted so a restarted service ends the attempt
  // in the state the stop meant, not as a failure by SIGTERM.
  std::string stop_cause;
  std::string stop_by;
  int64_t stop_deadline_ms = -1;
  int64_t created_at = 0;
  int64_t started_ms = -1;  // this attempt began running; -1 not yet
  int64_t ended_ms = -1;    // the job ended; -1 while it lives
  int64_t updated_at = 0;

  // The backend's id of this attempt's workload.
  std::string workload_id() const { return id + "." + std::to_string(attempt); }

  bool operator==(const JobRecord&) const = default;
};

// One attempt's run: when its workload started running and when it ended,
// on which allocation. Kept beside the job row, which shows only its current
// attempt, so the GPU meter (src/metering) can record what every attempt
// ran, a requeued one included; kept when the tenant is evicted (it holds
// no command or environment, and its GPU records may still be due).
struct JobRunRecord {
  std::string job_id;
  int64_t attempt = 1;
  std::string tenant_id;
  std::string project;
  std::string allocation_id;
  int64_t started_ms = -1;
  int64_t ended_ms = -1;  // -1 while it runs
  int64_t updated_at = 0;

  // "<job id>.<attempt>": the backend's workload id (on Slurm, the job
  // name `sacct --name` finds) and the GPU usage records' subject id.
  std::string workload_id() const { return job_id + "." + std::to_string(attempt); }

  bool operator==(const JobRunRecord&) const = default;
};

// One transition of a job, appended and never changed.
struct JobEventRecord {
  std::string job_id;
  std::string tenant_id;
  int64_t seq = 0;  // 1, 2, ... per job, assigned by the store
  int64_t time = 0;
  int64_t attempt = 1;
  std::string from_state;  // "" for the submission
  std::string to_state;
  std::string reason;
  std::string actor;  // "user:<id>", "key:<id>" or "system:jobs"

  bool operator==(const JobEventRecord&) const = default;
};

// An archive a tenant uploaded for its jobs' working directories (src/jobs
// archive_service.h). The bytes live on the control plane's disk; the row
// says whose they are and what they were.
struct JobArchiveRecord {
  std::string id;  // arc_...
  std::string tenant_id;
  std::string name;            // the uploader's label ("" = none)
  std::string sha256;          // hex, of the bytes uploaded
  int64_t size_bytes = 0;      // uploaded; what a job declares as archive_bytes
  int64_t unpacked_bytes = 0;  // its regular files' sizes, summed
  int64_t entries = 0;
  std::string created_by;  // user id of the uploader
  int64_t created_at = 0;

  bool operator==(const JobArchiveRecord&) const = default;
};

}  // namespace atrium
