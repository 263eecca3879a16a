// Autoscaling's rule: up at once for demand or a long wait (a cooldown
// apart), from zero at the first request, down one at a time after a
// cooldown of low load, to zero only where allowed and after idling;
// bounds held whatever the gateways report.
#include "serving/autoscale.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace atrium::serving {
namespace {

constexpr int64_t kSlots = 8;  // 6 in flight per replica at 0.75

ManagedSpec Spec(int64_t replicas, int64_t min = 1, int64_t max = 8) {
  ManagedSpec s;
  s.autoscale = true;
  s.replicas = replicas;
  s.min_replicas = min;
  s.max_replicas = max;
  return s;
}

LoadSignals Load(int64_t in_flight, int64_t queued = 0, int64_t oldest_wait_ms = 0) {
  return {
      .gateways = 1, .queued = queued, .oldest_wait_ms = oldest_wait_ms, .in_flight = in_flight};
}

TEST(AutoscaleTest, NothingChangesWithoutAutoscaleOrASignal) {
  AutoscaleMemory m;
  ManagedSpec fixed = Spec(1);
  fixed.autoscale = false;
  EXPECT_FALSE(DecideScale(fixed, kSlots, 1, Load(100, 100, 60'000), {}, m, 0).has_value());
  LoadSignals none = Load(100, 100, 60'000);
  none.gateways = 0;
  EXPECT_FALSE(DecideScale(Spec(1), kSlots, 1, none, {}, m, 0).has_value());
}

TEST(AutoscaleTest, DemandScalesUpAtOnceWithTheNumbersThatDroveIt) {
  AutoscaleMemory m;
  auto d = DecideScale(Spec(1), kSlots, 1, Load(8, 10, 200), {}, m, 1'000);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 3);  // 18 requests / 6 per replica
  EXPECT_NE(d->why.find("10 queued (oldest waited 200 ms), 8 in flight"), std::string::npos)
      << d->why;
  EXPECT_NE(d->why.find("1 -> 3 replicas"), std::string::npos) << d->why;
  EXPECT_EQ(m.last_change_ms, 1'000);
  // Within the up cooldown, more demand waits; after it, it is heard.
  EXPECT_FALSE(DecideScale(Spec(3), kSlots, 3, Load(24, 30), {}, m, 5'000).has_value());
  d = DecideScale(Spec(3), kSlots, 3, Load(24, 30), {}, m, 16'000);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 8);  // 54 needs 9; max is 8
}

// A step down does not hold the next step up: the up cooldown counts from
// the last scale-up only.
TEST(AutoscaleTest, AStepDownDoesNotDelayTheNextStepUp) {
  AutoscaleRules rules;
  AutoscaleMemory m;
  m.last_change_ms = 0;
  m.low_since_ms = 0;
  auto down = DecideScale(Spec(2), kSlots, 2, Load(1), rules, m, rules.down_cooldown_ms);
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->replicas, 1);
  auto up =
      DecideScale(Spec(1), kSlots, 1, Load(4, 10, 2'000), rules, m, rules.down_cooldown_ms + 1'000);
  ASSERT_TRUE(up.has_value());
  EXPECT_GT(up->replicas, 1);
}

TEST(AutoscaleTest, ALongWaitAsksForOneMoreOnlyWhileEveryReplicaAnswers) {
  AutoscaleMemory m;
  // 4 in flight and 1 waiting fit one replica's target, but it waited 2 s.
  auto d = DecideScale(Spec(1), kSlots, 1, Load(4, 1, 2'000), {}, m, 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 2);
  // While the new replica starts, the same wait asks for nothing more.
  EXPECT_FALSE(DecideScale(Spec(2), kSlots, 1, Load(4, 1, 30'000), {}, m, 60'000).has_value());
  // A short wait asks for nothing.
  AutoscaleMemory fresh;
  EXPECT_FALSE(DecideScale(Spec(1), kSlots, 1, Load(4, 1, 999), {}, fresh, 0).has_value());
}

TEST(AutoscaleTest, DownOneAtATimeAfterACooldownOfLowLoad) {
  AutoscaleRules rules;
  AutoscaleMemory m;
  m.last_change_ms = 0;
  // 3 replicas, 5 in flight: one replica's worth.
  EXPECT_FALSE(DecideScale(Spec(3), kSlots, 3, Load(5), rules, m, 10'000).has_value());
  EXPECT_EQ(m.low_since_ms, 10'000);
  EXPECT_FALSE(
      DecideScale(Spec(3), kSlots, 3, Load(5), rules, m, 10'000 + rules.down_cooldown_ms - 1)
          .has_value());
  auto d = DecideScale(Spec(3), kSlots, 3, Load(5), rules, m, 10'000 + rules.down_cooldown_ms);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 2);
  EXPECT_NE(d->why.find("scaled down"), std::string::npos);
  // A burst in between restarts the count.
  const int64_t t = 10'000 + rules.down_cooldown_ms;
  EXPECT_FALSE(DecideScale(Spec(2), kSlots, 2, Load(5), rules, m, t + 1'000).has_value());
  EXPECT_FALSE(DecideScale(Spec(2), kSlots, 2, Load(12), rules, m, t + 2'000).has_value());
  EXPECT_EQ(m.low_since_ms, -1);
  // Never below min_replicas.
  AutoscaleMemory idle;
  for (int64_t now = 0; now < 10 * rules.down_cooldown_ms; now += 10'000) {
    auto none = DecideScale(Spec(2, 2), kSlots, 2, Load(0), rules, idle, now);
    EXPECT_FALSE(none.has_value()) << now;
  }
}

// A load that sits between the marks (75 % of the slots up, 50 % of one
// replica fewer's down) moves nothing: no 2 -> 3 -> 2 -> 3 near the target.
TEST(AutoscaleTest, BetweenTheHighAndLowMarksNothingMoves) {
  AutoscaleRules rules;
  AutoscaleMemory m;
  m.last_change_ms = 0;
  // 3 replicas (24 slots), 11 in flight: 2 would serve it at 69 %, above the
  // low mark: they stay, however long.
  for (int64_t now = 10'000; now < 10'000 + 5 * rules.down_cooldown_ms; now += 10'000) {
    EXPECT_FALSE(DecideScale(Spec(3), kSlots, 3, Load(11), rules, m, now).has_value()) << now;
  }
  // 8 in flight: 2 serve it at 50 %: one fewer, after the cooldown.
  const int64_t t = 10'000 + 5 * rules.down_cooldown_ms;
  EXPECT_FALSE(DecideScale(Spec(3), kSlots, 3, Load(8), rules, m, t).has_value());
  auto d = DecideScale(Spec(3), kSlots, 3, Load(8), rules, m, t + rules.down_cooldown_ms);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 2);
  // And 2 replicas with 11 in flight do not go up (75 % of 16 is 12).
  EXPECT_FALSE(DecideScale(Spec(2), kSlots, 2, Load(11), rules, m, t + 2 * rules.down_cooldown_ms)
                   .has_value());
}

TEST(AutoscaleTest, ZeroOnlyWhereAllowedAndAfterIdling) {
  AutoscaleRules rules;
  rules.down_cooldown_ms = 10'000;
  rules.idle_to_zero_ms = 60'000;
  auto run_idle = [&](AutoscaleRules r, ManagedSpec spec) {
    AutoscaleMemory m;
    for (int64_t now = 0; now <= 120'000; now += 1'000) {
      if (auto d = DecideScale(spec, kSlots, spec.replicas, Load(0), r, m, now)) return *d;
    }
    return ScaleDecision{.replicas = -1, .why = ""};
  };
  EXPECT_EQ(run_idle(rules, Spec(1, 0)).replicas, -1);  // the operator does not allow it
  rules.allow_zero = true;
  EXPECT_EQ(run_idle(rules, Spec(1, 1)).replicas, -1);  // the spec does not
  AutoscaleMemory m;
  ManagedSpec spec = Spec(1, 0);
  std::optional<ScaleDecision> d;
  int64_t at = 0;
  for (; at <= 120'000 && !d; at += 1'000) d = DecideScale(spec, kSlots, 1, Load(0), rules, m, at);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 0);
  EXPECT_GE(at - 1'000, rules.idle_to_zero_ms);
  EXPECT_NE(d->why.find("scaled to zero"), std::string::npos);
  // The first request brings one back at once, cooldown or not.
  d = DecideScale(Spec(0, 0), kSlots, 0, Load(0, 1, 0), rules, m, at);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 1);
  EXPECT_NE(d->why.find("from zero"), std::string::npos);
}

TEST(AutoscaleTest, WhatTheGatewaysReportIsBounded) {
  AutoscaleMemory m;
  const int64_t big = std::numeric_limits<int64_t>::max();
  auto d = DecideScale(Spec(1), kSlots, 1, Load(big, big, big), {}, m, 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 8);
  AutoscaleMemory n;
  EXPECT_FALSE(DecideScale(Spec(1), kSlots, 1, Load(-5, -7, -9), {}, n, 0).has_value());
  AutoscaleMemory z;
  EXPECT_FALSE(DecideScale(Spec(1), 0, 1, Load(1), {}, z, 0).has_value());  // 0 slots read as 1
  // A spec outside its bounds (an operator's min raised) is brought back.
  AutoscaleMemory b;
  d = DecideScale(Spec(1, 2, 4), kSlots, 1, Load(0), {}, b, 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 2);
}

}  // namespace
}  // namespace atrium::serving
