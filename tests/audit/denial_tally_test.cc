#include "audit/denial_tally.h"

#include <gtest/gtest.h>

namespace atrium::audit {
namespace {

const DenialKey kBadLogin{"auth.login", "denied", 401, "unauthenticated"};
const DenialKey kThrottled{"auth.login", "denied", 429, "resource_exhausted"};
constexpr int64_t kMinute = 60'000;
constexpr int64_t kT0 = 1'790'000'080'000;  // 40 s into a minute

TEST(DenialTallyTest, AFloodInOneMinuteIsOneRecordPerKey) {
  DenialTally tally;
  for (int i = 0; i < 10'000; ++i) {
    auto closed = tally.Add(kBadLogin, "10.0.0." + std::to_string(i % 7),
                            "req-" + std::to_string(i), kT0 + i);
    EXPECT_TRUE(closed.empty());
  }
  (void)tally.Add(kThrottled, "10.0.0.1", "req-t", kT0 + 5);
  EXPECT_EQ(tally.total(), 10'001);
  EXPECT_EQ(tally.pending(), 10'001);
  EXPECT_TRUE(tally.Flush(kT0 + 19'999).empty()) << "the minute is not over";

  auto closed = tally.Flush(kT0 + 20'000);  // the next minute begins
  ASSERT_EQ(closed.size(), 2u);
  const AuditRecord& flood = closed[1].status == 401 ? closed[1] : closed[0];
  EXPECT_EQ(flood.action, "auth.login");
  EXPECT_EQ(flood.actor, "anonymous");
  EXPECT_EQ(flood.tenant_id, "") << "the platform chain";
  EXPECT_EQ(flood.outcome, "denied");
  EXPECT_EQ(flood.request_id, "req-0");
  EXPECT_EQ(flood.source, "10.0.0.0");
  EXPECT_EQ(flood.target,
            "unauthenticated: 10000 requests from 7 addresses (unauthenticated) in "
            "[1790000040000, 1790000100000)");
  EXPECT_EQ(tally.pending(), 0);
  EXPECT_EQ(tally.total(), 10'001) << "the metric keeps counting across windows";
}

TEST(DenialTallyTest, ALaterDenialClosesTheEarlierMinute) {
  DenialTally tally;
  EXPECT_TRUE(tally.Add(kBadLogin, "a", "r1", kT0).empty());
  auto closed = tally.Add(kBadLogin, "a", "r2", kT0 + kMinute);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].request_id, "r1");
  EXPECT_EQ(tally.pending(), 1);
  auto rest = tally.FlushAll();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].request_id, "r2");
  EXPECT_EQ(tally.pending(), 0);
}

TEST(DenialTallyTest, DistinctSourcesAreBounded) {
  DenialTally tally(kMinute, /*max_sources=*/3);
  for (int i = 0; i < 50; ++i) (void)tally.Add(kBadLogin, "s" + std::to_string(i), "r", kT0);
  auto all = tally.FlushAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_NE(all[0].target.find("50 requests from 3+ addresses"), std::string::npos)
      << all[0].target;
}

}  // namespace
}  // namespace atrium::audit
