#include "jobs/job_state.h"

namespace atrium::jobs {
namespace {

constexpr JobState kAllStates[] = {
    JobState::kPending,   JobState::kStarting, JobState::kRunning,
    JobState::kSucceeded, JobState::kFailed,   JobState::kCancelled,
    JobState::kPreempted, JobState::kTimedOut, JobState::kLost,
};

using S = JobState;
using C = Cause;

std::vector<TransitionRule> BuildTable() {
  std::vector<TransitionRule> t = {
      {S::kPending, C::kPlaced, S::kStarting, "the allocation is placed; starting the workload"},
      {S::kPending, C::kAllocationRejected, S::kFailed, "the scheduler rejected the allocation"},
      {S::kPending, C::kCancelled, S::kCancelled, "cancelled before it started"},
      {S::kPending, C::kPreempted, S::kPreempted, "the allocation was preempted before start"},
      {S::kPending, C::kAllocationReleased, S::kCancelled,
       "the allocation was released before start"},
      {S::kPending, C::kEvicted, S::kCancelled, "the tenant is being evicted"},
      {S::kPending, C::kStartRefused, S::kFailed, "the workload cannot be launched"},
      {S::kStarting, C::kWorkloadRunning, S::kRunning, "the workload runs"},
      {S::kStarting, C::kStartRefused, S::kFailed, "the backend refused to start the workload"},
  };
  // What can end a started attempt, whether or not it was seen running.
  for (S from : {S::kStarting, S::kRunning}) {
    t.push_back({from, C::kExitedOk, S::kSucceeded, "the workload exited with code 0"});
    t.push_back({from, C::kExitedWithError, S::kFailed, "the workload exited with an error"});
    t.push_back({from, C::kKilledBySignal, S::kFailed, "the workload was killed by a signal"});
    t.push_back({from, C::kCancelled, S::kCancelled, "cancelled; the workload was stopped"});
    t.push_back({from, C::kPreempted, S::kPreempted,
                 "the scheduler reclaimed the allocation; the workload was stopped"});
    t.push_back({from, C::kAllocationReleased, S::kCancelled,
                 "the allocation was released; the workload was stopped"});
    t.push_back(
        {from, C::kTimeLimit, S::kTimedOut, "the time limit passed; the workload was stopped"});
    t.push_back({from, C::kEvicted, S::kCancelled, "the tenant is being evicted"});
    t.push_back({from, C::kWorkloadLost, S::kLost, "the backend lost the workload or its node"});
  }
  for (S from : {S::kFailed, S::kPreempted, S::kLost}) {
    t.push_back({from, C::kRequeued, S::kPending, "requeued by the restart policy"});
  }
  return t;
}

}  // namespace

std::string_view StateName(JobState state) {
  switch (state) {
    case S::kPending:
      return "pending";
    case S::kStarting:
      return "starting";
    case S::kRunning:
      return "running";
    case S::kSucceeded:
      return "succeeded";
    case S::kFailed:
      return "failed";
    case S::kCancelled:
      return "cancelled";
    case S::kPreempted:
      return "preempted";
    case S::kTimedOut:
      return "timed-out";
    case S::kLost:
      return "lost";
  }
  return "lost";
}

std::optional<JobState> ParseState(std::string_view name) {
  for (JobState s : kAllStates) {
    if (StateName(s) == name) return s;
  }
  return std::nullopt;
}

const std::vector<std::string>& AllJobStateNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (JobState s : kAllStates) v.emplace_back(StateName(s));
    return v;
  }();
  return names;
}

bool IsLive(JobState state) {
  return state == S::kPending || state == S::kStarting || state == S::kRunning;
}

std::string_view CauseName(Cause cause) {
  switch (cause) {
    case C::kPlaced:
      return "placed";
    case C::kWorkloadRunning:
      return "workload-running";
    case C::kExitedOk:
      return "exited-ok";
    case C::kExitedWithError:
      return "exited-with-error";
    case C::kKilledBySignal:
      return "killed-by-signal";
    case C::kStartRefused:
      return "start-refused";
    case C::kAllocationRejected:
      return "allocation-rejected";
    case C::kCancelled:
      return "cancelled";
    case C::kPreempted:
      return "preempted";
    case C::kAllocationReleased:
      return "allocation-released";
    case C::kTimeLimit:
      return "time-limit";
    case C::kEvicted:
      return "evicted";
    case C::kWorkloadLost:
      return "workload-lost";
    case C::kRequeued:
      return "requeued";
  }
  return "unknown";
}

const std::vector<TransitionRule>& TransitionTable() {
  static const std::vector<TransitionRule> table = BuildTable();
  return table;
}

Result<TransitionRule> Transition(JobState from, Cause cause) {
  for (const TransitionRule& rule : TransitionTable()) {
    if (rule.from == from && rule.cause == cause) return rule;
  }
  return Error::FailedPrecondition("a " + std::string(StateName(from)) + " job cannot move on " +
                                   std::string(CauseName(cause)));
}

std::optional<Cause> CauseOfStop(std::string_view stop_cause) {
  if (stop_cause == "cancel") return C::kCancelled;
  if (stop_cause == "time-limit") return C::kTimeLimit;
  if (stop_cause == "preemption") return C::kPreempted;
  if (stop_cause == "allocation-released") return C::kAllocationReleased;
  if (stop_cause == "eviction") return C::kEvicted;
  return std::nullopt;
}

Result<Cause> CauseOfEnd(const exec::WorkloadStatus& status, std::string_view stop_cause) {
  if (status.phase == exec::WorkloadPhase::kLost) return C::kWorkloadLost;
  if (status.phase != exec::WorkloadPhase::kExited) {
    return Error::InvalidArgument("workload " + status.workload_id + " has not ended");
  }
  // A workload the service stopped ends as the stop meant, whatever signal
  // or code its SIGTERM produced.
  if (auto stopped = CauseOfStop(stop_cause)) return *stopped;
  if (status.signal != 0) return C::kKilledBySignal;
  return status.exit_code == 0 ? C::kExitedOk : C::kExitedWithError;
}

bool DecideRestart(const RestartPolicy& policy, Cause cause, int64_t restarts_so_far) {
  if (restarts_so_far >= policy.max_restarts) return false;
  switch (policy.kind) {
    case RestartPolicyKind::kNever:
      return false;
    case RestartPolicyKind::kOnFailure:
      return cause == C::kExitedWithError || cause == C::kKilledBySignal ||
             cause == C::kWorkloadLost;
    case RestartPolicyKind::kRequeueOnPreemption:
      return cause == C::kPreempted;
  }
  return false;
}

}  // namespace atrium::jobs
