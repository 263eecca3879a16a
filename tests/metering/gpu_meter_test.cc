// The GPU meter over a real store (SQLite and PostgreSQL): allocations are
// billed from placement to release and never-placed ones not at all; job
// runs are recorded per attempt from start to end, beside (not inside)
// the allocations' records; a
// crash (a new meter, and a new store, over the same database) after some
// records were written loses nothing and counts nothing twice; the store's
// GPU usage table is idempotent, keeps each subject's chain, and lists and
// sums per tenant.
#include "metering/gpu_meter.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "store/test_databases.h"
#include "support/wait.h"

namespace atrium::metering {
namespace {

using testdb::Backend;
using testdb::BackendName;

constexpr int64_t kMin = 60'000;
constexpr int64_t kH0 = 1'789'999'200'000;  // an hour boundary

AllocationRecord Allocation(const std::string& id, const std::string& tenant, int64_t placed,
                            const std::string& state, int64_t ended = -1) {
  AllocationRecord a;
  a.id = id;
  a.tenant_id = tenant;
  a.project = "research";
  a.kind = "gpu";
  a.priority = "batch";
  a.model = "H100-80GB";
  a.gpus = 2;
  a.charge_milli = 2000;
  a.state = state;
  a.submitted_ms = placed < 0 ? kH0 : placed;
  a.placed_ms = placed;
  a.ended_ms = ended;
  a.updated_at = ended >= 0 ? ended : a.submitted_ms;
  return a;
}

class GpuMeterTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
  }
  void TearDown() override {
    meter_.reset();
    store_.reset();
    database_.Drop();
  }

  std::unique_ptr<GpuMeter> NewMeter(size_t max_records = kDefaultMaxRecordsPerSubject) {
    GpuMeterOptions o;
    o.interval_ms = 0;
    o.open_lag_ms = 0;
    o.max_records_per_subject = max_records;
    auto meter = std::make_unique<GpuMeter>(*store_, clock_, o);
    meter->AddSource(std::make_unique<AllocationSubjectSource>(*store_));
    meter->AddSource(std::make_unique<JobSubjectSource>(*store_));
    return meter;
  }

  // A job of `tenant` stored as pending on `allocation`.
  JobRecord NewJob(const std::string& id, const std::string& tenant,
                   const std::string& allocation) {
    JobRecord j;
    j.id = id;
    j.tenant_id = tenant;
    j.project = "research";
    j.name = "train";
    j.created_by = "us_1";
    j.state = "pending";
    j.allocation_id = allocation;
    j.spec = "{}";
    j.created_at = j.updated_at = kH0;
    AuditRecord a;
    a.time = kH0;
    a.actor = "system:jobs";
    a.tenant_id = tenant;
    a.action = "jobs.submitted";
    a.target = "tenant/" + tenant + "/job/" + id;
    a.outcome = "allowed";
    auto created = store_->CreateJob(
        j, {j.id, tenant, 0, kH0, 1, "", "pending", "submitted", "system:jobs"}, a);
    EXPECT_TRUE(created.has_value()) << created.error().message;
    return j;
  }

  void CommitJob(const JobRecord& j, const std::vector<JobRunRecord>& ended_runs = {}) {
    auto s = store_->CommitJob(j, {}, {}, ended_runs);
    ASSERT_TRUE(s.has_value()) << s.error().message;
  }

  std::vector<GpuUsageRecord> Filtered(const std::string& tenant, const GpuUsageFilter& filter) {
    auto page = store_->ListGpuUsage(TenantScope::Of(tenant), filter, {.after = "", .limit = 1000});
    EXPECT_TRUE(page.has_value()) << page.error().message;
    return page.has_value() ? page->items : std::vector<GpuUsageRecord>{};
  }

  void Write(std::vector<AllocationRecord> rows) {
    SchedulingCommit commit;
    commit.allocations = std::move(rows);
    auto written = store_->CommitScheduling(commit);
    ASSERT_TRUE(written.has_value()) << written.error().message;
  }

  MeterRound Tick(GpuMeter& meter) {
    auto round = meter.Tick();
    EXPECT_TRUE(round.has_value()) << round.error().message;
    return round.has_value() ? *round : MeterRound{};
  }

  std::vector<GpuUsageRecord> All(const std::string& tenant) {
    std::vector<GpuUsageRecord> out;
    ListOptions opts;
    opts.limit = 3;  // several pages: the cursor is walked too
    while (true) {
      auto page = store_->ListGpuUsage(TenantScope::Of(tenant), {}, opts);
      EXPECT_TRUE(page.has_value()) << page.error().message;
      if (!page.has_value()) return out;
      out.insert(out.end(), page->items.begin(), page->items.end());
      if (page->next_cursor.empty()) return out;
      opts.after = page->next_cursor;
    }
  }

  // milli-GPU·ms billed per subject.
  std::map<std::string, int64_t> Billed(const std::string& tenant) {
    std::map<std::string, int64_t> out;
    for (const auto& r : All(tenant)) out[r.subject_id] += r.gpu_milli_ms;
    return out;
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<GpuMeter> meter_;
  ManualClock clock_{kH0 + 5 * kMin};
};

TEST_P(GpuMeterTest, AllocationsAreBilledFromPlacementToReleaseAndNeverPlacedOnesNot) {
  ASSERT_NO_FATAL_FAILURE(Write({
      Allocation("al_run", "tn_a", kH0 + 10 * kMin, "running"),
      Allocation("al_rel", "tn_a", kH0 + 10 * kMin, "released", kH0 + 70 * kMin),
      Allocation("al_pre", "tn_a", kH0 + 20 * kMin, "preempted", kH0 + 30 * kMin),
      Allocation("al_pend", "tn_a", -1, "pending"),
      Allocation("al_rej", "tn_a", -1, "rejected", kH0 + 12 * kMin),
  }));
  clock_.AdvanceMillis(2 * kHourMs);  // kH0 + 2h05
  auto meter = NewMeter();
  MeterRound round = Tick(*meter);
  EXPECT_EQ(round.subjects, 3);
  EXPECT_EQ(round.skipped, 0);

  auto billed = Billed("tn_a");
  EXPECT_EQ(billed.size(), 3u);
  EXPECT_EQ(billed["al_run"], 2000 * (2 * kHourMs - 10 * kMin));  // up to the last hour
  EXPECT_EQ(billed["al_rel"], 2000 * 60 * kMin);
  EXPECT_EQ(billed["al_pre"], 2000 * 10 * kMin);
  for (const auto& r : All("tn_a")) {
    EXPECT_EQ(r.kind, "whole");
    EXPECT_EQ(r.model, "H100-80GB");
    EXPECT_EQ(r.project, "research");
  }

  // The running one is released; the next round closes it, and a round
  // after that has nothing to do.
  AllocationRecord released =
      Allocation("al_run", "tn_a", kH0 + 10 * kMin, "released", kH0 + 2 * kHourMs + 3 * kMin);
  ASSERT_NO_FATAL_FAILURE(Write({released}));
  Tick(*meter);
  EXPECT_EQ(Billed("tn_a")["al_run"], 2000 * (2 * kHourMs - 7 * kMin));
  clock_.AdvanceMillis(5 * kHourMs);
  round = Tick(*meter);
  EXPECT_EQ(round.subjects, 0);
  EXPECT_EQ(round.records, 0);
}

TEST_P(GpuMeterTest, ACrashAfterSomeRecordsLosesNothingAndCountsNothingTwice) {
  ASSERT_NO_FATAL_FAILURE(Write({
      Allocation("al_long", "tn_a", kH0 + 10 * kMin, "running"),
      Allocation("al_done", "tn_a", kH0 + 15 * kMin, "released", kH0 + 4 * kHourMs),
  }));
  clock_.AdvanceMillis(6 * kHourMs);  // kH0 + 6h05
  {
    // The first meter writes one record per subject and "dies".
    auto meter = NewMeter(/*max_records=*/1);
    EXPECT_EQ(Tick(*meter).records, 2);
  }
  EXPECT_EQ(All("tn_a").size(), 2u);
  // The process restarts: a new store and a new meter over the same rows.
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
  auto meter = NewMeter();
  Tick(*meter);
  // A round whose outcome the crashed process never learned is run again
  // from the same clock by yet another meter: nothing new is stored.
  auto again = NewMeter();
  Tick(*again);
  Tick(*meter);

  auto billed = Billed("tn_a");
  EXPECT_EQ(billed["al_long"], 2000 * (6 * kHourMs - 10 * kMin));
  EXPECT_EQ(billed["al_done"], 2000 * (4 * kHourMs - 15 * kMin));
  std::map<int64_t, int> starts;
  for (const auto& r : All("tn_a")) {
    if (r.subject_id == "al_done") ++starts[r.from_ms];
  }
  EXPECT_EQ(starts.size(), 4u);  // 00:15, 01:00, 02:00, 03:00 — once each
  for (const auto& [from, n] : starts) EXPECT_EQ(n, 1) << from;
}

TEST_P(GpuMeterTest, AReleaseWhileTheMeterWasDownIsBilledByTheNextMeter) {
  ASSERT_NO_FATAL_FAILURE(Write({Allocation("al_x", "tn_a", kH0 + 10 * kMin, "running")}));
  clock_.AdvanceMillis(kHourMs);
  {
    auto meter = NewMeter();
    Tick(*meter);  // bills 00:10..01:00
  }
  // While no meter runs, the allocation is released and time passes far
  // beyond any rescan window.
  ASSERT_NO_FATAL_FAILURE(
      Write({Allocation("al_x", "tn_a", kH0 + 10 * kMin, "released", kH0 + kHourMs + 20 * kMin)}));
  clock_.AdvanceMillis(30 * 24 * kHourMs);
  auto meter = NewMeter();
  Tick(*meter);
  EXPECT_EQ(Billed("tn_a")["al_x"], 2000 * 70 * kMin);
}

TEST_P(GpuMeterTest, AnEndedCatchUpCutShortIsFinishedByLaterRounds) {
  // Ended long before the rescan window of later rounds: found in the first
  // round (every row), finished in later ones because it has records.
  ASSERT_NO_FATAL_FAILURE(
      Write({Allocation("al_old", "tn_a", kH0, "released", kH0 + 5 * kHourMs)}));
  clock_.AdvanceMillis(48 * kHourMs);
  auto meter = NewMeter(/*max_records=*/2);
  for (int i = 0; i < 4; ++i) {
    clock_.AdvanceMillis(kHourMs);
    Tick(*meter);
  }
  EXPECT_EQ(Billed("tn_a")["al_old"], 2000 * 5 * kHourMs);
}

TEST_P(GpuMeterTest, ARowTheRuleRefusesIsSkippedAndTheRestBilled) {
  AllocationRecord bad = Allocation("al_bad", "tn_a", kH0 + 10 * kMin, "running");
  bad.kind = "teleport";
  ASSERT_NO_FATAL_FAILURE(Write({bad, Allocation("al_ok", "tn_a", kH0 + 10 * kMin, "running")}));
  clock_.AdvanceMillis(kHourMs);
  auto meter = NewMeter();
  MeterRound round = Tick(*meter);
  EXPECT_EQ(round.skipped, 1);
  auto billed = Billed("tn_a");
  EXPECT_EQ(billed.count("al_bad"), 0u);
  EXPECT_EQ(billed["al_ok"], 2000 * 50 * kMin);
}

TEST_P(GpuMeterTest, TheTimerMetersWithoutTicks) {
  ASSERT_NO_FATAL_FAILURE(
      Write({Allocation("al_t", "tn_a", kH0 + 10 * kMin, "released", kH0 + 20 * kMin)}));
  testing_support::ChangeSignal rounds;
  GpuMeterOptions o;
  o.interval_ms = 3'600'000;  // the first round runs at Start, the next much later
  o.on_round = [&rounds] { rounds.Notify(); };
  GpuMeter meter(*store_, clock_, o);
  meter.AddSource(std::make_unique<AllocationSubjectSource>(*store_));
  ASSERT_TRUE(meter.Start().has_value());
  EXPECT_TRUE(rounds.WaitUntil([&] { return !All("tn_a").empty(); }));
  meter.Stop();
  EXPECT_EQ(Billed("tn_a")["al_t"], 2000 * 10 * kMin);
}

TEST_P(GpuMeterTest, JobRunsAreRecordedPerAttemptBesideTheAllocationsTheyRanOn) {
  // job_1 runs on al_j1 from 00:12, is preempted at 00:40 (al_j1 released
  // at 00:41), waits, and its requeued attempt runs on al_j2 from 01:22.
  ASSERT_NO_FATAL_FAILURE(Write({
      Allocation("al_j1", "tn_a", kH0 + 10 * kMin, "preempted", kH0 + 41 * kMin),
      Allocation("al_j2", "tn_a", kH0 + 80 * kMin, "running"),
  }));
  JobRecord j = NewJob("job_1", "tn_a", "al_j1");
  j.state = "running";
  j.started_ms = kH0 + 12 * kMin;
  ASSERT_NO_FATAL_FAILURE(CommitJob(j));
  const JobRunRecord first{
      j.id, 1, "tn_a", "research", "al_j1", kH0 + 12 * kMin, kH0 + 40 * kMin, kH0 + 40 * kMin};
  j.attempt = 2;
  j.allocation_id = "al_j2";
  j.state = "pending";
  j.started_ms = -1;
  ASSERT_NO_FATAL_FAILURE(CommitJob(j, {first}));
  j.state = "running";
  j.started_ms = kH0 + 82 * kMin;
  ASSERT_NO_FATAL_FAILURE(CommitJob(j));
  // job_10, whose id starts like job_1's: never among job_1's records.
  JobRecord other = NewJob("job_10", "tn_a", "al_j2");
  other.state = "succeeded";
  other.started_ms = kH0 + 90 * kMin;
  other.ended_ms = kH0 + 95 * kMin;
  ASSERT_NO_FATAL_FAILURE(CommitJob(other));

  clock_.AdvanceMillis(3 * kHourMs);  // kH0 + 3h05
  auto meter = NewMeter();
  MeterRound round = Tick(*meter);
  EXPECT_EQ(round.subjects, 5);  // 2 allocations, 3 runs
  EXPECT_EQ(round.skipped, 0);
  auto billed = Billed("tn_a");
  EXPECT_EQ(billed["al_j1"], 2000 * 31 * kMin);
  EXPECT_EQ(billed["al_j2"], 2000 * (3 * kHourMs - 80 * kMin));
  EXPECT_EQ(billed["job_1.1"], 2000 * 28 * kMin);                  // start to preemption
  EXPECT_EQ(billed["job_1.2"], 2000 * (3 * kHourMs - 82 * kMin));  // up to the last hour
  EXPECT_EQ(billed["job_10.1"], 2000 * 5 * kMin);
  for (const auto& r : All("tn_a")) {
    const bool job = r.subject_id.rfind("job_", 0) == 0;
    EXPECT_EQ(r.subject_kind, job ? "job" : "allocation") << r.id;
    EXPECT_EQ(r.id, GpuUsageRecordId(r.subject_kind, r.subject_id, r.from_ms));
    EXPECT_EQ(r.kind, "whole");
    EXPECT_EQ(r.model, "H100-80GB");
  }

  // One job's records, by its id: its two attempts only.
  GpuUsageFilter of_job;
  of_job.job_id = "job_1";
  std::set<std::string> subjects;
  for (const auto& r : Filtered("tn_a", of_job)) subjects.insert(r.subject_id);
  EXPECT_EQ(subjects, (std::set<std::string>{"job_1.1", "job_1.2"}));
  EXPECT_TRUE(Filtered("tn_b", of_job).empty());  // another tenant's view
  GpuUsageFilter held;
  held.subject_kind = "allocation";
  for (const auto& r : Filtered("tn_a", held)) EXPECT_EQ(r.subject_kind, "allocation");
  // Sums per subject kind: held time and run time apart.
  auto sum_of = [&](const std::string& kind) {
    GpuUsageFilter f;
    f.subject_kind = kind;
    auto total = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), f, "");
    EXPECT_TRUE(total.has_value());
    return total.has_value() && !total->empty() ? total->front().gpu_milli_ms : -1;
  };
  EXPECT_EQ(sum_of("allocation"), billed["al_j1"] + billed["al_j2"]);
  EXPECT_EQ(sum_of("job"), billed["job_1.1"] + billed["job_1.2"] + billed["job_10.1"]);

  // The second attempt succeeds at 03:02: closed; then nothing is due.
  j.state = "succeeded";
  j.ended_ms = kH0 + 3 * kHourMs + 2 * kMin;
  j.updated_at = j.ended_ms;
  ASSERT_NO_FATAL_FAILURE(CommitJob(j));
  Tick(*meter);
  EXPECT_EQ(Billed("tn_a")["job_1.2"], 2000 * (3 * kHourMs - 80 * kMin));
  clock_.AdvanceMillis(kHourMs);
  round = Tick(*meter);
  EXPECT_EQ(round.records, 1);  // al_j2's next hour: it is still held
  EXPECT_EQ(round.subjects, 1);
}

TEST_P(GpuMeterTest, JobRecordsSurviveACrashOnceEach) {
  ASSERT_NO_FATAL_FAILURE(Write({Allocation("al_j", "tn_a", kH0 + 10 * kMin, "running")}));
  JobRecord j = NewJob("job_long", "tn_a", "al_j");
  j.state = "running";
  j.started_ms = kH0 + 15 * kMin;
  ASSERT_NO_FATAL_FAILURE(CommitJob(j));
  clock_.AdvanceMillis(4 * kHourMs);  // kH0 + 4h05
  {
    // The first meter writes one record per subject and "dies".
    auto meter = NewMeter(/*max_records=*/1);
    EXPECT_EQ(Tick(*meter).records, 2);
  }
  // While no meter runs, the job ends (the allocation stays held).
  j.state = "failed";
  j.ended_ms = kH0 + 4 * kHourMs + 1 * kMin;
  j.updated_at = j.ended_ms;
  ASSERT_NO_FATAL_FAILURE(CommitJob(j));
  // The process restarts: a new store and new meters over the same rows,
  // one of them repeating a round from the same clock.
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
  auto meter = NewMeter();
  Tick(*meter);
  auto again = NewMeter();
  Tick(*again);
  Tick(*meter);

  EXPECT_EQ(Billed("tn_a")["job_long.1"], 2000 * (4 * kHourMs - 14 * kMin));
  std::map<int64_t, int> starts;
  int closing = 0;
  for (const auto& r : All("tn_a")) {
    if (r.subject_id != "job_long.1") continue;
    ++starts[r.from_ms];
    closing += r.closes_subject ? 1 : 0;
  }
  EXPECT_EQ(starts.size(), 5u);  // 00:15, 01:00, 02:00, 03:00, 04:00 — once each
  for (const auto& [from, n] : starts) EXPECT_EQ(n, 1) << from;
  EXPECT_EQ(closing, 1);
}

// --- the store's table

GpuUsageRecord Record(const std::string& tenant, const std::string& subject, int64_t from,
                      int64_t to, bool closes = false, const std::string& model = "H100-80GB",
                      const std::string& project = "research") {
  GpuUsageRecord r;
  r.subject_kind = "allocation";
  r.subject_id = subject;
  r.id = GpuUsageRecordId(r.subject_kind, subject, from);
  r.tenant_id = tenant;
  r.project = project;
  r.model = model;
  r.kind = "whole";
  r.milli = 1000;
  r.from_ms = from;
  r.to_ms = to;
  r.gpu_milli_ms = 1000 * (to - from);
  r.closes_subject = closes;
  r.created_at = to;
  return r;
}

TEST_P(GpuMeterTest, TheStoreKeepsEachStretchOnceAndEachChainWhole) {
  const int64_t h1 = kH0 + kHourMs;
  ASSERT_TRUE(store_->InsertGpuUsageRecords({Record("tn_a", "al_1", kH0, h1)}).has_value());
  // The same record again, and a record with its id but other values: kept once, as first stored.
  GpuUsageRecord twin = Record("tn_a", "al_1", kH0, h1);
  twin.gpu_milli_ms = 1;
  ASSERT_TRUE(store_->InsertGpuUsageRecords({twin, Record("tn_a", "al_1", kH0, h1)}).has_value());
  // Not continuing the chain (a gap), then closing it, then past the close.
  ASSERT_TRUE(store_
                  ->InsertGpuUsageRecords({Record("tn_a", "al_1", h1 + kHourMs, h1 + 2 * kHourMs),
                                           Record("tn_a", "al_1", h1, h1 + 5 * kMin, true),
                                           Record("tn_a", "al_1", h1 + 5 * kMin, h1 + kHourMs)})
                  .has_value());
  auto all = All("tn_a");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].from_ms, h1);  // newest first
  EXPECT_TRUE(all[0].closes_subject);
  EXPECT_EQ(all[1].gpu_milli_ms, 1000 * kHourMs);
  auto points = store_->GpuMeteredPointsForMetering("allocation", {"al_1", "al_none"});
  ASSERT_TRUE(points.has_value());
  EXPECT_EQ(points->size(), 1u);
  EXPECT_EQ(points->at("al_1"), (GpuMeteredPoint{h1 + 5 * kMin, true}));
}

TEST_P(GpuMeterTest, TheStoreRefusesARecordThatCanNeverBeStoredAndStoresNothingOfItsBatch) {
  GpuUsageRecord backwards = Record("tn_a", "al_2", kH0 + kMin, kH0);
  backwards.gpu_milli_ms = 0;
  GpuUsageRecord negative = Record("tn_a", "al_3", kH0, kH0 + kMin);
  negative.gpu_milli_ms = -5;
  GpuUsageRecord no_tenant = Record("", "al_4", kH0, kH0 + kMin);
  GpuUsageRecord no_id = Record("tn_a", "al_5", kH0, kH0 + kMin);
  no_id.id.clear();
  for (const auto& bad : {backwards, negative, no_tenant, no_id}) {
    auto stored = store_->InsertGpuUsageRecords({Record("tn_a", "al_1", kH0, kH0 + kMin), bad});
    ASSERT_FALSE(stored.has_value());
    EXPECT_EQ(stored.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_TRUE(All("tn_a").empty());
}

TEST_P(GpuMeterTest, ListingsAndSumsAreTheTenantsOwn) {
  const int64_t h1 = kH0 + kHourMs;
  ASSERT_TRUE(store_
                  ->InsertGpuUsageRecords({
                      Record("tn_a", "al_1", kH0, h1),
                      Record("tn_a", "al_1", h1, h1 + 30 * kMin, true),
                      Record("tn_a", "al_2", kH0 + 30 * kMin, h1, false, "L40S", "web"),
                      Record("tn_b", "al_9", kH0, h1),
                  })
                  .has_value());
  EXPECT_EQ(All("tn_a").size(), 3u);
  EXPECT_EQ(All("tn_b").size(), 1u);
  EXPECT_TRUE(All("tn_c").empty());

  auto total = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), {}, "");
  ASSERT_TRUE(total.has_value());
  ASSERT_EQ(total->size(), 1u);
  EXPECT_EQ(total->at(0).records, 3);
  EXPECT_EQ(total->at(0).gpu_milli_ms, 1000 * (90 + 30) * kMin);

  auto by_model = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), {}, "model");
  ASSERT_TRUE(by_model.has_value());
  ASSERT_EQ(by_model->size(), 2u);
  EXPECT_EQ(by_model->at(0).model, "H100-80GB");
  EXPECT_EQ(by_model->at(0).kind, "whole");
  EXPECT_EQ(by_model->at(0).gpu_milli_ms, 1000 * 90 * kMin);
  EXPECT_EQ(by_model->at(1).model, "L40S");

  auto by_project = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), {}, "project");
  ASSERT_TRUE(by_project.has_value());
  ASSERT_EQ(by_project->size(), 2u);
  EXPECT_EQ(by_project->at(0).project, "research");
  EXPECT_EQ(by_project->at(1).project, "web");
  EXPECT_EQ(by_project->at(1).gpu_milli_ms, 1000 * 30 * kMin);

  GpuUsageFilter filter;
  filter.from = h1;
  auto later = store_->ListGpuUsage(TenantScope::Of("tn_a"), filter, {});
  ASSERT_TRUE(later.has_value());
  ASSERT_EQ(later->items.size(), 1u);
  EXPECT_EQ(later->items[0].from_ms, h1);
  filter = {};
  filter.model = "L40S";
  filter.project = "web";
  later = store_->ListGpuUsage(TenantScope::Of("tn_a"), filter, {});
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->items.size(), 1u);

  filter = {};
  filter.deployment_id = "dep_1";
  later = store_->ListGpuUsage(TenantScope::Of("tn_a"), filter, {});
  ASSERT_TRUE(later.has_value());
  EXPECT_TRUE(later->items.empty());

  auto bad = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), {}, "key");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  ListOptions opts;
  opts.after = "garbage";
  auto bad_cursor = store_->ListGpuUsage(TenantScope::Of("tn_a"), {}, opts);
  ASSERT_FALSE(bad_cursor.has_value());
  EXPECT_EQ(bad_cursor.error().code, ErrorCode::kInvalidArgument);
}

// A managed deployment's replicas hold GPUs as jobs; their records carry
// the deployment, so its GPU time sums apart from the tenant's own work.
TEST_P(GpuMeterTest, RecordsOfADeploymentsReplicasSumPerDeployment) {
  const int64_t h1 = kH0 + kHourMs;
  GpuUsageRecord replica = Record("tn_a", "al_1", kH0, h1);
  replica.deployment_id = "dep_chat";
  GpuUsageRecord other_replica = Record("tn_a", "al_2", kH0, kH0 + 30 * kMin);
  other_replica.deployment_id = "dep_embed";
  GpuUsageRecord own = Record("tn_a", "al_3", kH0, kH0 + 15 * kMin);
  GpuUsageRecord elsewhere = Record("tn_b", "al_9", kH0, h1);
  elsewhere.deployment_id = "dep_chat";
  ASSERT_TRUE(store_->InsertGpuUsageRecords({replica, other_replica, own, elsewhere}).has_value());
  auto per = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), {}, "deployment");
  ASSERT_TRUE(per.has_value()) << per.error().message;
  ASSERT_EQ(per->size(), 3u);
  EXPECT_EQ(per->at(0).deployment_id, "");
  EXPECT_EQ(per->at(0).gpu_milli_ms, 1000 * 15 * kMin);
  EXPECT_EQ(per->at(1).deployment_id, "dep_chat");
  EXPECT_EQ(per->at(1).gpu_milli_ms, 1000 * 60 * kMin);  // not tenant b's hour
  EXPECT_EQ(per->at(2).deployment_id, "dep_embed");
  GpuUsageFilter one;
  one.deployment_id = "dep_embed";
  auto listed = store_->ListGpuUsage(TenantScope::Of("tn_a"), one, {});
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].deployment_id, "dep_embed");
  EXPECT_EQ(listed->items[0].subject_id, "al_2");
}

INSTANTIATE_TEST_SUITE_P(Drivers, GpuMeterTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::metering
