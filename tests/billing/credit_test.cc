// Credits: which grants pay a period, in what order, never below zero.
#include "billing/credit.h"

#include <gtest/gtest.h>

namespace atrium::billing {
namespace {

constexpr int64_t kDay = 86'400'000;
const Period kNov{1'793'491'200'000, 1'793'491'200'000 + 30 * kDay};  // 2026-11

CreditGrant G(const std::string& id, int64_t left, int64_t expires, int64_t created,
              const std::string& currency = "USD") {
  CreditGrant g;
  g.id = id;
  g.tenant_id = "tn_a";
  g.kind = "grant";
  g.currency = currency;
  g.amount_minor = g.remaining_minor = left;
  g.expires_at = expires;
  g.created_at = created;
  return g;
}

TEST(CreditTest, UsableGrantsAreLiveAtThePeriodsEndEarliestToExpireFirst) {
  const int64_t in = kNov.start_ms + kDay;
  auto usable = UsableCredits(
      {G("never", 10, 0, in), G("later", 10, kNov.end_ms + 9 * kDay, in),
       G("sooner", 10, kNov.end_ms, in), G("expired", 10, kNov.end_ms - 1, in),
       G("after", 10, 0, kNov.end_ms), G("euros", 10, 0, in, "EUR"), G("empty", 0, 0, in)},
      "USD", kNov);
  std::vector<std::string> ids;
  for (const auto& g : usable) ids.push_back(g.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"sooner", "later", "never"}));
}

TEST(CreditTest, CreditsPayUpToTheTotalAndNeverBelowZero) {
  Invoice inv;
  inv.period = kNov;
  inv.total_minor = 25;
  auto paid = ApplyCredits(inv, {G("a", 10, 0, 0), G("b", 30, 0, 0), G("c", 5, 0, 0)});
  ASSERT_EQ(paid.size(), 2u);
  EXPECT_EQ(paid[0].amount_minor, 10);
  EXPECT_EQ(paid[1].amount_minor, 15);
  EXPECT_EQ(inv.total_minor, 0);
  EXPECT_EQ(inv.credits_minor, -25);
  ASSERT_EQ(inv.lines.size(), 2u);
  EXPECT_EQ(inv.lines[1].kind, "credit");
  EXPECT_EQ(inv.lines[1].amount_minor, -15);
  // Nothing owed: nothing paid.
  Invoice zero;
  EXPECT_TRUE(ApplyCredits(zero, {G("a", 10, 0, 0)}).empty());
}

TEST(CreditTest, TheBalanceCountsLiveGrantsOfTheCurrency) {
  EXPECT_EQ(LiveBalance({G("a", 10, 0, 0), G("b", 7, 100, 0), G("c", 3, 0, 0, "EUR")}, "USD", 99),
            17);
  EXPECT_EQ(LiveBalance({G("a", 10, 0, 0), G("b", 7, 100, 0)}, "USD", 100), 10);
}

}  // namespace
}  // namespace atrium::billing
