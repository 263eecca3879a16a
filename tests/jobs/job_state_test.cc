// The job state machine as data: every legal transition is listed here with
// the state it reaches, and every pair not listed must be refused.
#include "jobs/job_state.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace atrium::jobs {
namespace {

using S = JobState;
using C = Cause;

struct Expected {
  S from;
  C cause;
  S to;
};

// The lifecycle the issue describes: pending → starting → running → an end;
// failed, preempted and lost may go back to pending when requeued.
const Expected kLegal[] = {
    {S::kPending, C::kPlaced, S::kStarting},
    {S::kPending, C::kAllocationRejected, S::kFailed},
    {S::kPending, C::kCancelled, S::kCancelled},
    {S::kPending, C::kPreempted, S::kPreempted},
    {S::kPending, C::kAllocationReleased, S::kCancelled},
    {S::kPending, C::kEvicted, S::kCancelled},
    {S::kPending, C::kStartRefused, S::kFailed},
    {S::kStarting, C::kWorkloadRunning, S::kRunning},
    {S::kStarting, C::kStartRefused, S::kFailed},
    {S::kStarting, C::kExitedOk, S::kSucceeded},
    {S::kStarting, C::kExitedWithError, S::kFailed},
    {S::kStarting, C::kKilledBySignal, S::kFailed},
    {S::kStarting, C::kCancelled, S::kCancelled},
    {S::kStarting, C::kPreempted, S::kPreempted},
    {S::kStarting, C::kAllocationReleased, S::kCancelled},
    {S::kStarting, C::kTimeLimit, S::kTimedOut},
    {S::kStarting, C::kEvicted, S::kCancelled},
    {S::kStarting, C::kWorkloadLost, S::kLost},
    {S::kRunning, C::kExitedOk, S::kSucceeded},
    {S::kRunning, C::kExitedWithError, S::kFailed},
    {S::kRunning, C::kKilledBySignal, S::kFailed},
    {S::kRunning, C::kCancelled, S::kCancelled},
    {S::kRunning, C::kPreempted, S::kPreempted},
    {S::kRunning, C::kAllocationReleased, S::kCancelled},
    {S::kRunning, C::kTimeLimit, S::kTimedOut},
    {S::kRunning, C::kEvicted, S::kCancelled},
    {S::kRunning, C::kWorkloadLost, S::kLost},
    {S::kFailed, C::kRequeued, S::kPending},
    {S::kPreempted, C::kRequeued, S::kPending},
    {S::kLost, C::kRequeued, S::kPending},
};

TEST(JobStateTest, TheTableHoldsExactlyTheLegalTransitions) {
  std::set<std::tuple<int, int>> legal;
  for (const Expected& e : kLegal) {
    auto rule = Transition(e.from, e.cause);
    ASSERT_TRUE(rule.has_value()) << StateName(e.from) << " on " << CauseName(e.cause);
    EXPECT_EQ(rule->to, e.to) << StateName(e.from) << " on " << CauseName(e.cause);
    EXPECT_FALSE(rule->reason.empty());
    legal.insert({static_cast<int>(e.from), static_cast<int>(e.cause)});
  }
  EXPECT_EQ(TransitionTable().size(), std::size(kLegal));
  for (int s = 0; s <= static_cast<int>(S::kLost); ++s) {
    for (int c = 0; c <= static_cast<int>(C::kRequeued); ++c) {
      if (legal.contains({s, c})) continue;
      auto rule = Transition(static_cast<S>(s), static_cast<C>(c));
      ASSERT_FALSE(rule.has_value())
          << StateName(static_cast<S>(s)) << " on " << CauseName(static_cast<C>(c));
      EXPECT_EQ(rule.error().code, ErrorCode::kFailedPrecondition);
    }
  }
}

TEST(JobStateTest, FinalStatesNeverMove) {
  for (S final_state : {S::kSucceeded, S::kCancelled, S::kTimedOut}) {
    for (const TransitionRule& rule : TransitionTable()) EXPECT_NE(rule.from, final_state);
  }
}

TEST(JobStateTest, NamesRoundTrip) {
  for (const std::string& name : AllJobStateNames()) {
    auto s = ParseState(name);
    ASSERT_TRUE(s.has_value()) << name;
    EXPECT_EQ(StateName(*s), name);
  }
  EXPECT_EQ(AllJobStateNames().size(), 9u);
  EXPECT_FALSE(ParseState("timed_out").has_value());
  EXPECT_TRUE(IsLive(S::kPending) && IsLive(S::kStarting) && IsLive(S::kRunning));
  EXPECT_FALSE(IsLive(S::kPreempted));
}

exec::WorkloadStatus Ended(int code, int signal) {
  exec::WorkloadStatus s;
  s.workload_id = "job_x.1";
  s.phase = exec::WorkloadPhase::kExited;
  s.exit_code = code;
  s.signal = signal;
  return s;
}

TEST(JobStateTest, AnEndIsTheStopThatCausedItElseTheExit) {
  struct Case {
    exec::WorkloadStatus status;
    std::string stop;
    C cause;
  } cases[] = {
      {Ended(0, 0), "", C::kExitedOk},
      {Ended(3, 0), "", C::kExitedWithError},
      {Ended(-1, 9), "", C::kKilledBySignal},
      // SIGTERM from our own stop is the stop's end, not a failure.
      {Ended(-1, 15), "cancel", C::kCancelled},
      {Ended(143, 0), "time-limit", C::kTimeLimit},
      {Ended(0, 0), "preemption", C::kPreempted},
      {Ended(-1, 9), "allocation-released", C::kAllocationReleased},
      {Ended(-1, 9), "eviction", C::kEvicted},
  };
  for (const Case& c : cases) {
    auto cause = CauseOfEnd(c.status, c.stop);
    ASSERT_TRUE(cause.has_value());
    EXPECT_EQ(*cause, c.cause) << c.stop << " code " << c.status.exit_code;
  }
  exec::WorkloadStatus lost;
  lost.phase = exec::WorkloadPhase::kLost;
  EXPECT_EQ(CauseOfEnd(lost, "cancel").value(), C::kWorkloadLost);
  exec::WorkloadStatus running;
  running.phase = exec::WorkloadPhase::kRunning;
  EXPECT_FALSE(CauseOfEnd(running, "").has_value());
}

TEST(JobStateTest, RestartPolicyAsData) {
  using K = RestartPolicyKind;
  struct Case {
    K kind;
    int64_t max;
    C cause;
    int64_t so_far;
    bool requeue;
  } cases[] = {
      {K::kNever, 0, C::kExitedWithError, 0, false},
      {K::kNever, 0, C::kPreempted, 0, false},
      {K::kOnFailure, 2, C::kExitedWithError, 0, true},
      {K::kOnFailure, 2, C::kKilledBySignal, 1, true},
      {K::kOnFailure, 2, C::kWorkloadLost, 1, true},
      {K::kOnFailure, 2, C::kExitedWithError, 2, false},  // the count is spent
      {K::kOnFailure, 2, C::kPreempted, 0, false},
      {K::kOnFailure, 2, C::kTimeLimit, 0, false},
      {K::kOnFailure, 2, C::kStartRefused, 0, false},
      {K::kOnFailure, 2, C::kAllocationRejected, 0, false},
      {K::kOnFailure, 2, C::kCancelled, 0, false},
      {K::kRequeueOnPreemption, 3, C::kPreempted, 2, true},
      {K::kRequeueOnPreemption, 3, C::kPreempted, 3, false},
      {K::kRequeueOnPreemption, 3, C::kExitedWithError, 0, false},
      {K::kRequeueOnPreemption, 3, C::kEvicted, 0, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DecideRestart({c.kind, c.max}, c.cause, c.so_far), c.requeue)
        << RestartPolicyName(c.kind) << " " << CauseName(c.cause) << " after " << c.so_far;
  }
}

}  // namespace
}  // namespace atrium::jobs
