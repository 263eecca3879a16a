#include "gateway/refusal_tally.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

// Issue 15 #10: each refused request was a usage record of its own; one
// key's flood of 535,000 refusals in 35 s grew the database by 162 MB.
// Refusals are counted per tenant, key, reason and minute.
TEST(RefusalTallyTest, AFloodIsOneCountPerKeyReasonAndMinute) {
  RefusalTally tally;
  for (int i = 0; i < 535'000; ++i) {
    tally.Add("tn_a", "key_1", "rate_limit_exceeded", 120'000 + i % 35'000);
  }
  tally.Add("tn_a", "key_1", "model_not_found", 130'000);
  tally.Add("tn_a", "key_2", "rate_limit_exceeded", 179'999);
  tally.Add("tn_a", "key_2", "rate_limit_exceeded", 180'000);  // the next minute
  EXPECT_EQ(tally.rows(), 4u);
  EXPECT_EQ(tally.total(), 535'003);
  std::vector<RefusalCount> counts = tally.Take();
  ASSERT_EQ(counts.size(), 4u);
  // Oldest minute first.
  EXPECT_EQ(counts[0].minute_at, 120'000);
  EXPECT_EQ(counts[0].tenant_id, "tn_a");
  EXPECT_EQ(counts[0].key_id, "key_1");
  EXPECT_EQ(counts[0].reason, "model_not_found");
  EXPECT_EQ(counts[0].count, 1);
  EXPECT_EQ(counts[1].reason, "rate_limit_exceeded");
  EXPECT_EQ(counts[1].count, 535'000);
  EXPECT_EQ(counts[2].key_id, "key_2");
  EXPECT_EQ(counts[2].count, 1);
  EXPECT_EQ(counts[3].minute_at, 180'000);
  EXPECT_EQ(tally.rows(), 0u);
  EXPECT_TRUE(tally.Take().empty());
}

TEST(RefusalTallyTest, CountsThatCouldNotBeStoredAreRestored) {
  RefusalTally tally;
  tally.Add("tn_a", "key_1", "rate_limit_exceeded", 60'000);
  std::vector<RefusalCount> failed = tally.Take();
  tally.Add("tn_a", "key_1", "rate_limit_exceeded", 61'000);
  tally.Restore(failed);
  std::vector<RefusalCount> counts = tally.Take();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].count, 2);
}

TEST(RefusalTallyTest, MemoryIsBoundedWhileNothingIsTaken) {
  RefusalTally tally(3);
  for (int minute = 0; minute < 10; ++minute) tally.Add("tn_a", "key_1", "x", minute * 60'000);
  EXPECT_EQ(tally.rows(), 3u);
  EXPECT_EQ(tally.total(), 3);
  EXPECT_EQ(tally.dropped(), 7);
  // Rows already held keep counting.
  tally.Add("tn_a", "key_1", "x", 0);
  EXPECT_EQ(tally.Take()[0].count, 2);
}

}  // namespace
}  // namespace atrium::gateway
