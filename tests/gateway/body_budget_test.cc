#include "gateway/body_budget.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

TEST(BodyBudgetTest, HoldsAtMostTheTotalAndFreesWhatIsReleased) {
  BodyBudget budget({1000, 500});
  EXPECT_TRUE(budget.Reserve(600));
  EXPECT_TRUE(budget.Reserve(400));
  EXPECT_FALSE(budget.Reserve(1));  // full: nothing taken
  EXPECT_EQ(budget.held(), 1000);
  budget.Release(400);
  EXPECT_TRUE(budget.Reserve(0));
  EXPECT_FALSE(budget.Reserve(401));
  EXPECT_TRUE(budget.Reserve(400));
  budget.Release(1000);
  EXPECT_EQ(budget.held(), 0);
  EXPECT_FALSE(budget.Reserve(1001));  // never, however empty
  EXPECT_FALSE(budget.Reserve(-1));
}

TEST(BodyBudgetTest, EachTenantsQueuedBodiesHaveTheirOwnBudget) {
  BodyBudget budget({1 << 20, 500});
  EXPECT_TRUE(budget.ReserveQueued("tn_a", 300));
  EXPECT_FALSE(budget.ReserveQueued("tn_a", 201));
  EXPECT_TRUE(budget.ReserveQueued("tn_b", 500));  // another tenant's backlog is not tn_a's
  EXPECT_TRUE(budget.ReserveQueued("tn_a", 200));
  EXPECT_EQ(budget.queued("tn_a"), 500);
  budget.ReleaseQueued("tn_a", 300);
  EXPECT_EQ(budget.queued("tn_a"), 200);
  budget.ReleaseQueued("tn_a", 200);
  budget.ReleaseQueued("tn_b", 500);
  EXPECT_EQ(budget.queued("tn_a"), 0);
  EXPECT_EQ(budget.queued("tn_b"), 0);
  EXPECT_EQ(budget.held(), 0);  // the queue's budget is apart from the total
}

}  // namespace
}  // namespace atrium::gateway
