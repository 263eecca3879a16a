// The job service over a real store and scheduling service, with the fake
// backend and a ManualClock (no reconcile thread: Tick is called by hand;
// two tests call the service from threads of their own). Every
// transition, requeue on preemption and on failure, the time limit, the
// cancel grace, restart reconcile, idempotent submission and another
// tenant's refusal.
#include "jobs/job_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "jobs/fake_backend.h"
#include "metering/gpu_meter.h"
#include "store/test_databases.h"
#include "support/store_rows.h"

namespace atrium::jobs {
namespace {

using testdb::Backend;
using testdb::BackendName;
using testing::FakeBackend;

// One node of eight H100s: a preemption always hits the job.
constexpr char kFleet[] = "1xH100-80GBx8";

class JobServiceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    scheduling::SchedulingOptions so;
    so.fleet_spec = kFleet;
    so.tick_ms = 0;
    so.grace_ms = 10'000;
    scheduling_ = std::make_unique<scheduling::SchedulingService>(*store_, clock_, so);
    ASSERT_TRUE(scheduling_->Start().has_value());
    for (const auto& [id, name] : {std::pair{"tn_a", "acme"}, std::pair{"tn_b", "bolt"}}) {
      const Tenant t = testing_rows::ActiveTenant(id, name, clock_.NowMillis());
      ASSERT_TRUE(store_->CreateTenant(t).has_value());
      scheduling_->TenantChanged(t);
    }
    // tn_a borrows (no guarantee); tn_b is guaranteed the node.
    ASSERT_TRUE(
        scheduling_->SetQuota(admin_, "tn_a", "", {"H100-80GB", "gpu", 0, 8000}).has_value());
    ASSERT_TRUE(
        scheduling_->SetQuota(admin_, "tn_b", "", {"H100-80GB", "gpu", 8000, 8000}).has_value());
    StartJobs();
  }
  void TearDown() override {
    jobs_.reset();
    scheduling_.reset();
    store_.reset();
    database_.Drop();
  }

  // A new JobService over the same store and backend: what a restart of
  // the control plane gets.
  void StartJobs(JobServiceOptions o = {}) {
    jobs_.reset();
    o.tick_ms = 0;
    o.cancel_grace_ms = 5'000;
    o.time_limit_grace_ms = 7'000;
    if (resolver_) o.resolve_environment = resolver_;
    jobs_ = std::make_unique<JobService>(*store_, *scheduling_, backend_, clock_, o);
    auto started = jobs_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().message;
  }

  static JobSpec Spec(int gpus = 8, const std::string& priority = "preemptible",
                      const std::string& extra = "") {
    std::string body = R"({"name":"train","command":"python3","args":["train.py"],
        "resources":{"kind":"gpu","model":"H100-80GB","gpus":)" +
                       std::to_string(gpus) + R"(},"priority":")" + priority + "\"" + extra + "}";
    auto spec = ReadJobSpec(Json::parse(body));
    EXPECT_TRUE(spec.has_value()) << spec.error().message;
    return spec.has_value() ? *spec : JobSpec{};
  }

  JobRecord Submit(const std::string& tenant, const JobSpec& spec, const std::string& key = "") {
    auto s = jobs_->Submit(user_, tenant, "usr_1", spec, key);
    EXPECT_TRUE(s.has_value()) << s.error().message;
    return s.has_value() ? s->job : JobRecord{};
  }

  JobRecord Row(const JobRecord& j) {
    auto r = store_->GetJob(TenantScope::Of(j.tenant_id), j.id);
    EXPECT_TRUE(r.has_value());
    return r.has_value() ? *r : JobRecord{};
  }

  std::string AllocationState(const std::string& tenant, const std::string& id) {
    auto a = store_->GetAllocation(TenantScope::Of(tenant), id);
    return a.has_value() ? a->state : "(none)";
  }

  // The job's transitions as "from>to" (by actor when `with_actor`).
  std::vector<std::string> Events(const JobRecord& j, bool with_actor = false) {
    std::vector<std::string> out;
    auto page = store_->ListJobEvents(TenantScope::Of(j.tenant_id), j.id, {.limit = 1000});
    EXPECT_TRUE(page.has_value());
    for (const auto& e : page->items) {
      out.push_back(e.from_state + ">" + e.to_state + (with_actor ? " " + e.actor : ""));
    }
    return out;
  }

  std::vector<std::string> JobAudit(const std::string& tenant) {
    std::vector<std::string> out;
    auto page = store_->ListAudit(tenant, {.limit = 1000});
    EXPECT_TRUE(page.has_value());
    for (const auto& r : page->items) {
      if (r.action.rfind("jobs.", 0) == 0) out.push_back(r.action + " " + r.actor);
    }
    return out;
  }

  void Tick() {
    auto s = jobs_->Tick();
    EXPECT_TRUE(s.has_value()) << s.error().message;
  }

  testdb::TestDatabase database_;
  ManualClock clock_{1'700'000'000'000};
  FakeBackend backend_{clock_};
  std::unique_ptr<Store> store_;
  std::unique_ptr<scheduling::SchedulingService> scheduling_;
  std::unique_ptr<JobService> jobs_;
  EnvironmentResolver resolver_;
  RequestOrigin admin_{
      .actor = "user:usr_op", .actor_role = "platform-admin", .request_id = "", .source = ""};
  RequestOrigin user_{
      .actor = "user:usr_1", .actor_role = "tenant-member", .request_id = "req-1", .source = ""};
};

TEST_P(JobServiceTest, AJobRunsOnItsGrantAndSucceeds) {
  JobRecord j = Submit("tn_a", Spec(2));
  EXPECT_EQ(j.state, "running");
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "running");
  FakeBackend::Workload w = backend_.Get(j.workload_id());
  EXPECT_EQ(w.spec.workload_id, j.id + ".1");
  EXPECT_EQ(w.spec.gpus.size(), 2u);
  EXPECT_EQ(w.spec.argv, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(w.spec.tenant_id, "tn_a");
  EXPECT_FALSE(jobs_->WorkloadsGone(j.allocation_id));

  clock_.AdvanceMillis(5'000);
  backend_.Exit(j.workload_id(), 0);
  Tick();
  JobRecord done = Row(j);
  EXPECT_EQ(done.state, "succeeded");
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(done.ended_ms, clock_.NowMillis());
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");
  EXPECT_TRUE(jobs_->WorkloadsGone(j.allocation_id));
  EXPECT_EQ(Events(done), (std::vector<std::string>{">pending", "pending>starting",
                                                    "starting>running", "running>succeeded"}));
  EXPECT_EQ(JobAudit("tn_a"),
            (std::vector<std::string>{"jobs.submitted user:usr_1", "jobs.starting system:jobs",
                                      "jobs.running system:jobs", "jobs.succeeded system:jobs"}));
  // Nothing moves a finished job.
  Tick();
  EXPECT_EQ(Events(done).size(), 4u);
  EXPECT_EQ(jobs_->Cancel(user_, "tn_a", j.id).error().code, ErrorCode::kFailedPrecondition);
}

// A slow backend call holds up its own job only: while one Start hangs,
// another tenant submits, cancels and lists its jobs, and a Tick passes
// over the job being started.
TEST_P(JobServiceTest, ASlowStartHoldsUpNoOtherRequest) {
  using std::chrono_literals::operator""s;
  backend_.HoldNextStart();
  auto slow = std::async(std::launch::async,
                         [&] { return jobs_->Submit(user_, "tn_b", "usr_1", Spec(2, "batch")); });
  ASSERT_TRUE(backend_.WaitForHeldStart(10s));
  auto others = std::async(std::launch::async, [&] {
    JobRecord mine = Submit("tn_a", Spec(2));
    EXPECT_EQ(mine.state, "running");
    auto cancelled = jobs_->Cancel(user_, "tn_a", mine.id);
    EXPECT_TRUE(cancelled.has_value());
    auto listed = store_->ListJobs(TenantScope::Of("tn_b"), {}, {});
    EXPECT_TRUE(listed.has_value() && listed->items.size() == 1u);
    Tick();
    return listed.has_value() ? listed->items.front() : JobRecord{};
  });
  const bool answered = others.wait_for(10s) == std::future_status::ready;
  backend_.ReleaseStart();
  EXPECT_TRUE(answered) << "requests about other jobs waited for a slow Start";
  EXPECT_EQ(others.get().state, "pending");  // the slow one, seen while it started
  auto started = slow.get();
  ASSERT_TRUE(started.has_value()) << started.error().message;
  EXPECT_EQ(started->job.state, "running");
  EXPECT_EQ(Events(started->job),
            (std::vector<std::string>{">pending", "pending>starting", "starting>running"}));
  EXPECT_EQ(backend_.Get(started->job.workload_id()).starts, 1);
}

// A cancel that arrives while the job is being started waits for that
// job's start, then stops what was started.
TEST_P(JobServiceTest, ACancelDuringAStartStopsWhatWasStarted) {
  using std::chrono_literals::operator""s;
  backend_.HoldNextStart();
  auto slow = std::async(std::launch::async,
                         [&] { return jobs_->Submit(user_, "tn_b", "usr_1", Spec(2, "batch")); });
  ASSERT_TRUE(backend_.WaitForHeldStart(10s));
  auto page = store_->ListJobs(TenantScope::Of("tn_b"), {}, {});
  ASSERT_TRUE(page.has_value() && page->items.size() == 1u);
  const JobRecord j = page->items.front();
  auto cancel = std::async(std::launch::async, [&] { return jobs_->Cancel(user_, "tn_b", j.id); });
  EXPECT_EQ(cancel.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  backend_.ReleaseStart();
  ASSERT_TRUE(slow.get().has_value());
  auto cancelled = cancel.get();
  ASSERT_TRUE(cancelled.has_value()) << cancelled.error().message;
  EXPECT_EQ(cancelled->stop_cause, "cancel");
  EXPECT_EQ(backend_.Get(j.workload_id()).stop_graces, std::vector<int64_t>{5'000});
  Tick();
  EXPECT_EQ(Row(j).state, "cancelled");
}

TEST_P(JobServiceTest, StartingUntilTheBackendRunsItThenFailsWithItsCodeOrSignal) {
  backend_.set_start_running(false);
  JobRecord j = Submit("tn_a", Spec(1));
  EXPECT_EQ(j.state, "starting");
  backend_.Run(j.workload_id());
  Tick();
  EXPECT_EQ(Row(j).state, "running");
  backend_.Exit(j.workload_id(), 3);
  Tick();
  EXPECT_EQ(Row(j).state, "failed");
  EXPECT_EQ(Row(j).exit_code, 3);
  EXPECT_NE(Row(j).reason.find("exit code 3"), std::string::npos);

  backend_.set_start_running(true);
  JobRecord k = Submit("tn_a", Spec(1));
  backend_.Crash(k.workload_id(), 11);
  Tick();
  EXPECT_EQ(Row(k).state, "failed");
  EXPECT_EQ(Row(k).signal, 11);
  EXPECT_EQ(AllocationState("tn_a", k.allocation_id), "released");
}

// Regression: a workload that started and ended between two looks (a short
// job on Slurm) went starting -> succeeded with no start time, so its
// start-to-end, what per-job GPU time is billed on, was lost.
TEST_P(JobServiceTest, AWorkloadThatRanBetweenTwoTicksKeepsTheBackendsStartTime) {
  backend_.set_start_running(false);
  JobRecord j = Submit("tn_a", Spec(1));
  ASSERT_EQ(j.state, "starting");
  clock_.AdvanceMillis(500);
  backend_.Run(j.workload_id());
  const int64_t started = clock_.NowMillis();
  clock_.AdvanceMillis(300);
  backend_.Exit(j.workload_id(), 0);
  clock_.AdvanceMillis(200);
  Tick();
  JobRecord done = Row(j);
  EXPECT_EQ(done.state, "succeeded");
  EXPECT_EQ(done.started_ms, started);
  EXPECT_EQ(done.ended_ms, started + 300);
}

TEST_P(JobServiceTest, OnFailureRequeuesUntilTheCountIsSpent) {
  JobRecord j =
      Submit("tn_a", Spec(1, "preemptible", R"(,"restart_policy":"on-failure","max_restarts":1)"));
  const std::string first_alloc = j.allocation_id;
  backend_.Exit(j.workload_id(), 1);
  Tick();
  JobRecord second = Row(j);
  EXPECT_EQ(second.attempt, 2);
  EXPECT_EQ(second.id, j.id);
  EXPECT_NE(second.allocation_id, first_alloc);
  EXPECT_EQ(AllocationState("tn_a", first_alloc), "released");
  Tick();  // the new allocation is placed and started
  EXPECT_EQ(Row(j).state, "running");
  EXPECT_TRUE(backend_.Knows(j.id + ".2"));
  backend_.Exit(j.id + ".2", 1);
  Tick();
  EXPECT_EQ(Row(j).state, "failed");  // one restart was allowed
  EXPECT_EQ(Row(j).attempt, 2);
  EXPECT_EQ(Events(j),
            (std::vector<std::string>{">pending", "pending>starting", "starting>running",
                                      "running>failed", "failed>pending", "pending>starting",
                                      "starting>running", "running>failed"}));
}

TEST_P(JobServiceTest, APreemptedJobStopsWithTheSchedulersGraceAndIsRequeued) {
  JobRecord j =
      Submit("tn_a", Spec(8, "preemptible", R"(,"restart_policy":"requeue-on-preemption")"));
  ASSERT_EQ(j.state, "running");
  backend_.IgnoreTerm(j.workload_id());
  clock_.AdvanceMillis(1'000);
  // tn_b claims its guarantee: tn_a's borrowed node is reclaimed with 10 s grace.
  auto reclaim = scheduling_->Submit(admin_, "tn_b", "usr_b", [] {
    sched::AllocationRequest r;
    r.model = "H100-80GB";
    r.gpus = 8;
    r.priority = sched::Priority::kInteractive;
    return r;
  }());
  ASSERT_TRUE(reclaim.has_value()) << reclaim.error().message;
  ASSERT_EQ(AllocationState("tn_a", j.allocation_id), "preempting");
  clock_.AdvanceMillis(2'000);
  Tick();
  EXPECT_EQ(backend_.Get(j.workload_id()).stop_graces, (std::vector<int64_t>{8'000}));
  EXPECT_EQ(Row(j).state, "running");  // still in its grace
  EXPECT_EQ(Row(j).stop_cause, "preemption");
  EXPECT_FALSE(jobs_->WorkloadsGone(j.allocation_id));

  clock_.AdvanceMillis(8'000);
  ASSERT_TRUE(scheduling_->Tick().has_value());
  Tick();
  JobRecord requeued = Row(j);
  EXPECT_EQ(requeued.state, "pending");
  EXPECT_EQ(requeued.attempt, 2);
  EXPECT_EQ(backend_.Get(j.id + ".1").status.signal, 9);
  EXPECT_EQ(AllocationState("tn_a", requeued.allocation_id), "pending");
  EXPECT_NE(Events(j).end()[-2].find("running>preempted"), std::string::npos);
  EXPECT_EQ(Events(j).back(), "preempted>pending");
  auto why = jobs_->Explain("tn_a", j.id);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("waiting for allocation " + requeued.allocation_id), std::string::npos);

  // tn_b leaves: the requeued attempt runs.
  ASSERT_TRUE(scheduling_->Release(admin_, "tn_b", reclaim->id).has_value());
  clock_.AdvanceMillis(4'000);
  Tick();
  EXPECT_EQ(Row(j).state, "running");
  EXPECT_EQ(backend_.Get(j.id + ".2").starts, 1);

  // Each attempt keeps its run, on its own allocation: the first from its
  // start to the end of its workload, the second still running.
  const exec::WorkloadStatus one = backend_.Get(j.id + ".1").status;
  const exec::WorkloadStatus two = backend_.Get(j.id + ".2").status;
  auto runs = store_->ListJobRuns(TenantScope::Of("tn_a"), j.id);
  ASSERT_TRUE(runs.has_value());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ(runs->at(0).allocation_id, j.allocation_id);
  EXPECT_EQ(runs->at(0).started_ms, one.started_ms);
  EXPECT_EQ(runs->at(0).ended_ms, one.ended_ms);
  EXPECT_EQ(runs->at(1).allocation_id, requeued.allocation_id);
  EXPECT_EQ(runs->at(1).started_ms, two.started_ms);
  EXPECT_EQ(runs->at(1).ended_ms, -1);

  // Metered: one subject per attempt, the wait between them in neither.
  clock_.AdvanceMillis(metering::kHourMs);
  metering::GpuMeterOptions mo;
  mo.interval_ms = 0;
  mo.open_lag_ms = 0;
  metering::GpuMeter meter(*store_, clock_, mo);
  meter.AddSource(std::make_unique<metering::JobSubjectSource>(*store_));
  ASSERT_TRUE(meter.Tick().has_value());
  std::map<std::string, int64_t> ran;
  auto records = store_->ListGpuUsage(TenantScope::Of("tn_a"), {.job_id = j.id}, {.limit = 1000});
  ASSERT_TRUE(records.has_value());
  for (const auto& r : records->items) ran[r.subject_id] += r.gpu_milli_ms;
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[j.id + ".1"], 8000 * (one.ended_ms - one.started_ms));
  EXPECT_EQ(ran[j.id + ".2"],
            8000 * (clock_.NowMillis() / metering::kHourMs * metering::kHourMs - two.started_ms));
}

TEST_P(JobServiceTest, AWorkloadThatRanBetweenTwoLooksKeepsItsRealStart) {
  backend_.set_start_running(false);
  JobRecord j = Submit("tn_a", Spec(1));
  ASSERT_EQ(j.state, "starting");
  clock_.AdvanceMillis(1'000);
  backend_.Run(j.workload_id());
  const int64_t started = clock_.NowMillis();
  clock_.AdvanceMillis(2'000);
  backend_.Exit(j.workload_id(), 0);
  Tick();  // never seen running
  JobRecord done = Row(j);
  EXPECT_EQ(done.state, "succeeded");
  EXPECT_EQ(done.started_ms, started);
  auto runs = store_->ListJobRuns(TenantScope::Of("tn_a"), j.id);
  ASSERT_TRUE(runs.has_value());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->at(0).started_ms, started);
  EXPECT_EQ(runs->at(0).ended_ms, started + 2'000);
}

TEST_P(JobServiceTest, ATimeLimitStopsTheJobAndKillsAfterTheGrace) {
  JobRecord j = Submit("tn_a", Spec(1, "preemptible", R"(,"time_limit_s":60)"));
  backend_.IgnoreTerm(j.workload_id());
  clock_.AdvanceMillis(59'999);
  Tick();
  EXPECT_TRUE(backend_.Get(j.workload_id()).stop_graces.empty());
  clock_.AdvanceMillis(1);
  Tick();
  EXPECT_EQ(backend_.Get(j.workload_id()).stop_graces, (std::vector<int64_t>{7'000}));
  EXPECT_EQ(Row(j).state, "running");
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "running");  // not before it is gone
  clock_.AdvanceMillis(7'000);
  Tick();
  EXPECT_EQ(Row(j).state, "timed-out");
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");
}

TEST_P(JobServiceTest, CancelStopsWithTheGraceAndRecordsWhoAsked) {
  JobRecord j = Submit("tn_a", Spec(1));
  backend_.IgnoreTerm(j.workload_id());
  auto cancelled = jobs_->Cancel(user_, "tn_a", j.id);
  ASSERT_TRUE(cancelled.has_value()) << cancelled.error().message;
  EXPECT_EQ(cancelled->state, "running");
  EXPECT_EQ(cancelled->stop_cause, "cancel");
  // Cancelling again changes nothing.
  ASSERT_TRUE(jobs_->Cancel(user_, "tn_a", j.id).has_value());
  EXPECT_EQ(backend_.Get(j.workload_id()).stop_graces, (std::vector<int64_t>{5'000}));
  clock_.AdvanceMillis(4'999);
  Tick();
  EXPECT_EQ(Row(j).state, "running");
  clock_.AdvanceMillis(1);
  Tick();
  EXPECT_EQ(Row(j).state, "cancelled");
  EXPECT_EQ(Events(j, true).back(), "running>cancelled user:usr_1");
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");
}

TEST_P(JobServiceTest, CancelOfAPendingJobReleasesItsAllocation) {
  JobRecord hog = Submit("tn_a", Spec(8));
  JobRecord j = Submit("tn_a", Spec(8));
  ASSERT_EQ(j.state, "pending");
  ASSERT_EQ(AllocationState("tn_a", j.allocation_id), "pending");
  auto why = jobs_->Explain("tn_a", j.id);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("waiting for allocation"), std::string::npos) << *why;
  auto c = jobs_->Cancel(user_, "tn_a", j.id);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->state, "cancelled");
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");
  EXPECT_FALSE(backend_.Knows(j.workload_id()));
  EXPECT_EQ(Row(hog).state, "running");
  // An ended job says when, as a time a person reads.
  auto ended = jobs_->Explain("tn_a", j.id);
  ASSERT_TRUE(ended.has_value());
  EXPECT_NE(ended->find(" since " + FormatTimestamp(clock_.NowMillis())), std::string::npos)
      << *ended;
}

TEST_P(JobServiceTest, ALostWorkloadIsLostAndOnFailureRequeuesIt) {
  JobRecord j = Submit("tn_a", Spec(1));
  backend_.Lose(j.workload_id());
  Tick();
  EXPECT_EQ(Row(j).state, "lost");
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");

  JobRecord k = Submit("tn_a", Spec(1, "preemptible", R"(,"restart_policy":"on-failure")"));
  ASSERT_TRUE(backend_.Forget(k.workload_id()).has_value() == false);  // running: refused
  backend_.Lose(k.workload_id());
  Tick();
  EXPECT_EQ(Row(k).attempt, 2);
  EXPECT_EQ(Events(k)[3], "running>lost");
}

TEST_P(JobServiceTest, TheBackendRefusingALaunchFailsTheJobAndFreesItsGpus) {
  JobSpec spec = Spec(1, "preemptible", R"(,"restart_policy":"on-failure")");
  spec.command = {"refuse-me"};
  spec.args.clear();
  JobRecord j = Submit("tn_a", spec);
  EXPECT_EQ(j.state, "failed");
  EXPECT_NE(j.reason.find("refuses"), std::string::npos);
  EXPECT_EQ(j.attempt, 1);  // a refusal is not retried
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");
}

// Every attempt of an on-failure job used to keep its workload's uid and
// directory for good: `exit 1` with many restarts used up the local
// backend's uid range for every tenant.
TEST_P(JobServiceTest, EveryEndedAttemptIsReleasedOnceItsEndIsStoredAndItsLogStaysReadable) {
  JobRecord j =
      Submit("tn_a", Spec(1, "preemptible", R"(,"restart_policy":"on-failure","max_restarts":2)"));
  backend_.AppendLog(j.workload_id(), "attempt one\n");
  EXPECT_TRUE(backend_.released().empty()) << "nothing is released while it runs";
  backend_.Exit(j.workload_id(), 1);
  Tick();
  EXPECT_EQ(Row(j).attempt, 2);
  EXPECT_EQ(backend_.released(), (std::vector<std::string>{j.id + ".1"}));
  Tick();
  backend_.Exit(j.id + ".2", 1);
  Tick();
  Tick();
  backend_.Exit(j.id + ".3", 1);
  Tick();
  EXPECT_EQ(Row(j).state, "failed");
  EXPECT_EQ(backend_.released(), (std::vector<std::string>{j.id + ".1", j.id + ".2", j.id + ".3"}));
  // Released is not forgotten: the first attempt's log is still the tenant's.
  auto log = jobs_->ReadLog("tn_a", j.id, 1, 0, 100);
  ASSERT_TRUE(log.has_value());
  EXPECT_EQ(log->data, "attempt one\n");
  EXPECT_TRUE(backend_.forgotten().empty());
}

// A crash between storing the end and releasing the workload: the next
// start releases it.
TEST_P(JobServiceTest, AnEndedWorkloadNotYetReleasedIsReleasedAfterARestart) {
  JobRecord j = Submit("tn_a", Spec(1));
  JobRecord k = Submit("tn_a", Spec(1));
  backend_.Exit(j.workload_id(), 0);
  Tick();
  ASSERT_EQ(Row(j).state, "succeeded");
  jobs_.reset();
  backend_.Exit(k.workload_id(), 0);  // ends while no control plane runs
  StartJobs();
  EXPECT_EQ(Row(k).state, "succeeded");
  auto released = backend_.released();
  EXPECT_NE(std::find(released.begin(), released.end(), j.workload_id()), released.end());
  EXPECT_NE(std::find(released.begin(), released.end(), k.workload_id()), released.end());
}

// A backend out of workload uids (or of a mechanism the tenant's tier
// demands) used to be retried every tick for ever while the allocation
// stayed held and billed.
TEST_P(JobServiceTest, ABackendThatCannotStartFailsTheJobAfterTheRetryTimeAndFreesTheAllocation) {
  for (Status error : {Status(Error::ResourceExhausted("every workload uid is in use", 60)),
                       Status(Error::FailedPrecondition("full confinement is required"))}) {
    backend_.set_start_error(error);
    JobRecord j = Submit("tn_a", Spec(1));
    EXPECT_EQ(j.state, "pending") << "it may still come: retried";
    EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "running");
    clock_.AdvanceMillis(30'000);
    EXPECT_FALSE(jobs_->Tick().has_value());
    EXPECT_EQ(Row(j).state, "pending");
    clock_.AdvanceMillis(30'000);
    (void)jobs_->Tick();
    JobRecord failed = Row(j);
    EXPECT_EQ(failed.state, "failed") << error.error().message;
    EXPECT_NE(failed.reason.find(error.error().message), std::string::npos) << failed.reason;
    EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "released");
    const int calls = backend_.start_calls();
    Tick();
    EXPECT_EQ(backend_.start_calls(), calls) << "no retry once failed";
  }
}

TEST_P(JobServiceTest, TheTenantsTierDecidesWhetherFullConfinementIsRequired) {
  JobServiceOptions o;
  o.full_confinement_tiers = {"dedicated-gpu"};
  StartJobs(o);
  Tenant t;
  t.id = "tn_d";
  t.name = "dedi";
  t.display_name = "dedi";
  t.tier = "dedicated-gpu";
  t.weight = 1;
  t.state = "active";
  t.created_at = t.updated_at = clock_.NowMillis();
  ASSERT_TRUE(store_->CreateTenant(t).has_value());
  scheduling_->TenantChanged(t);
  ASSERT_TRUE(scheduling_->SetQuota(admin_, "tn_d", "", {"H100-80GB", "gpu", 0, 8000}).has_value());
  JobRecord shared = Submit("tn_a", Spec(1));
  JobRecord dedicated = Submit("tn_d", Spec(1));
  ASSERT_TRUE(backend_.Knows(dedicated.workload_id()));
  EXPECT_FALSE(backend_.Get(shared.workload_id()).spec.require_full_confinement);
  EXPECT_TRUE(backend_.Get(dedicated.workload_id()).spec.require_full_confinement);
}

TEST_P(JobServiceTest, AnUnavailableBackendIsRetriedNotFailed) {
  backend_.set_unavailable(true);
  JobRecord j = Submit("tn_a", Spec(1));
  EXPECT_EQ(j.state, "pending");
  EXPECT_FALSE(jobs_->Tick().has_value());
  EXPECT_EQ(Row(j).state, "pending");
  backend_.set_unavailable(false);
  Tick();
  EXPECT_EQ(Row(j).state, "running");
}

TEST_P(JobServiceTest, ARestartAdoptsRunningWorkloadsAndRecordsTheRealEnd) {
  JobRecord running = Submit("tn_a", Spec(1));
  JobRecord ending = Submit("tn_a", Spec(1));
  jobs_.reset();  // kill -9: nothing is told
  clock_.AdvanceMillis(3'000);
  const int64_t end_at = clock_.NowMillis();
  backend_.Exit(ending.workload_id(), 0);
  clock_.AdvanceMillis(60'000);
  StartJobs();
  EXPECT_EQ(Row(running).state, "running");
  EXPECT_EQ(Row(ending).state, "succeeded");
  EXPECT_EQ(Row(ending).ended_ms, end_at);
  EXPECT_EQ(backend_.Get(running.workload_id()).starts, 1);
  EXPECT_EQ(backend_.start_calls(), 2);
}

TEST_P(JobServiceTest, ACrashBetweenTheJobRowAndItsAllocationLosesNothing) {
  // What Submit had written when the process died: the row with the
  // allocation's id, no allocation yet.
  JobSpec spec = Spec(1);
  JobRecord j;
  j.id = "job_01hcrash0000000000000000000";
  j.tenant_id = "tn_a";
  j.name = spec.name;
  j.created_by = "usr_1";
  j.state = "pending";
  j.allocation_id = "alloc_01hcrash000000000000000000";
  j.allocation_id.resize(std::string("alloc_").size() + 26, '0');
  j.spec = JobSpecJson(spec).dump();
  j.created_at = j.updated_at = clock_.NowMillis();
  ASSERT_TRUE(store_->CreateJob(j, {j.id, "tn_a", 0, 0, 1, "", "pending", "submitted", "x"}, {})
                  .has_value());
  StartJobs();
  EXPECT_EQ(AllocationState("tn_a", j.allocation_id), "running");
  EXPECT_EQ(Row(j).state, "running");
  // A second restart submits nothing again and starts nothing again.
  StartJobs();
  EXPECT_EQ(backend_.Get(j.workload_id()).starts, 1);
  EXPECT_EQ(backend_.start_calls(), 1);
  auto page = store_->ListAllocations(TenantScope::Of("tn_a"), {}, {});
  EXPECT_EQ(page->items.size(), 1u);
}

TEST_P(JobServiceTest, ACrashAfterStartBeforeTheRowAdoptsTheWorkload) {
  JobRecord hog = Submit("tn_a", Spec(8));
  JobRecord j = Submit("tn_a", Spec(8));
  ASSERT_EQ(j.state, "pending");
  jobs_.reset();
  // While the service is down the hog's allocation goes, j's is placed, and
  // j's workload was started just before the crash, its row not yet written.
  ASSERT_TRUE(scheduling_->Release(admin_, "tn_a", hog.allocation_id).has_value());
  ASSERT_TRUE(scheduling_->Tick().has_value());
  ASSERT_EQ(AllocationState("tn_a", j.allocation_id), "running");
  exec::LaunchSpec started;
  started.workload_id = j.workload_id();
  started.argv = {"python3"};
  ASSERT_TRUE(backend_.Start(started).has_value());
  StartJobs();
  EXPECT_EQ(Row(j).state, "running");
  EXPECT_EQ(backend_.Get(j.workload_id()).starts, 1);
  // Its allocation was released under it: stopped now, ended when gone.
  EXPECT_EQ(Row(hog).stop_cause, "allocation-released");
  Tick();
  EXPECT_EQ(Row(hog).state, "cancelled");
}

TEST_P(JobServiceTest, AStopAskedBeforeARestartEndsAsThatStop) {
  JobRecord j = Submit("tn_a", Spec(1));
  backend_.IgnoreTerm(j.workload_id());
  ASSERT_TRUE(jobs_->Cancel(user_, "tn_a", j.id).has_value());
  jobs_.reset();
  clock_.AdvanceMillis(10'000);  // the backend killed it after the grace
  StartJobs();
  EXPECT_EQ(Row(j).state, "cancelled");
  EXPECT_EQ(Events(j, true).back(), "running>cancelled user:usr_1");
}

TEST_P(JobServiceTest, TheSameIdempotencyKeyReturnsTheFirstJob) {
  JobRecord first = Submit("tn_a", Spec(1), "key-1");
  auto again = jobs_->Submit(user_, "tn_a", "usr_1", Spec(1), "key-1");
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->job.id, first.id);
  auto other = jobs_->Submit(user_, "tn_a", "usr_1", Spec(2), "key-1");
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(store_->ListAllocations(TenantScope::Of("tn_a"), {}, {})->items.size(), 1u);
  EXPECT_EQ(backend_.start_calls(), 1);
  // The key is the tenant's own: another tenant's same key is another job.
  ASSERT_TRUE(scheduling_->SetQuota(admin_, "tn_b", "", {"H100-80GB", "gpu", 0, 8000}).has_value());
  auto theirs = jobs_->Submit(user_, "tn_b", "usr_b", Spec(1), "key-1");
  ASSERT_TRUE(theirs.has_value()) << theirs.error().message;
  EXPECT_NE(theirs->job.id, first.id);
}

TEST_P(JobServiceTest, AnotherTenantsJobIsNotFoundAndNothingChanges) {
  JobRecord j = Submit("tn_a", Spec(1));
  backend_.AppendLog(j.workload_id(), "secret\n");
  EXPECT_EQ(jobs_->Cancel(user_, "tn_b", j.id).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(jobs_->ReadLog("tn_b", j.id, 0, 0, 100).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(jobs_->Explain("tn_b", j.id).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(Row(j).state, "running");
  EXPECT_TRUE(backend_.Get(j.workload_id()).stop_graces.empty());
  EXPECT_EQ(jobs_->ReadLog("tn_a", j.id, 0, 0, 100).value().data, "secret\n");
}

TEST_P(JobServiceTest, LogsPageByOffsetAndEndComplete) {
  JobRecord j = Submit("tn_a", Spec(1));
  backend_.AppendLog(j.workload_id(), "hello world\n");
  auto first = jobs_->ReadLog("tn_a", j.id, 0, 0, 5);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->data, "hello");
  EXPECT_FALSE(first->complete);
  backend_.Exit(j.workload_id(), 0);
  auto rest = jobs_->ReadLog("tn_a", j.id, 1, first->next_offset, 100);
  EXPECT_EQ(rest->data, " world\n");
  EXPECT_TRUE(rest->complete);
  EXPECT_EQ(jobs_->ReadLog("tn_a", j.id, 2, 0, 10).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(jobs_->ReadLog("tn_a", j.id, 0, -1, 10).error().code, ErrorCode::kInvalidArgument);
  // Follow with nothing new returns when the wait is over.
  auto waited = jobs_->ReadLog("tn_a", j.id, 0, rest->next_offset, 10, 1);
  EXPECT_TRUE(waited->data.empty());
}

// A follow waits on one of the API server's threads: a tenant (or all
// tenants together) past the bound answers at once instead of holding
// another thread, so followers can never stall the API.
TEST_P(JobServiceTest, LogFollowersCannotHoldEveryApiThread) {
  JobServiceOptions o;
  o.max_log_waiters = 2;
  o.max_log_waiters_per_tenant = 1;
  o.max_log_wait_ms = 60'000;
  StartJobs(o);
  JobRecord a = Submit("tn_a", Spec(1));
  JobRecord b = Submit("tn_b", Spec(1));
  ASSERT_EQ(Row(a).state, "running");
  ASSERT_EQ(Row(b).state, "running");
  auto follow = [&](const JobRecord& j) {
    return std::async(std::launch::async,
                      [&, j] { return jobs_->ReadLog(j.tenant_id, j.id, 0, 0, 100, 60'000); });
  };
  auto wait_for_waiters = [&](int n) {
    for (int i = 0; i < 5000 && jobs_->log_waiters() != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return jobs_->log_waiters();
  };
  auto first_a = follow(a);
  ASSERT_EQ(wait_for_waiters(1), 1);
  // The same tenant again: no place, an empty answer at once.
  auto second_a = follow(a);
  ASSERT_EQ(second_a.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(second_a.get().value().data.empty());
  // Another tenant still gets one; then every place is taken.
  auto first_b = follow(b);
  ASSERT_EQ(wait_for_waiters(2), 2);
  JobRecord c = Submit("tn_b", Spec(1));
  auto third = std::async(std::launch::async,
                          [&] { return jobs_->ReadLog("tn_b", c.id, 0, 0, 100, 60'000); });
  ASSERT_EQ(third.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(third.get().value().data.empty());
  // Output wakes the waiters, and their places are free again.
  backend_.AppendLog(a.workload_id(), "a\n");
  backend_.AppendLog(b.workload_id(), "b\n");
  Tick();
  EXPECT_EQ(first_a.get().value().data, "a\n");
  EXPECT_EQ(first_b.get().value().data, "b\n");
  EXPECT_EQ(jobs_->log_waiters(), 0);
}

TEST_P(JobServiceTest, AnEnvironmentNeedsAResolver) {
  JobSpec spec = Spec(1, "preemptible", R"(,"environment":"pytorch")");
  auto refused = jobs_->Submit(user_, "tn_a", "usr_1", spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(store_->ListJobs(TenantScope::Of("tn_a"), {}, {})->items.size(), 0u);

  resolver_ = [](const std::string& tenant, const std::string& ref) -> Result<ResolvedEnvironment> {
    if (tenant != "tn_a" || ref.rfind("pytorch", 0) != 0) return Error::NotFound("no template");
    return ResolvedEnvironment{"pytorch@2.3", "/srv/envs/pytorch-2.3", {{"PYTHONPATH", "/opt"}}};
  };
  StartJobs();
  JobRecord j = Submit("tn_a", spec, "k");
  EXPECT_NE(j.spec.find("pytorch@2.3"), std::string::npos);
  FakeBackend::Workload w = backend_.Get(j.workload_id());
  EXPECT_EQ(w.spec.root_fs, "/srv/envs/pytorch-2.3");
  EXPECT_EQ(w.spec.env, (std::vector<std::pair<std::string, std::string>>{{"PYTHONPATH", "/opt"}}));
  // The retry that named no version means the same job.
  auto again = jobs_->Submit(user_, "tn_a", "usr_1", spec, "k");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->job.id, j.id);
}

TEST_P(JobServiceTest, AnUnknownProjectOrAHopelessRequestIsRefused) {
  auto unknown =
      jobs_->Submit(user_, "tn_a", "usr_1", Spec(1, "preemptible", R"(,"project":"nope")"));
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->ListJobs(TenantScope::Of("tn_a"), {}, {})->items.size(), 0u);
  // More than tn_a may ever hold: refused by the scheduler, kept as failed.
  JobSpec big = Spec(8);
  big.resources.kind = sched::AllocationKind::kNode;
  big.resources.model = "L40S";
  auto hopeless = jobs_->Submit(user_, "tn_a", "usr_1", big);
  ASSERT_FALSE(hopeless.has_value());
  auto listed = store_->ListJobs(TenantScope::Of("tn_a"), {}, {});
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].state, "failed");
}

TEST_P(JobServiceTest, EvictionStopsAndForgetsEveryWorkloadOfTheTenant) {
  JobRecord done = Submit("tn_a", Spec(1));
  backend_.Exit(done.workload_id(), 0);
  Tick();
  JobRecord running = Submit("tn_a", Spec(1));
  JobRecord pending = Submit("tn_a", Spec(8));
  ASSERT_EQ(pending.state, "pending");
  ASSERT_TRUE(jobs_->StopTenantJobs("tn_a", admin_).has_value());
  EXPECT_EQ(Row(running).state, "cancelled");
  EXPECT_EQ(Row(pending).state, "cancelled");
  EXPECT_EQ(Events(running, true).back(), "running>cancelled user:usr_op");
  EXPECT_FALSE(backend_.Knows(running.workload_id()));
  EXPECT_FALSE(backend_.Knows(done.workload_id()));  // logs go with the tenant
  EXPECT_TRUE(jobs_->WorkloadsGone(running.allocation_id));
}

TEST_P(JobServiceTest, AWorkloadWhoseJobIsGoneIsStoppedAndForgottenAtStart) {
  JobRecord j = Submit("tn_a", Spec(1));
  jobs_.reset();
  ASSERT_TRUE(scheduling_->TenantEvicting("tn_a", admin_).has_value());
  ASSERT_TRUE(store_->DeleteTenantAndData("tn_a", clock_.NowMillis()).has_value());
  StartJobs();  // stops it (SIGTERM ends the fake at once) and forgets it
  jobs_->Tick();
  EXPECT_FALSE(backend_.Knows(j.workload_id()));
  EXPECT_EQ(backend_.forgotten(), (std::vector<std::string>{j.workload_id()}));
}

// With its thread and a tick that never comes within the test (an hour),
// the service still acts at once on what it is told: a workload the
// backend heard end (released, recorded, the GPUs placed to the next job
// and that job launched, with no Tick), and an end heard early — while the
// backend still says the workload runs, as a completing Slurm job — is
// looked at again until it shows. Without hints both would wait an hour.
TEST_P(JobServiceTest, HeardEndsAndPlacementsAreActedOnWithoutATick) {
  jobs_.reset();
  JobServiceOptions o;
  o.tick_ms = 3'600'000;
  jobs_ = std::make_unique<JobService>(*store_, *scheduling_, backend_, clock_, o);
  ASSERT_TRUE(jobs_->Start().has_value());
  ASSERT_TRUE(backend_.watched());
  auto state_becomes = [&](const JobRecord& j, const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Row(j).state == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };

  JobRecord first = Submit("tn_a", Spec(8));
  ASSERT_EQ(first.state, "running");
  JobRecord second = Submit("tn_a", Spec(8));
  ASSERT_EQ(second.state, "pending");  // the node is full

  backend_.HintEnd(first.workload_id(), 0);
  ASSERT_TRUE(state_becomes(first, "succeeded")) << Row(first).state;
  // Its GPUs went back and the scheduler's placement reached the service.
  ASSERT_TRUE(state_becomes(second, "running")) << Row(second).state;
  EXPECT_EQ(AllocationState("tn_a", second.allocation_id), "running");

  // Heard before the backend shows it: looked at again (50 ms, 100 ms ...).
  backend_.HintEnd(second.workload_id(), std::nullopt);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  backend_.ExitLocked(second.workload_id(), 3);
  ASSERT_TRUE(state_becomes(second, "failed")) << Row(second).state;
  EXPECT_EQ(Row(second).exit_code, 3);

  // A hint for what is no job (or a job of another service) changes nothing.
  backend_.HintEnd("job_unknown.1", std::nullopt);
  jobs_->Stop();
  EXPECT_FALSE(backend_.watched());
}

// A control plane that finds thousands of workloads it has no job for (a
// Slurm folder another one used) forgets them a bounded number per tick, so
// its start and its jobs are never held up behind them.
TEST_P(JobServiceTest, OrphansAreForgottenABoundedNumberPerTick) {
  jobs_.reset();
  for (int i = 0; i < 40; ++i) {
    exec::LaunchSpec spec;
    spec.workload_id = "job_orphan" + std::to_string(i) + ".1";
    spec.tenant_id = "tn_gone";
    spec.argv = {"true"};
    ASSERT_TRUE(backend_.Start(spec).has_value());
    backend_.Exit(spec.workload_id, 0);
  }
  StartJobs();  // its Tick forgets the first 32
  EXPECT_EQ(backend_.forgotten().size(), 32u);
  Tick();
  EXPECT_EQ(backend_.forgotten().size(), 40u);
  std::vector<std::string> forgotten = backend_.forgotten();
  std::sort(forgotten.begin(), forgotten.end());
  EXPECT_EQ(std::unique(forgotten.begin(), forgotten.end()), forgotten.end());
}

// A tick looks at every started job's workload in one InspectMany (Slurm:
// one scontrol for all), not one Inspect per job; when that look fails,
// each job still asks on its own and nothing is missed.
TEST_P(JobServiceTest, ATickLooksAtEveryStartedWorkloadAtOnce) {
  std::vector<JobRecord> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(Submit("tn_a", Spec(1)));
  JobRecord waiting = Submit("tn_a", Spec(8));  // pending: no workload to look at
  ASSERT_EQ(waiting.state, "pending");
  for (const auto& j : jobs) ASSERT_EQ(j.state, "running");
  const int inspects = backend_.inspect_calls();
  const int many = backend_.inspect_many_calls();
  backend_.Exit(jobs[0].workload_id(), 0);
  Tick();
  EXPECT_EQ(backend_.inspect_many_calls(), many + 1);
  EXPECT_EQ(backend_.inspect_calls(), inspects);
  EXPECT_EQ(Row(jobs[0]).state, "succeeded");
  EXPECT_EQ(Row(jobs[1]).state, "running");

  backend_.set_inspect_many_fails(true);
  backend_.Exit(jobs[1].workload_id(), 2);
  Tick();
  EXPECT_EQ(Row(jobs[1]).state, "failed");
  EXPECT_EQ(Row(jobs[1]).exit_code, 2);
  EXPECT_EQ(Row(jobs[2]).state, "running");
  EXPECT_GE(backend_.inspect_calls(), inspects + 3);  // each live job asked on its own
}

INSTANTIATE_TEST_SUITE_P(Drivers, JobServiceTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::jobs
