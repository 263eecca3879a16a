// A job's states and the one table of legal transitions, each with the
// cause that takes it and the reason recorded; what the restart policy
// does when an attempt ends. Pure: the job service (job_service.h) looks
// every step up here, and tests read the table as data.
//
//   pending ──placed──▶ starting ──running──▶ running
//      │                   │                    │
//      └──────────┬────────┴────────────────────┘
//                 ▼
//   succeeded | failed (exit code, signal) | cancelled | preempted |
//   timed-out | lost
//
// failed, preempted and lost end an attempt; when the restart policy
// requeues (DecideRestart), the job goes back to pending with a new
// allocation and attempt + 1 (the job id stays). succeeded, cancelled and
// timed-out are final.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"
#include "jobs/job_spec.h"

namespace atrium::jobs {

enum class JobState {
  kPending,
  kStarting,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kPreempted,
  kTimedOut,
  kLost,
};
std::string_view StateName(JobState state);  // "pending", ..., "timed-out", "lost"
std::optional<JobState> ParseState(std::string_view name);
const std::vector<std::string>& AllJobStateNames();
// pending, starting, running: the job holds (or waits for) an allocation.
bool IsLive(JobState state);

// Why a job moves.
enum class Cause {
  kPlaced,              // the allocation runs: the backend is asked to start
  kWorkloadRunning,     // the backend reports the workload running
  kExitedOk,            // exit code 0
  kExitedWithError,     // exit code 1..255
  kKilledBySignal,      // ended by a signal nobody asked for
  kStartRefused,        // the backend refused the launch (InvalidArgument)
  kAllocationRejected,  // the scheduler refused the allocation
  kCancelled,           // the tenant cancelled; its stop ended it
  kPreempted,           // the scheduler reclaimed the allocation; its stop ended it
  kAllocationReleased,  // someone released the allocation under the job
  kTimeLimit,           // ran past its time limit; its stop ended it
  kEvicted,             // the tenant is being evicted
  kWorkloadLost,        // the backend lost it, or its node is gone
  kRequeued,            // the restart policy starts a new attempt
};
std::string_view CauseName(Cause cause);

struct TransitionRule {
  JobState from;
  Cause cause;
  JobState to;
  std::string_view reason;  // the words recorded with the event
};

// Every legal transition, once. A (state, cause) pair not here is illegal.
const std::vector<TransitionRule>& TransitionTable();

// The rule for `cause` in state `from`; FailedPrecondition naming both when
// the table has none.
Result<TransitionRule> Transition(JobState from, Cause cause);

// How an attempt's workload ended, as a cause: by the stop the service
// asked for (`stop_cause`: "cancel", "time-limit", "preemption",
// "allocation-released", "eviction"; "" = none), else by its exit.
// kLost for a lost workload. InvalidArgument for a workload not ended.
Result<Cause> CauseOfEnd(const exec::WorkloadStatus& status, std::string_view stop_cause);

// What ends the attempt when the service stops it for `stop_cause`.
std::optional<Cause> CauseOfStop(std::string_view stop_cause);

// Whether an attempt that ended by `cause` is requeued, given the policy
// and the requeues already made. on-failure: a non-zero exit, a signal
// nobody asked for, a lost workload; requeue-on-preemption: a preemption.
// Never after a refusal (the allocation or the launch would be refused
// again), a cancel, a time limit or an eviction.
bool DecideRestart(const RestartPolicy& policy, Cause cause, int64_t restarts_so_far);

}  // namespace atrium::jobs
