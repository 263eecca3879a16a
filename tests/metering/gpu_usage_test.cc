// The pure rule that cuts held GPU time into hourly usage records: a table
// of intervals (crossing no, one and many hour boundaries, zero-length,
// ended before they started, metered past their end, the clock going back,
// the largest values) → the records due; a table of refused inputs; and a
// property test that meters random intervals through random, repeated and
// stale rounds into an idempotent store and checks the total.
#include "metering/gpu_usage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace atrium::metering {
namespace {

constexpr int64_t kMin = 60'000;
// An hour boundary (UTC): 2026-09-21T11:00:00Z.
constexpr int64_t kH0 = 1'789'999'200'000;

HeldInterval Held(int64_t start, int64_t end, int64_t milli = 1000) {
  HeldInterval h;
  h.subject_kind = "allocation";
  h.subject_id = "al_1";
  h.tenant_id = "tn_a";
  h.project = "research";
  h.model = "H100-80GB";
  h.kind = "whole";
  h.milli = milli;
  h.start_ms = start;
  h.end_ms = end;
  return h;
}

struct Span {
  int64_t from;
  int64_t to;
  bool closes;
  bool operator==(const Span&) const = default;
};

void PrintTo(const Span& s, std::ostream* os) {
  *os << "[" << s.from << ", " << s.to << ")" << (s.closes ? " closes" : "");
}

struct Case {
  const char* name;
  int64_t start;
  int64_t end;
  GpuMeteredPoint metered;
  int64_t now;
  MeteringLimits limits;
  std::vector<Span> want;
};

const Case kCases[] = {
    {"OpenWithinAnHourIsNotDueYet", kH0 + 10 * kMin, kStillHeld, {}, kH0 + 50 * kMin, {}, {}},
    {"OpenCrossingOneBoundary",
     kH0 + 10 * kMin,
     kStillHeld,
     {},
     kH0 + 65 * kMin,
     {},
     {{kH0 + 10 * kMin, kH0 + kHourMs, false}}},
    {"OpenCrossingManyBoundaries",
     kH0 + 10 * kMin,
     kStillHeld,
     {},
     kH0 + 3 * kHourMs + 1,
     {},
     {{kH0 + 10 * kMin, kH0 + kHourMs, false},
      {kH0 + kHourMs, kH0 + 2 * kHourMs, false},
      {kH0 + 2 * kHourMs, kH0 + 3 * kHourMs, false}}},
    {"OpenReachingABoundaryExactlyBillsIt",
     kH0 + 10 * kMin,
     kStillHeld,
     {},
     kH0 + kHourMs,
     {},
     {{kH0 + 10 * kMin, kH0 + kHourMs, false}}},
    {"EndedWithinAnHour",
     kH0 + 10 * kMin,
     kH0 + 20 * kMin,
     {},
     kH0 + 30 * kMin,
     {},
     {{kH0 + 10 * kMin, kH0 + 20 * kMin, true}}},
    {"EndedAfterTwoBoundaries",
     kH0 + 10 * kMin,
     kH0 + 2 * kHourMs + 5 * kMin,
     {},
     kH0 + 5 * kHourMs,
     {},
     {{kH0 + 10 * kMin, kH0 + kHourMs, false},
      {kH0 + kHourMs, kH0 + 2 * kHourMs, false},
      {kH0 + 2 * kHourMs, kH0 + 2 * kHourMs + 5 * kMin, true}}},
    {"EndedOnABoundaryClosesThere",
     kH0 + 10 * kMin,
     kH0 + kHourMs,
     {},
     kH0 + 2 * kHourMs,
     {},
     {{kH0 + 10 * kMin, kH0 + kHourMs, true}}},
    {"EndedOnABoundaryAlreadyMeteredClosesWithNothing",
     kH0 + 10 * kMin,
     kH0 + kHourMs,
     {kH0 + kHourMs, false},
     kH0 + 2 * kHourMs,
     {},
     {{kH0 + kHourMs, kH0 + kHourMs, true}}},
    {"ZeroLengthClosesWithNothing",
     kH0 + 10 * kMin,
     kH0 + 10 * kMin,
     {},
     kH0 + 11 * kMin,
     {},
     {{kH0 + 10 * kMin, kH0 + 10 * kMin, true}}},
    {"EndBeforeStartBillsNothing",
     kH0 + 10 * kMin,
     kH0 + 5 * kMin,
     {},
     kH0 + 11 * kMin,
     {},
     {{kH0 + 10 * kMin, kH0 + 10 * kMin, true}}},
    {"ClockGoingBackBillsNothing",
     kH0 + 10 * kMin,
     kStillHeld,
     {kH0 + 2 * kHourMs, false},
     kH0 + kHourMs + 5 * kMin,
     {},
     {}},
    {"ClockBeforeTheStartBillsNothing", kH0 + 10 * kMin, kStillHeld, {}, kH0, {}, {}},
    {"ResumesWhereTheStoredRecordsEnd",
     kH0 + 10 * kMin,
     kStillHeld,
     {kH0 + kHourMs, false},
     kH0 + 3 * kHourMs + 30 * kMin,
     {},
     {{kH0 + kHourMs, kH0 + 2 * kHourMs, false}, {kH0 + 2 * kHourMs, kH0 + 3 * kHourMs, false}}},
    {"ClosedIsNeverBilledAgain",
     kH0 + 10 * kMin,
     kH0 + 20 * kMin,
     {kH0 + 20 * kMin, true},
     kH0 + 5 * kHourMs,
     {},
     {}},
    {"AnEndIsBilledEvenWhenTheClockIsBehindIt",
     kH0 + 10 * kMin,
     kH0 + 90 * kMin,
     {},
     kH0 + 20 * kMin,
     {},
     {{kH0 + 10 * kMin, kH0 + kHourMs, false}, {kH0 + kHourMs, kH0 + 90 * kMin, true}}},
    {"TheOpenLagHoldsBackAFreshBoundary",
     kH0 + 10 * kMin,
     kStillHeld,
     {},
     kH0 + kHourMs + 30'000,
     {60'000, kDefaultMaxRecordsPerSubject},
     {}},
    {"TheOpenLagDoesNotHoldBackAnEnd",
     kH0 + 10 * kMin,
     kH0 + 20 * kMin,
     {},
     kH0 + 20 * kMin,
     {60'000, kDefaultMaxRecordsPerSubject},
     {{kH0 + 10 * kMin, kH0 + 20 * kMin, true}}},
    {"ACatchUpIsCutAtMaxRecords",
     kH0,
     kStillHeld,
     {},
     kH0 + 10 * kHourMs,
     {0, 3},
     {{kH0, kH0 + kHourMs, false},
      {kH0 + kHourMs, kH0 + 2 * kHourMs, false},
      {kH0 + 2 * kHourMs, kH0 + 3 * kHourMs, false}}},
    {"AnEndedCatchUpClosesOnlyWhenItGetsThere",
     kH0 + 10 * kMin,
     kH0 + 5 * kHourMs,
     {},
     kH0 + 6 * kHourMs,
     {0, 2},
     {{kH0 + 10 * kMin, kH0 + kHourMs, false}, {kH0 + kHourMs, kH0 + 2 * kHourMs, false}}},
    {"AnEndRecordedAfterItsHourWasMeteredClosesWithNothing",
     kH0 + 10 * kMin,
     kH0 + 90 * kMin,
     {kH0 + 2 * kHourMs, false},
     kH0 + 3 * kHourMs,
     {},
     {{kH0 + 2 * kHourMs, kH0 + 2 * kHourMs, true}}},
    {"TheEpochItself",
     0,
     kStillHeld,
     {},
     2 * kHourMs + 1,
     {},
     {{0, kHourMs, false}, {kHourMs, 2 * kHourMs, false}}},
    {"MeteredBeforeTheStartStartsAtTheStart",
     kH0 + 10 * kMin,
     kH0 + 20 * kMin,
     {kH0, false},
     kH0 + kHourMs,
     {},
     {{kH0 + 10 * kMin, kH0 + 20 * kMin, true}}},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class DueRecordsTable : public ::testing::TestWithParam<Case> {};

TEST_P(DueRecordsTable, GivesTheRecordsDue) {
  const Case& c = GetParam();
  const HeldInterval held = Held(c.start, c.end, 250);
  auto due = DueGpuUsageRecords(held, c.metered, c.now, c.limits);
  ASSERT_TRUE(due.has_value()) << due.error().message;
  std::vector<Span> got;
  for (const auto& r : *due) {
    got.push_back({r.from_ms, r.to_ms, r.closes_subject});
    EXPECT_EQ(r.id, "allocation:al_1:" + std::to_string(r.from_ms));
    EXPECT_EQ(r.gpu_milli_ms, 250 * (r.to_ms - r.from_ms));
    EXPECT_EQ(r.milli, 250);
    EXPECT_EQ(r.tenant_id, "tn_a");
    EXPECT_EQ(r.project, "research");
    EXPECT_EQ(r.model, "H100-80GB");
    EXPECT_EQ(r.kind, "whole");
    EXPECT_EQ(r.created_at, c.now);
    EXPECT_LE(r.to_ms - r.from_ms, kHourMs);
  }
  EXPECT_EQ(got, c.want);
}

INSTANTIATE_TEST_SUITE_P(Cases, DueRecordsTable, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

struct Refusal {
  const char* name;
  void (*spoil)(HeldInterval&, GpuMeteredPoint&, int64_t&);
};

const Refusal kRefusals[] = {
    {"UnknownSubjectKind",
     [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.subject_kind = "vm"; }},
    {"NoSubjectId", [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.subject_id.clear(); }},
    {"NoTenant", [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.tenant_id.clear(); }},
    {"UnknownGpuKind", [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.kind = "gpu"; }},
    {"NegativeMilli", [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.milli = -1; }},
    {"MilliAboveTheBound",
     [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.milli = kMaxMeteredMilli + 1; }},
    {"NegativeStart", [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.start_ms = -5; }},
    {"EndPastYear9999",
     [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.end_ms = kMaxMeteredTimeMs + 1; }},
    {"NegativeEndOtherThanStillHeld",
     [](HeldInterval& h, GpuMeteredPoint&, int64_t&) { h.end_ms = -2; }},
    {"MeteredPastYear9999",
     [](HeldInterval&, GpuMeteredPoint& m, int64_t&) { m.to_ms = INT64_MAX; }},
    {"NowPastYear9999", [](HeldInterval&, GpuMeteredPoint&, int64_t& now) { now = INT64_MAX; }},
    {"NegativeNow", [](HeldInterval&, GpuMeteredPoint&, int64_t& now) { now = -1; }},
};

void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

class RefusedIntervals : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusedIntervals, AreRefusedWithAClearError) {
  HeldInterval held = Held(kH0, kStillHeld);
  GpuMeteredPoint metered;
  int64_t now = kH0 + 3 * kHourMs;
  ASSERT_TRUE(DueGpuUsageRecords(held, metered, now).has_value());
  GetParam().spoil(held, metered, now);
  auto due = DueGpuUsageRecords(held, metered, now);
  ASSERT_FALSE(due.has_value());
  EXPECT_EQ(due.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(due.error().message.empty());
}

INSTANTIATE_TEST_SUITE_P(Cases, RefusedIntervals, ::testing::ValuesIn(kRefusals),
                         [](const ::testing::TestParamInfo<Refusal>& info) {
                           return std::string(info.param.name);
                         });

TEST(DueGpuUsageRecords, TheLargestValuesDoNotOverflow) {
  // A million GPUs for a whole hour: 3.6e15 milli-GPU·ms, exact.
  HeldInterval held = Held(kH0, kH0 + kHourMs, kMaxMeteredMilli);
  auto due = DueGpuUsageRecords(held, {}, kH0 + kHourMs);
  ASSERT_TRUE(due.has_value());
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ(due->front().gpu_milli_ms, int64_t{3'600'000'000'000'000});
  // Open at the last representable hour, with the clock at the bound.
  held = Held(kMaxMeteredTimeMs - kHourMs, kStillHeld, kMaxMeteredMilli);
  due = DueGpuUsageRecords(held, {}, kMaxMeteredTimeMs);
  ASSERT_TRUE(due.has_value());
  for (const auto& r : *due) EXPECT_LE(r.to_ms, kMaxMeteredTimeMs);
}

TEST(DueGpuUsageRecords, MigKeepsItsProfileAndOtherKindsDoNot) {
  HeldInterval held = Held(kH0, kH0 + kMin, 428);
  held.kind = "mig";
  held.mig_profile = "3g.40gb";
  auto due = DueGpuUsageRecords(held, {}, kH0 + kMin);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->at(0).mig_profile, "3g.40gb");
  held.kind = "share";
  due = DueGpuUsageRecords(held, {}, kH0 + kMin);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->at(0).mig_profile, "");
}

TEST(GpuKindOfAllocation, NamesTheBilledKind) {
  EXPECT_EQ(GpuKindOfAllocation("gpu"), "whole");
  EXPECT_EQ(GpuKindOfAllocation("mig"), "mig");
  EXPECT_EQ(GpuKindOfAllocation("share"), "share");
  EXPECT_EQ(GpuKindOfAllocation("node"), "node");
  EXPECT_EQ(GpuKindOfAllocation("vm"), "");
}

// A store as the meter sees it: records by id, insert-if-absent, in order,
// each subject's metered point read back from its records.
class IdempotentStore {
 public:
  void Insert(const std::vector<GpuUsageRecord>& records) {
    for (const auto& r : records) records_.emplace(r.id, r);
  }
  GpuMeteredPoint Metered() const {
    GpuMeteredPoint p;
    for (const auto& [id, r] : records_) {
      p.to_ms = std::max(p.to_ms, r.to_ms);
      p.closed = p.closed || r.closes_subject;
    }
    return p;
  }
  const std::map<std::string, GpuUsageRecord>& records() const { return records_; }

 private:
  std::map<std::string, GpuUsageRecord> records_;
};

// Random intervals metered by rounds at random times, some rounds repeated
// from a stale metered point (a meter that crashed after computing, or
// whose write was lost and redone), some with the clock stepped back, some
// cut short by max_records: the stored records tile [start, end) exactly,
// one closing record, the total is milli × held time, nothing twice.
TEST(DueGpuUsageRecords, RandomRoundsBillEachIntervalExactlyOnce) {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t start = kH0 + static_cast<int64_t>(rng() % (5 * kHourMs));
    const int64_t length = static_cast<int64_t>(rng() % (30 * kHourMs));
    const int64_t end = start + (trial % 10 == 0 ? 0 : length);
    const int64_t milli = 1 + static_cast<int64_t>(rng() % 8000);
    IdempotentStore store;
    GpuMeteredPoint stale;
    int64_t now = start;
    bool ended_yet = false;  // once recorded, an end stays
    for (int round = 0; round < 200 && !store.Metered().closed; ++round) {
      now += static_cast<int64_t>(rng() % (3 * kHourMs)) - kHourMs / 2;  // sometimes back
      ended_yet = ended_yet || now >= end;
      HeldInterval held = Held(start, ended_yet ? end : kStillHeld, milli);
      MeteringLimits limits{0, 1 + static_cast<size_t>(rng() % 4)};
      const GpuMeteredPoint metered = rng() % 4 == 0 ? stale : store.Metered();
      auto due = DueGpuUsageRecords(held, metered, std::max<int64_t>(now, 0), limits);
      ASSERT_TRUE(due.has_value()) << due.error().message;
      stale = store.Metered();
      // Only what continues the stored chain reaches the store (the real
      // store skips the rest the same way: same id, or not contiguous).
      std::vector<GpuUsageRecord> kept;
      GpuMeteredPoint point = store.Metered();
      for (const auto& r : *due) {
        if (point.closed || (point.to_ms != -1 && r.from_ms != point.to_ms)) continue;
        if (store.records().count(r.id)) continue;
        kept.push_back(r);
        point = {r.to_ms, r.closes_subject};
      }
      store.Insert(kept);
    }
    ASSERT_TRUE(store.Metered().closed) << "trial " << trial;
    int64_t total = 0;
    int64_t cursor = start;
    int closing = 0;
    for (const auto& [id, r] : store.records()) total += r.gpu_milli_ms;
    std::vector<GpuUsageRecord> ordered;
    for (const auto& [id, r] : store.records()) ordered.push_back(r);
    std::sort(ordered.begin(), ordered.end(),
              [](const auto& a, const auto& b) { return a.from_ms < b.from_ms; });
    for (const auto& r : ordered) {
      EXPECT_EQ(r.from_ms, cursor) << "trial " << trial;
      cursor = r.to_ms;
      closing += r.closes_subject ? 1 : 0;
    }
    EXPECT_EQ(closing, 1) << "trial " << trial;
    EXPECT_EQ(cursor, end) << "trial " << trial;
    EXPECT_EQ(total, milli * (end - start)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace atrium::metering
