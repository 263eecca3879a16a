#include "gateway/slot_shares.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

TEST(SlotSharesTest, ALoneTenantMayUseEverySlot) {
  SlotShares s;
  s.Seen("a", 1, 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(s.MayStart("a", 8, 8 - i, 0)) << i;
    s.Started("a");
  }
  EXPECT_FALSE(s.MayStart("a", 8, 0, 0));
}

TEST(SlotSharesTest, AFloodingTenantLeavesALightOnesShareFree) {
  SlotShares s;
  s.Seen("a", 1, 0);
  s.Seen("b", 1, 0);
  s.Started("b");  // b runs 1 of its 4
  int a = 0;
  while (s.MayStart("a", 8, 8 - 1 - a, 0)) {
    s.Started("a");
    ++a;
  }
  EXPECT_EQ(a, 4);  // its own share; the 3 b has not used stay free
  EXPECT_TRUE(s.MayStart("b", 8, 3, 0));
  // Once b has been quiet for the window, a may take them.
  s.Finished("b");
  EXPECT_FALSE(s.MayStart("a", 8, 4, 1000));
  EXPECT_TRUE(s.MayStart("a", 8, 4, 2500));
}

TEST(SlotSharesTest, AboveItsShareATenantStillGetsSlotsNobodyReserves) {
  SlotShares s;
  s.Seen("a", 1, 0);
  s.Seen("b", 1, 0);
  for (int i = 0; i < 4; ++i) s.Started("b");  // b at its share: nothing reserved for it
  for (int i = 0; i < 4; ++i) s.Started("a");
  EXPECT_FALSE(s.MayStart("a", 8, 0, 0));
  EXPECT_TRUE(s.MayStart("b", 10, 2, 0));  // capacity grew: 5 each, b below
}

TEST(SlotSharesTest, SharesFollowWeights) {
  SlotShares s;
  s.Seen("a", 3, 0);
  s.Seen("b", 1, 0);
  EXPECT_DOUBLE_EQ(s.ShareOf("a", 8, 0), 6.0);
  EXPECT_DOUBLE_EQ(s.ShareOf("b", 8, 0), 2.0);
  for (int i = 0; i < 6; ++i) s.Started("a");
  // a is at its share; b's 2 must stay free.
  EXPECT_FALSE(s.MayStart("a", 8, 2, 0));
  EXPECT_TRUE(s.MayStart("a", 8, 3, 0));
}

TEST(SlotSharesTest, TwoBackloggedTenantsSettleOnEqualSlots) {
  SlotShares s;
  s.Seen("a", 1, 0);
  s.Seen("b", 1, 0);
  int in_flight[2] = {0, 0};
  const char* names[2] = {"a", "b"};
  // Alternate offers; each takes a slot whenever it may.
  for (int round = 0; round < 40; ++round) {
    for (int t = 0; t < 2; ++t) {
      int free = 8 - in_flight[0] - in_flight[1];
      if (s.MayStart(names[t], 8, free, 0)) {
        s.Started(names[t]);
        ++in_flight[t];
      }
    }
  }
  EXPECT_EQ(in_flight[0], 4);
  EXPECT_EQ(in_flight[1], 4);
}

TEST(SlotSharesTest, SweepForgetsIdleTenants) {
  SlotShares s;
  s.Seen("a", 1, 0);
  s.Seen("b", 1, 0);
  s.Started("b");
  s.Sweep(10'000);
  EXPECT_EQ(s.tracked(), 1u);  // b still runs a request
}

}  // namespace
}  // namespace atrium::gateway
