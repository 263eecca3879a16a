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
  // While b has a request waiting it stays active; once it runs and waits
  // for nothing, a may take them.
  s.Queued("b");
  s.Finished("b");
  EXPECT_FALSE(s.MayStart("a", 8, 4, 0));
  s.Dequeued("b");
  EXPECT_TRUE(s.MayStart("a", 8, 4, 0));
}

// The issue: one rejected request every 1.5 s (billed 0) kept a tenant
// "active" for a window after it, which kept its share of the slots from a
// flooding tenant: 2 of 4 slots sat idle throughout.
TEST(SlotSharesTest, ATenantWhoseRequestsEndedHoldsNoSlotsBack) {
  SlotShares s;
  s.Seen("b", 1, 0);
  s.Started("b");
  s.Finished("b");    // refused by the model server at once
  s.Seen("b", 1, 1);  // and another, refused before it ran
  s.Seen("a", 1, 1);
  int a = 0;
  while (s.MayStart("a", 4, 4 - a, 1)) {
    s.Started("a");
    ++a;
  }
  EXPECT_EQ(a, 4) << "b runs and waits for nothing: every slot is a's";
  // Pacing and burst slots still see b for the window: they keep no slot
  // within the capacity idle.
  EXPECT_TRUE(s.Contended("a", 1));
  EXPECT_FALSE(s.Contended("a", 2001));
}

TEST(SlotSharesTest, WaitingRequestsAreTakenOffTheSlotsKeptForATenant) {
  SlotShares s;
  s.Seen("a", 1, 0);
  s.Seen("b", 1, 0);
  for (int i = 0; i < 4; ++i) s.Started("b");  // b at its share of 8
  for (int i = 0; i < 3; ++i) s.Started("a");  // a one below its share, 1 free
  // With nothing of a's waiting, that last free slot is kept for a.
  EXPECT_FALSE(s.MayStart("b", 8, 1, 0));
  // With a's requests waiting, it is not: the fair queue orders a's waiting
  // requests and b's.
  auto a_backlog = [](const std::string& tenant) { return tenant == "a" ? int64_t{50} : 0; };
  EXPECT_TRUE(s.MayStart("b", 8, 1, 0, a_backlog));
  EXPECT_TRUE(s.MayStart("a", 8, 1, 0, a_backlog));
  // A light tenant with one request waiting still has the rest kept: b runs
  // 1 of its 4 with 1 waiting, so 2 of the 4 free slots stay b's.
  SlotShares light;
  light.Seen("a", 1, 0);
  light.Seen("b", 1, 0);
  light.Started("b");
  for (int i = 0; i < 3; ++i) light.Started("a");
  auto b_one = [](const std::string& tenant) { return tenant == "b" ? int64_t{1} : 0; };
  EXPECT_TRUE(light.MayStart("a", 8, 4, 0, b_one));  // a below its share
  light.Started("a");
  EXPECT_TRUE(light.MayStart("a", 8, 3, 0, b_one));  // leaves 2 free
  light.Started("a");
  EXPECT_FALSE(light.MayStart("a", 8, 2, 0, b_one));  // would leave 1 of the 2
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
  s.Queued("b");  // active: slots are kept for it
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

TEST(SlotSharesTest, ContentionAndShareOfWhatRunsDecidePacing) {
  SlotShares s;
  s.Seen("a", 1, 0);
  for (int i = 0; i < 6; ++i) s.Started("a");
  EXPECT_FALSE(s.Contended("a", 0)) << "alone";
  EXPECT_FALSE(s.BelowShare("a", 6, 0)) << "runs all of what runs";
  s.Seen("b", 3, 0);  // weight 3: three quarters of any slots
  s.Started("b");
  EXPECT_TRUE(s.Contended("a", 0));
  EXPECT_TRUE(s.Contended("b", 0));
  // Of the 7 running, a's share is 1.75 and b's 5.25.
  EXPECT_FALSE(s.BelowShare("a", 7, 0));
  EXPECT_TRUE(s.BelowShare("b", 7, 0));
  // b quiet past the window, nothing of it running: a is alone again.
  s.Finished("b");
  EXPECT_FALSE(s.Contended("a", 2500));
  EXPECT_TRUE(s.BelowShare("c", 7, 2500)) << "an unknown tenant runs nothing";
  EXPECT_TRUE(s.BelowShare("b", 0, 2500)) << "running nothing is below any share, even of 0";
}

TEST(SlotSharesTest, ATenantServedLessThanItsWeightedShareLatelyIsLight) {
  SlotShares s(/*active_window_ms=*/2000, /*usage_half_life_ms=*/1000);
  s.Seen("a", 1, 0);
  s.Served("a", 1000, 0);
  EXPECT_FALSE(s.Light("a", 0)) << "alone: nobody to be light against";
  s.Seen("b", 1, 0);
  EXPECT_TRUE(s.Light("b", 0)) << "served nothing while a was served";
  EXPECT_FALSE(s.Light("a", 0));
  EXPECT_TRUE(s.Light("c", 0)) << "an unknown tenant was served nothing";
  // b served as much as a: neither is behind.
  s.Served("b", 1000, 0);
  EXPECT_FALSE(s.Light("a", 0));
  EXPECT_FALSE(s.Light("b", 0));
  // Older service counts for less: a's 1000 tokens from one half-life ago
  // weigh 500 against b's fresh 600.
  SlotShares fresh(2000, 1000);
  fresh.Seen("a", 1, 0);
  fresh.Seen("b", 1, 1000);
  fresh.Served("a", 1000, 0);
  fresh.Served("b", 600, 1000);
  EXPECT_TRUE(fresh.Light("a", 1000));
  EXPECT_FALSE(fresh.Light("b", 1000));
  // Weights: b with weight 3 is light until it has three times a's service.
  SlotShares weighted;
  weighted.Seen("a", 1, 0);
  weighted.Seen("b", 3, 0);
  weighted.Served("a", 100, 0);
  weighted.Served("b", 250, 0);
  EXPECT_TRUE(weighted.Light("b", 0));
  EXPECT_FALSE(weighted.Light("a", 0));
  weighted.Served("b", 100, 0);
  EXPECT_FALSE(weighted.Light("b", 0));
  EXPECT_TRUE(weighted.Light("a", 0));
  // Once the other is idle past the window, nobody is light.
  EXPECT_FALSE(weighted.Light("a", 5000));
  // Nothing served at all: nobody is behind.
  SlotShares none;
  none.Seen("a", 1, 0);
  none.Seen("b", 1, 0);
  EXPECT_FALSE(none.Light("a", 0));
  EXPECT_FALSE(none.Light("b", 0));
  // A correction below zero leaves nothing, not a debt.
  none.Served("a", 100, 0);
  none.Served("a", -500, 0);
  none.Served("b", 1, 0);
  EXPECT_TRUE(none.Light("a", 0));
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
