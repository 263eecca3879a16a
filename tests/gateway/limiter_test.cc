#include "gateway/limiter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace atrium::gateway {
namespace {

GatewayLimits Limits(int64_t rpm, int64_t tpm, int64_t concurrent = 0, int64_t queued = 0) {
  GatewayLimits l;
  l.requests_per_minute = rpm;
  l.tokens_per_minute = tpm;
  l.max_concurrent = concurrent;
  l.max_queued = queued;
  return l;
}

std::vector<LimitSubject> Subjects(GatewayLimits tenant, GatewayLimits key) {
  return {{"tenant:t1", tenant}, {"key:k1", key}};
}

TEST(LimiterTest, UnlimitedSubjectsAreAlwaysAdmitted) {
  Limiter limiter;
  auto subjects = Subjects({}, {});
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(limiter.Admit(subjects, 1'000'000, 0).allowed);
    limiter.Started(subjects);
  }
  EXPECT_TRUE(limiter.CanStart(subjects));
  EXPECT_TRUE(limiter.TryQueue(subjects).allowed);
}

TEST(LimiterTest, RequestsPerMinuteRefillContinuously) {
  Limiter limiter;
  auto subjects = Subjects({}, Limits(60, 0));
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(limiter.Admit(subjects, 10, 0).allowed) << i;
  LimitDecision refused = limiter.Admit(subjects, 10, 0);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after_ms, 1000);  // one request a second
  EXPECT_EQ(refused.reason, "requests per minute of key k1 (limit 60)");
  EXPECT_FALSE(limiter.Admit(subjects, 10, 999).allowed);
  EXPECT_TRUE(limiter.Admit(subjects, 10, 1000).allowed);
  EXPECT_FALSE(limiter.Admit(subjects, 10, 1000).allowed);
  // A full minute later the bucket is full again, not fuller.
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(limiter.Admit(subjects, 10, 1'000'000).allowed);
  EXPECT_FALSE(limiter.Admit(subjects, 10, 1'000'000).allowed);
}

TEST(LimiterTest, TokensPerMinuteAreAllOrNothingAcrossSubjects) {
  Limiter limiter;
  auto subjects = Subjects(Limits(0, 1000), Limits(0, 300));
  EXPECT_TRUE(limiter.Admit(subjects, 300, 0).allowed);
  // The key is out of tokens; the tenant is not, and must not be charged.
  LimitDecision refused = limiter.Admit(subjects, 100, 0);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.reason, "tokens per minute of key k1 (limit 300)");
  EXPECT_EQ(refused.retry_after_ms, 20'000);  // 100 tokens at 5 a second
  // The tenant still has exactly 700 for another key.
  std::vector<LimitSubject> other = {{"tenant:t1", Limits(0, 1000)}, {"key:k2", {}}};
  EXPECT_TRUE(limiter.Admit(other, 700, 0).allowed);
  EXPECT_FALSE(limiter.Admit(other, 1, 0).allowed);
}

TEST(LimiterTest, NamesTheLimitThatWaitsLongest) {
  Limiter limiter;
  auto subjects = Subjects(Limits(60, 0), Limits(0, 600));
  ASSERT_TRUE(limiter.Admit(subjects, 600, 0).allowed);
  for (int i = 0; i < 59; ++i) ASSERT_TRUE(limiter.Admit(subjects, 0, 0).allowed);
  LimitDecision refused = limiter.Admit(subjects, 600, 0);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after_ms, 60'000);  // the tokens, not the 1 s of the request bucket
  EXPECT_EQ(refused.reason, "tokens per minute of key k1 (limit 600)");
}

TEST(LimiterTest, ARequestLargerThanTheBucketCanNeverFit) {
  Limiter limiter;
  auto subjects = Subjects(Limits(0, 1000), Limits(60, 0));
  LimitDecision refused = limiter.Admit(subjects, 1001, 0);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after_ms, -1);
  EXPECT_NE(refused.reason.find("tenant t1"), std::string::npos) << refused.reason;
  EXPECT_NE(refused.reason.find("1001"), std::string::npos) << refused.reason;
  // Nothing was taken: the key's 60 requests are all there.
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(limiter.Admit(subjects, 1, 0).allowed);
}

TEST(LimiterTest, ReconcileGivesBackOrTakesTheDifference) {
  Limiter limiter;
  auto subjects = Subjects({}, Limits(0, 1000));
  ASSERT_TRUE(limiter.Admit(subjects, 1000, 0).allowed);
  ASSERT_FALSE(limiter.Admit(subjects, 100, 0).allowed);
  limiter.Reconcile(subjects, 1000, 400, 0);  // reserved 1000, used 400
  EXPECT_TRUE(limiter.Admit(subjects, 600, 0).allowed);
  EXPECT_FALSE(limiter.Admit(subjects, 1, 0).allowed);
  // Used 500 more than reserved: the bucket goes into debt and later
  // requests wait it out.
  limiter.Reconcile(subjects, 600, 1100, 0);
  LimitDecision refused = limiter.Admit(subjects, 100, 0);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after_ms, 36'000);  // 600 tokens at 1000 a minute
  EXPECT_TRUE(limiter.Admit(subjects, 100, 36'000).allowed);
}

// Issue 15 #20: a model server that claimed 1,000,000 tokens for a request
// of max_tokens 3 put its tenant 1M tokens in debt at 2,000 a minute — every
// request refused for 8.3 hours. One request's excess is at most one minute
// of the limit.
TEST(LimiterTest, OneRequestsExcessCannotLockASubjectOutForHours) {
  Limiter limiter;
  auto subjects = Subjects(Limits(0, 2000), {});
  ASSERT_TRUE(limiter.Admit(subjects, 10, 0).allowed);
  limiter.Reconcile(subjects, 10, 1'000'000, 0);
  LimitDecision refused = limiter.Admit(subjects, 10, 0);
  EXPECT_FALSE(refused.allowed);
  // 1990 left less 2000 of excess: 10 tokens in debt, 20 to wait for.
  EXPECT_EQ(refused.retry_after_ms, 600);
  EXPECT_TRUE(limiter.Admit(subjects, 10, 60'000).allowed);
}

TEST(LimiterTest, GivingBackNeverOverfillsTheBucket) {
  Limiter limiter;
  auto subjects = Subjects({}, Limits(0, 1000));
  ASSERT_TRUE(limiter.Admit(subjects, 10, 0).allowed);
  limiter.Reconcile(subjects, 10'000, 0, 0);
  EXPECT_TRUE(limiter.Admit(subjects, 1000, 0).allowed);
  EXPECT_FALSE(limiter.Admit(subjects, 1, 0).allowed);
}

TEST(LimiterTest, BucketsAdaptWhenLimitsChange) {
  Limiter limiter;
  ASSERT_TRUE(limiter.Admit(Subjects({}, Limits(0, 1000)), 1, 0).allowed);
  // Lowered: the bucket clamps to the new capacity.
  auto lowered = Subjects({}, Limits(0, 10));
  EXPECT_TRUE(limiter.Admit(lowered, 10, 0).allowed);
  EXPECT_FALSE(limiter.Admit(lowered, 1, 0).allowed);
  // Raised: the new capacity fills at the new rate, not at once.
  auto raised = Subjects({}, Limits(0, 6000));
  EXPECT_FALSE(limiter.Admit(raised, 200, 1000).allowed);
  EXPECT_TRUE(limiter.Admit(raised, 100, 1000).allowed);
}

TEST(LimiterTest, ConcurrencyLimits) {
  Limiter limiter;
  auto key1 = Subjects(Limits(0, 0, 3), Limits(0, 0, 2));
  std::vector<LimitSubject> key2 = {{"tenant:t1", Limits(0, 0, 3)}, {"key:k2", {}}};
  EXPECT_TRUE(limiter.CanStart(key1));
  limiter.Started(key1);
  limiter.Started(key1);
  EXPECT_FALSE(limiter.CanStart(key1));  // the key's limit
  EXPECT_TRUE(limiter.CanStart(key2));
  limiter.Started(key2);
  EXPECT_FALSE(limiter.CanStart(key2));  // the tenant's limit
  limiter.Finished(key1);
  EXPECT_TRUE(limiter.CanStart(key1));
  EXPECT_TRUE(limiter.CanStart(key2));
  // Extra Finished calls never go below zero.
  for (int i = 0; i < 5; ++i) limiter.Finished(key1);
  limiter.Started(key1);
  limiter.Started(key1);
  EXPECT_FALSE(limiter.CanStart(key1));
}

TEST(LimiterTest, QueueDepthLimits) {
  Limiter limiter;
  auto key1 = Subjects(Limits(0, 0, 0, 2), Limits(0, 0, 0, 1));
  std::vector<LimitSubject> key2 = {{"tenant:t1", Limits(0, 0, 0, 2)}, {"key:k2", {}}};
  EXPECT_TRUE(limiter.TryQueue(key1).allowed);
  LimitDecision full = limiter.TryQueue(key1);
  EXPECT_FALSE(full.allowed);
  EXPECT_GT(full.retry_after_ms, 0);
  EXPECT_EQ(full.reason, "queued requests of key k1 (limit 1)");
  // The refusal counted nothing against the tenant.
  EXPECT_TRUE(limiter.TryQueue(key2).allowed);
  LimitDecision tenant_full = limiter.TryQueue(key2);
  EXPECT_FALSE(tenant_full.allowed);
  EXPECT_EQ(tenant_full.reason, "queued requests of tenant t1 (limit 2)");
  limiter.Unqueued(key1);
  EXPECT_TRUE(limiter.TryQueue(key2).allowed);
}

TEST(LimiterTest, SweepForgetsOnlyWhatIsLosslessToForget) {
  Limiter limiter;
  auto busy = std::vector<LimitSubject>{{"key:busy", Limits(0, 0, 5)}};
  auto drained = std::vector<LimitSubject>{{"key:drained", Limits(60, 0)}};
  auto idle = std::vector<LimitSubject>{{"key:idle", Limits(60, 6000)}};
  limiter.Started(busy);
  ASSERT_TRUE(limiter.Admit(drained, 0, 0).allowed);
  ASSERT_TRUE(limiter.Admit(idle, 0, 0).allowed);
  EXPECT_EQ(limiter.tracked(), 3u);
  // At 500 ms the request buckets are not yet full again.
  limiter.Sweep(500);
  EXPECT_EQ(limiter.tracked(), 3u);
  limiter.Sweep(1000);
  EXPECT_EQ(limiter.tracked(), 1u);  // the one in flight stays
  limiter.Finished(busy);
  limiter.Sweep(1000);
  EXPECT_EQ(limiter.tracked(), 0u);
  // A forgotten subject starts full, as it would have been.
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(limiter.Admit(drained, 0, 2000).allowed);
  EXPECT_FALSE(limiter.Admit(drained, 0, 2000).allowed);
}

TEST(LimiterTest, HugeLimitsAndCountsDoNotOverflow) {
  Limiter limiter;
  auto subjects = Subjects(Limits(INT64_MAX, INT64_MAX), {});
  EXPECT_TRUE(limiter.Admit(subjects, INT64_MAX / 2, 0).allowed);
  limiter.Reconcile(subjects, 0, INT64_MAX, 1);
  EXPECT_FALSE(limiter.Admit(subjects, 1, 1).allowed);
  EXPECT_TRUE(limiter.Admit(subjects, 1, INT64_MAX / 4).allowed);
}

}  // namespace
}  // namespace atrium::gateway
