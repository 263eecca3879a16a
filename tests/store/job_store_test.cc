// Jobs and their events on SQLite and PostgreSQL: tenant scoping, the
// idempotency key, keyset pagination, transitions with their events and
// audit records in one transaction, and deletion with the tenant; the runs
// of each attempt and the GPU meter's query over them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "store/store.h"
#include "store/test_databases.h"
#include "support/store_rows.h"

namespace atrium {
namespace {

using testdb::Backend;
using testdb::BackendName;
using testing_rows::JobAudit;
using testing_rows::JobEvent;

class JobStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    ASSERT_TRUE(store_->CreateTenant(testing_rows::ActiveTenant("tn_a", "alpha")).has_value());
    ASSERT_TRUE(store_->CreateTenant(testing_rows::ActiveTenant("tn_b", "beta")).has_value());
  }
  void TearDown() override {
    store_.reset();
    database_.Drop();
  }

  static JobRecord Job(const std::string& id, const std::string& tenant,
                       const std::string& key = "") {
    JobRecord j = testing_rows::PendingJob(id, tenant);
    j.idempotency_key = key;
    return j;
  }
  // A placed allocation of `tenant` for a job's attempt.
  void PlaceAllocation(const std::string& id, const std::string& tenant) {
    AllocationRecord a;
    a.id = id;
    a.tenant_id = tenant;
    a.project = "vision";
    a.kind = "mig";
    a.priority = "batch";
    a.model = "A100-80GB";
    a.mig_profile = "3g.40gb";
    a.gpus = 1;
    a.charge_milli = 428;
    a.state = "running";
    a.submitted_ms = a.placed_ms = 150;
    a.updated_at = 150;
    SchedulingCommit commit;
    commit.allocations = {a};
    auto written = store_->CommitScheduling(commit);
    ASSERT_TRUE(written.has_value()) << written.error().message;
  }
  // "<job>.<attempt>@<started>-<ended>" of what the meter's query lists.
  std::vector<std::string> ToMeter(int64_t changed_since_ms) {
    std::vector<std::string> out;
    auto runs = store_->ListJobRunsToMeterForMetering(changed_since_ms);
    EXPECT_TRUE(runs.has_value()) << runs.error().message;
    if (!runs.has_value()) return out;
    for (const auto& r : *runs) {
      out.push_back(r.run.workload_id() + "@" + std::to_string(r.run.started_ms) + "-" +
                    std::to_string(r.run.ended_ms));
    }
    return out;
  }
  GpuUsageRecord JobRecordOf(const std::string& subject, int64_t from, int64_t to, bool closes) {
    GpuUsageRecord g;
    g.id = "job:" + subject + ":" + std::to_string(from);
    g.tenant_id = "tn_a";
    g.subject_kind = "job";
    g.subject_id = subject;
    g.model = "A100-80GB";
    g.kind = "mig";
    g.milli = 428;
    g.from_ms = from;
    g.to_ms = to;
    g.gpu_milli_ms = 428 * (to - from);
    g.closes_subject = closes;
    return g;
  }
  Result<JobRecord> Create(const JobRecord& j) {
    return store_->CreateJob(j, JobEvent(j), JobAudit(j, "job.submitted"));
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
};

TEST_P(JobStoreTest, AJobIsReadOnlyInItsTenant) {
  JobRecord j = Job("job_1", "tn_a");
  ASSERT_TRUE(Create(j).has_value());
  auto got = store_->GetJob(TenantScope::Of("tn_a"), "job_1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, j);
  EXPECT_EQ(store_->GetJob(TenantScope::Of("tn_b"), "job_1").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store_->ListJobs(TenantScope::Of("tn_b"), {}, {}).value().items.size(), 0u);
  EXPECT_EQ(store_->ListJobEvents(TenantScope::Of("tn_b"), "job_1", {}).value().items.size(), 0u);
  // Another tenant cannot write over it either.
  JobRecord theirs = j;
  theirs.tenant_id = "tn_b";
  theirs.state = "cancelled";
  EXPECT_EQ(store_->CommitJob(theirs, {}, {}).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store_->GetJob(TenantScope::Of("tn_a"), "job_1")->state, "pending");
  EXPECT_EQ(store_->GetJobForPlatform("job_1")->tenant_id, "tn_a");
  EXPECT_EQ(store_->FindJobByAllocationForJobs("alloc_job_1")->id, "job_1");
}

TEST_P(JobStoreTest, TheIdempotencyKeyIsUniquePerTenant) {
  ASSERT_TRUE(Create(Job("job_1", "tn_a", "k1")).has_value());
  auto again = Create(Job("job_2", "tn_a", "k1"));
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
  // Nothing of the refused one was written: no row, no event.
  EXPECT_EQ(store_->GetJob(TenantScope::Of("tn_a"), "job_2").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store_->ListJobEvents(TenantScope::Of("tn_a"), "job_2", {})->items.size(), 0u);
  EXPECT_EQ(store_->GetJobByIdempotencyKey(TenantScope::Of("tn_a"), "k1")->id, "job_1");
  // The same key in another tenant, and jobs without a key, are separate.
  EXPECT_TRUE(Create(Job("job_3", "tn_b", "k1")).has_value());
  EXPECT_TRUE(Create(Job("job_4", "tn_a")).has_value());
  EXPECT_TRUE(Create(Job("job_5", "tn_a")).has_value());
  EXPECT_EQ(store_->GetJobByIdempotencyKey(TenantScope::Of("tn_b"), "k1")->id, "job_3");
  EXPECT_FALSE(store_->GetJobByIdempotencyKey(TenantScope::Of("tn_a"), "").has_value());
}

TEST_P(JobStoreTest, TransitionsAppendEventsAndAuditTogether) {
  JobRecord j = Job("job_1", "tn_a");
  ASSERT_TRUE(Create(j).has_value());
  j.state = "starting";
  JobRecord running = j;
  running.state = "running";
  running.started_ms = 200;
  ASSERT_TRUE(
      store_
          ->CommitJob(running,
                      {JobEvent(j, "pending", "starting"), JobEvent(j, "starting", "running")},
                      {JobAudit(j, "job.starting"), JobAudit(j, "job.running")})
          .has_value());
  auto events = store_->ListJobEvents(TenantScope::Of("tn_a"), "job_1", {});
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->items.size(), 3u);
  EXPECT_EQ(events->items[0].seq, 1);
  EXPECT_EQ(events->items[2].seq, 3);
  EXPECT_EQ(events->items[2].to_state, "running");
  auto audit = store_->ListAudit(std::string("tn_a"), {});
  ASSERT_TRUE(audit.has_value());
  ASSERT_EQ(audit->items.size(), 3u);
  EXPECT_EQ(audit->items[2].action, "job.running");
  EXPECT_EQ(store_->GetJob(TenantScope::Of("tn_a"), "job_1")->started_ms, 200);
  // Paging of events by seq.
  auto first = store_->ListJobEvents(TenantScope::Of("tn_a"), "job_1", {.after = "", .limit = 2});
  ASSERT_EQ(first->items.size(), 2u);
  auto rest = store_->ListJobEvents(TenantScope::Of("tn_a"), "job_1",
                                    {.after = first->next_cursor, .limit = 2});
  ASSERT_EQ(rest->items.size(), 1u);
  EXPECT_EQ(rest->items[0].seq, 3);
  EXPECT_TRUE(rest->next_cursor.empty());
  EXPECT_EQ(store_->ListJobEvents(TenantScope::Of("tn_a"), "job_1", {.after = "x"}).error().code,
            ErrorCode::kInvalidArgument);
}

TEST_P(JobStoreTest, ListsPageAndFilter) {
  for (int i = 0; i < 5; ++i) {
    JobRecord j = Job("job_" + std::to_string(i), "tn_a");
    if (i % 2 == 0) j.project = "nlp";
    ASSERT_TRUE(Create(j).has_value());
  }
  ASSERT_TRUE(Create(Job("job_9", "tn_b")).has_value());
  JobRecord done = store_->GetJob(TenantScope::Of("tn_a"), "job_1").value();
  done.state = "succeeded";
  ASSERT_TRUE(store_->CommitJob(done, {}, {}).has_value());

  std::vector<std::string> seen;
  ListOptions opts{.after = "", .limit = 2};
  for (;;) {
    auto page = store_->ListJobs(TenantScope::Of("tn_a"), {}, opts);
    ASSERT_TRUE(page.has_value());
    for (const auto& j : page->items) seen.push_back(j.id);
    if (page->next_cursor.empty()) break;
    opts.after = page->next_cursor;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"job_0", "job_1", "job_2", "job_3", "job_4"}));
  EXPECT_EQ(store_->ListJobs(TenantScope::Of("tn_a"), {.state = "succeeded"}, {})->items.size(),
            1u);
  EXPECT_EQ(store_->ListJobs(TenantScope::Of("tn_a"), {.project = "nlp"}, {})->items.size(), 3u);
  EXPECT_EQ(store_->ListJobsForPlatform({}, {})->items.size(), 6u);
  EXPECT_EQ(store_->ListJobsForPlatform({.tenant_id = "tn_b"}, {})->items.size(), 1u);
  EXPECT_EQ(store_->ListLiveJobsForJobs()->size(), 5u);
  EXPECT_EQ(store_->ListTenantJobsForJobs("tn_a")->size(), 5u);
}

TEST_P(JobStoreTest, CountsTheLiveJobsThatPinAnEnvironmentVersion) {
  auto pinning = [&](const std::string& id, const std::string& tenant, const std::string& spec,
                     const std::string& state = "pending") {
    JobRecord j = Job(id, tenant);
    j.spec = spec;
    ASSERT_TRUE(Create(j).has_value());
    if (state != "pending") {
      j.state = state;
      ASSERT_TRUE(store_->CommitJob(j, {}, {}).has_value());
    }
  };
  pinning("job_1", "tn_a", R"({"environment":"py_3.1@2","name":"a"})");
  pinning("job_2", "tn_a", R"({"environment":"py_3.1@2","name":"b"})", "running");
  pinning("job_3", "tn_a", R"({"environment":"py_3.1@2","name":"c"})", "succeeded");
  pinning("job_4", "tn_b", R"({"environment":"py_3.1@2","name":"d"})", "starting");
  // Another version, a LIKE wildcard's match ('_' and '.' are literal), and
  // the same words as a command argument or an env name are not pins.
  pinning("job_5", "tn_a", R"({"environment":"py_3.1@20","name":"e"})");
  pinning("job_6", "tn_a", R"({"environment":"pyx3.1@2","name":"f"})");
  pinning("job_7", "tn_a", R"({"args":["\"environment\":\"py_3.1@2\""],"name":"g"})");
  pinning("job_8", "tn_a", R"({"env":{"environment":"py_3.1@2"},"name":"h"})");
  EXPECT_EQ(store_->CountLiveJobsPinningForTemplates("tn_a", "py_3.1@2").value(), 2);
  EXPECT_EQ(store_->CountLiveJobsPinningForTemplates("tn_b", "py_3.1@2").value(), 1);
  // A platform template: every tenant's jobs.
  EXPECT_EQ(store_->CountLiveJobsPinningForTemplates("", "py_3.1@2").value(), 3);
  EXPECT_EQ(store_->CountLiveJobsPinningForTemplates("", "py_3.1@20").value(), 1);
  EXPECT_EQ(store_->CountLiveJobsPinningForTemplates("tn_a", "py_3.1@3").value(), 0);
}

TEST_P(JobStoreTest, JobsAreDeletedWithTheirTenant) {
  ASSERT_TRUE(Create(Job("job_1", "tn_a")).has_value());
  ASSERT_TRUE(Create(Job("job_2", "tn_b")).has_value());
  auto summary = store_->DeleteTenantAndData("tn_a", 500);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->jobs, 1);
  EXPECT_EQ(store_->GetJobForPlatform("job_1").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store_->ListJobEvents(TenantScope::Of("tn_a"), "job_1", {})->items.size(), 0u);
  EXPECT_TRUE(store_->GetJob(TenantScope::Of("tn_b"), "job_2").has_value());
}

TEST_P(JobStoreTest, EachStartedAttemptKeepsItsRunAndTheMeterListsTheUnclosedOnes) {
  JobRecord j = Job("job_1", "tn_a");
  ASSERT_TRUE(Create(j).has_value());
  ASSERT_NO_FATAL_FAILURE(PlaceAllocation("alloc_job_1", "tn_a"));
  EXPECT_TRUE(store_->ListJobRuns(TenantScope::Of("tn_a"), "job_1")->empty());  // not started
  EXPECT_TRUE(ToMeter(0).empty());

  // Attempt 1 runs: its run is written with the row.
  j.state = "running";
  j.started_ms = 200;
  j.updated_at = 200;
  ASSERT_TRUE(store_->CommitJob(j, {}, {}).has_value());
  auto runs = store_->ListJobRuns(TenantScope::Of("tn_a"), "job_1");
  ASSERT_TRUE(runs.has_value());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->at(0), (JobRunRecord{"job_1", 1, "tn_a", "vision", "alloc_job_1", 200, -1, 200}));
  EXPECT_TRUE(store_->ListJobRuns(TenantScope::Of("tn_b"), "job_1")->empty());  // not tn_b's
  auto listed = store_->ListJobRunsToMeterForMetering(1'000'000);  // running: always listed
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).model, "A100-80GB");
  EXPECT_EQ(listed->at(0).kind, "mig");
  EXPECT_EQ(listed->at(0).mig_profile, "3g.40gb");
  EXPECT_EQ(listed->at(0).charge_milli, 428);

  // Preempted at 500 and requeued: the row shows attempt 2, not yet
  // started; attempt 1's run ends in the same commit.
  JobRecord requeued = j;
  requeued.state = "pending";
  requeued.attempt = 2;
  requeued.allocation_id = "alloc_job_1b";
  requeued.started_ms = -1;
  requeued.updated_at = 600;
  const JobRunRecord ended{"job_1", 1, "tn_a", "vision", "alloc_job_1", 200, 500, 600};
  // A run that is not an earlier started attempt of this job is refused,
  // and nothing of the commit is written.
  std::vector<JobRunRecord> bad_runs(4, ended);
  bad_runs[0].attempt = 2;  // the row's own attempt, not an earlier one
  bad_runs[1].job_id = "job_2";
  bad_runs[2].tenant_id = "tn_b";
  bad_runs[3].started_ms = -1;
  for (const JobRunRecord& bad : bad_runs) {
    auto refused = store_->CommitJob(requeued, {}, {}, {bad});
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(store_->GetJob(TenantScope::Of("tn_a"), "job_1")->attempt, 1);
  ASSERT_TRUE(store_->CommitJob(requeued, {}, {}, {ended}).has_value());
  EXPECT_EQ(store_->ListJobRuns(TenantScope::Of("tn_a"), "job_1").value(),
            (std::vector<JobRunRecord>{ended}));
  EXPECT_EQ(ToMeter(0), (std::vector<std::string>{"job_1.1@200-500"}));
  EXPECT_EQ(ToMeter(600), (std::vector<std::string>{"job_1.1@200-500"}));  // changed at 600
  EXPECT_TRUE(ToMeter(601).empty());  // ended before, no records: nothing due

  // Attempt 2 runs on its own allocation: a second run.
  ASSERT_NO_FATAL_FAILURE(PlaceAllocation("alloc_job_1b", "tn_a"));
  requeued.state = "running";
  requeued.started_ms = 900;
  requeued.updated_at = 900;
  ASSERT_TRUE(store_->CommitJob(requeued, {}, {}).has_value());
  EXPECT_EQ(ToMeter(10'000), (std::vector<std::string>{"job_1.2@900--1"}));

  // Records: an ended run with some is listed whenever it changed; its
  // closing record takes it off the list for good.
  ASSERT_TRUE(store_->InsertGpuUsageRecords({JobRecordOf("job_1.1", 200, 300, false)}).has_value());
  EXPECT_EQ(ToMeter(10'000), (std::vector<std::string>{"job_1.1@200-500", "job_1.2@900--1"}));
  ASSERT_TRUE(store_->InsertGpuUsageRecords({JobRecordOf("job_1.1", 300, 500, true)}).has_value());
  EXPECT_EQ(ToMeter(0), (std::vector<std::string>{"job_1.2@900--1"}));

  // A run whose allocation is another tenant's is never listed.
  JobRecord k = Job("job_2", "tn_a");
  k.allocation_id = "alloc_of_b";
  ASSERT_TRUE(Create(k).has_value());
  ASSERT_NO_FATAL_FAILURE(PlaceAllocation("alloc_of_b", "tn_b"));
  k.state = "running";
  k.started_ms = 1000;
  ASSERT_TRUE(store_->CommitJob(k, {}, {}).has_value());
  EXPECT_EQ(store_->ListJobRuns(TenantScope::Of("tn_a"), "job_2")->size(), 1u);
  EXPECT_EQ(ToMeter(0), (std::vector<std::string>{"job_1.2@900--1"}));
}

TEST_P(JobStoreTest, RunsOutliveAnEvictedTenantSoTheirTimeIsStillRecorded) {
  JobRecord j = Job("job_1", "tn_a");
  ASSERT_TRUE(Create(j).has_value());
  ASSERT_NO_FATAL_FAILURE(PlaceAllocation("alloc_job_1", "tn_a"));
  j.state = "cancelled";
  j.started_ms = 200;
  j.ended_ms = 400;
  ASSERT_TRUE(store_->CommitJob(j, {}, {}).has_value());
  ASSERT_TRUE(store_->DeleteTenantAndData("tn_a", 500).has_value());
  EXPECT_EQ(store_->GetJobForPlatform("job_1").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(ToMeter(0), (std::vector<std::string>{"job_1.1@200-400"}));
}

INSTANTIATE_TEST_SUITE_P(Drivers, JobStoreTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium
