// The gateway's budget ledger: worst cases held all or none, the share of
// the headroom with other gateways, real costs held until billing counts
// them, and a model priced at zero never refused.
#include "gateway/budget_ledger.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

// One cent per input token, ten per output token (micro-minor per million).
constexpr TokenRates kRates{1'000'000'000'000, 10'000'000'000'000, 500'000'000'000};

BudgetView OneBudget(int64_t limit, int64_t spent = 0, int64_t computed_at = 0, int64_t others = 0,
                     int64_t holders = 0) {
  BudgetView v;
  TenantBudgets& t = v.tenants["tn_a"];
  t.rates["*"] = kRates;
  t.rates["free-model"] = TokenRates{};
  t.budgets.push_back(
      {"bud_t", "tenant", "", limit, spent, computed_at, others, holders, true, "1.00 USD"});
  return v;
}

TEST(BudgetLedgerTest, CostsRoundUpAndCachedTokensCostTheirOwnPrice) {
  EXPECT_EQ(BudgetLedger::CostOf(kRates, 10, 2, 0), 30);
  EXPECT_EQ(BudgetLedger::CostOf(kRates, 10, 2, 4), 28);             // 6 + 2 + 20
  EXPECT_EQ(BudgetLedger::CostOf(TokenRates{1, 1, 1}, 1, 0, 0), 1);  // a millionth rounds up
  EXPECT_EQ(BudgetLedger::CostOf(kRates, -5, -5, 0), 0);
  // No overflow at absurd counts: capped far below int64's end.
  EXPECT_GT(BudgetLedger::CostOf(TokenRates{INT64_MAX, INT64_MAX, 0}, INT64_MAX, INT64_MAX, 0), 0);
}

TEST(BudgetLedgerTest, ConcurrentRequestsCannotAllPassANearlySpentBudget) {
  BudgetLedger ledger;
  ledger.Update(OneBudget(100, 40), 0);
  // Worst case 10 + 20 = 30 cents each: two fit in the 60 left, a third not.
  auto a = ledger.Reserve("tn_a", "k1", "m", 10, 2);
  auto b = ledger.Reserve("tn_a", "k1", "m", 10, 2);
  auto c = ledger.Reserve("tn_a", "k1", "m", 10, 2);
  EXPECT_TRUE(a.allowed);
  EXPECT_TRUE(b.allowed);
  EXPECT_FALSE(c.allowed);
  EXPECT_NE(c.reason.find("bud_t"), std::string::npos) << c.reason;
  ASSERT_EQ(ledger.Holds().size(), 1u);
  EXPECT_EQ(ledger.Holds()[0].amount_minor, 60);
  // One ends without a record: its hold goes back, another fits.
  ledger.Release(a.hold);
  EXPECT_TRUE(ledger.Reserve("tn_a", "k1", "m", 10, 2).allowed);
}

TEST(BudgetLedgerTest, ARealCostIsHeldUntilBillingCountedItAfterShipping) {
  BudgetLedger ledger;
  ledger.Update(OneBudget(100, 0, 0), 0);
  auto a = ledger.Reserve("tn_a", "", "m", 10, 9);  // worst case 100
  ASSERT_TRUE(a.allowed);
  EXPECT_EQ(ledger.Settle(a.hold, "req_1", 10, 1, 0, 1'000), 20);
  EXPECT_EQ(ledger.Holds()[0].amount_minor, 20);
  // A count from before the record was shipped keeps it held.
  ledger.Update(OneBudget(100, 0, 5'000), 5'000);
  EXPECT_EQ(ledger.pending(), 1u);
  ledger.Shipped({"req_1"}, 6'000);
  ledger.Update(OneBudget(100, 0, 6'500), 6'500);  // within the skew margin
  EXPECT_EQ(ledger.pending(), 1u);
  // Counted a second after shipping: billing has it (spent 20), the hold goes.
  ledger.Update(OneBudget(100, 20, 7'000), 7'000);
  EXPECT_EQ(ledger.pending(), 0u);
  EXPECT_TRUE(ledger.Holds().empty());
  // Headroom is now 80: a worst case of 90 is refused, 80 passes.
  EXPECT_FALSE(ledger.Reserve("tn_a", "", "m", 0, 9).allowed);
  EXPECT_TRUE(ledger.Reserve("tn_a", "", "m", 0, 8).allowed);
}

TEST(BudgetLedgerTest, ARecordNeverShippedIsLetGoAfterTheForgetTime) {
  BudgetLedger ledger;
  ledger.Update(OneBudget(100), 0);
  auto a = ledger.Reserve("tn_a", "", "m", 10, 0);
  ledger.Settle(a.hold, "req_lost", 10, 0, 0, 0);
  ledger.Update(OneBudget(100), BudgetLedger::kForgetMs - 1);
  EXPECT_EQ(ledger.pending(), 1u);
  ledger.Update(OneBudget(100), BudgetLedger::kForgetMs);
  EXPECT_EQ(ledger.pending(), 0u);
}

TEST(BudgetLedgerTest, OtherGatewaysTakeTheirShareOfTheHeadroom) {
  BudgetLedger ledger;
  // 100 - 0 spent - 20 held elsewhere = 80, shared with one other: 40.
  ledger.Update(OneBudget(100, 0, 0, 20, 1), 0);
  EXPECT_TRUE(ledger.Reserve("tn_a", "", "m", 0, 4).allowed);
  EXPECT_FALSE(ledger.Reserve("tn_a", "", "m", 0, 1).allowed);
}

TEST(BudgetLedgerTest, AZeroPricedModelAndOtherTenantsAreNeverRefused) {
  BudgetLedger ledger;
  ledger.Update(OneBudget(100, 500), 0);  // spent five times over
  EXPECT_FALSE(ledger.Reserve("tn_a", "", "m", 1, 0).allowed);
  auto free = ledger.Reserve("tn_a", "", "free-model", 1'000'000, 1'000'000);
  EXPECT_TRUE(free.allowed);
  EXPECT_TRUE(ledger.Reserve("tn_b", "", "m", 1'000'000, 1'000'000).allowed);
  EXPECT_TRUE(ledger.Reserve("tn_b", "", "m", 1, 1).hold.empty());
}

TEST(BudgetLedgerTest, AKeyBudgetBindsOnlyItsKeyAndSoftBudgetsOnlyCount) {
  BudgetView v = OneBudget(1'000'000);
  v.tenants["tn_a"].budgets.push_back({"bud_k", "key", "k1", 10, 0, 0, 0, 0, true, "0.10 USD"});
  v.tenants["tn_a"].budgets.push_back({"bud_soft", "tenant", "", 1, 0, 0, 0, 0, false, "0.01 USD"});
  BudgetLedger ledger;
  ledger.Update(v, 0);
  EXPECT_FALSE(ledger.Reserve("tn_a", "k1", "m", 0, 2).allowed);  // 20 > 10
  auto k2 = ledger.Reserve("tn_a", "k2", "m", 0, 2);
  EXPECT_TRUE(k2.allowed);
  // All or none: the refused one held nothing; k2 holds on the tenant's
  // budgets (hard and soft), not k1's.
  std::map<std::string, int64_t> held;
  for (const auto& h : ledger.Holds()) held[h.budget_id] = h.amount_minor;
  EXPECT_EQ(held["bud_t"], 20);
  EXPECT_EQ(held["bud_soft"], 20);
  EXPECT_EQ(held.count("bud_k"), 0u);
}

}  // namespace
}  // namespace atrium::gateway
