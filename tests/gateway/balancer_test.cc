#include "gateway/balancer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace atrium::gateway {
namespace {

const std::string kA = "http://a:8000";
const std::string kB = "http://b:8000";
const std::string kC = "http://c:8000";

std::vector<DeploymentEndpoint> Endpoints(int64_t capacity = 8) {
  return {{kA, capacity}, {kB, capacity}, {kC, capacity}};
}

// Picks and starts; returns the url.
std::string Start(Balancer& balancer, const std::vector<DeploymentEndpoint>& endpoints,
                  int64_t now_ms, const std::vector<std::string>& exclude = {}) {
  auto picked = balancer.Pick(endpoints, exclude, now_ms, {});
  if (!picked) return "";
  balancer.Started(endpoints[*picked].url);
  return endpoints[*picked].url;
}

TEST(BalancerTest, PicksTheLeastOutstandingTiesToTheFirst) {
  Balancer balancer;
  auto endpoints = Endpoints();
  EXPECT_EQ(Start(balancer, endpoints, 0), kA);
  EXPECT_EQ(Start(balancer, endpoints, 0), kB);
  EXPECT_EQ(Start(balancer, endpoints, 0), kC);
  EXPECT_EQ(Start(balancer, endpoints, 0), kA);
  balancer.Succeeded(kB, 0);
  EXPECT_EQ(balancer.Outstanding(kB), 0);
  EXPECT_EQ(Start(balancer, endpoints, 0), kB);
  EXPECT_EQ(balancer.Outstanding(kA), 2);
  EXPECT_EQ(balancer.Outstanding("http://unknown"), 0);
}

TEST(BalancerTest, RespectsCapacityAndExclusions) {
  Balancer balancer;
  auto endpoints = Endpoints(1);
  EXPECT_EQ(Start(balancer, endpoints, 0, {kA}), kB);
  EXPECT_EQ(Start(balancer, endpoints, 0), kA);
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 0, {}));
  EXPECT_FALSE(balancer.Pick(endpoints, {kC}, 0, {}).has_value());
  EXPECT_EQ(Start(balancer, endpoints, 0), kC);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 0, {}));
  balancer.Abandoned(kB);
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 0, {}));
  // A capacity below 1 still lets one request through.
  std::vector<DeploymentEndpoint> zero = {{"http://z", 0}};
  EXPECT_EQ(Start(balancer, zero, 0), "http://z");
  EXPECT_FALSE(balancer.HasFreeSlot(zero, 0, {}));
}

TEST(BalancerTest, APacedRequestWaitsForAnEndpointsPrefillsOnlyWhereItSetsALimit) {
  Balancer balancer;
  // a takes one prefill at a time for paced requests; b has no such limit.
  std::vector<DeploymentEndpoint> endpoints = {{kA, 8, 1}, {kB, 8, 0}};
  ASSERT_EQ(balancer.Pick(endpoints, {}, 0, {.paced = true}), 0u);
  balancer.Started(kA);
  balancer.PrefillStarted(kA);
  EXPECT_EQ(balancer.Prefilling(kA), 1);
  // a is busy with a prefill: a paced request goes to b although b has more
  // outstanding requests; an unpaced one still takes the least loaded.
  balancer.Started(kB);
  balancer.Started(kB);
  EXPECT_EQ(balancer.Pick(endpoints, {}, 0, {.paced = true}), 1u);
  EXPECT_EQ(balancer.Pick(endpoints, {}, 0, {}), 0u);
  // With only a, a paced request waits until the first token is back.
  std::vector<DeploymentEndpoint> only_a = {{kA, 8, 1}};
  EXPECT_FALSE(balancer.HasFreeSlot(only_a, 0, {.paced = true}));
  EXPECT_TRUE(balancer.HasFreeSlot(only_a, 0, {}));
  balancer.PrefillEnded(kA);
  EXPECT_EQ(balancer.Prefilling(kA), 0);
  EXPECT_TRUE(balancer.HasFreeSlot(only_a, 0, {.paced = true}));
  // Ended more often than started (a caller bug) never goes below zero.
  balancer.PrefillEnded(kA);
  balancer.PrefillEnded("http://unknown");
  EXPECT_EQ(balancer.Prefilling(kA), 0);
  balancer.PrefillStarted(kA);
  EXPECT_FALSE(balancer.HasFreeSlot(only_a, 0, {.paced = true}));
}

TEST(BalancerTest, BurstSlotsAboveCapacityAreOnlyForRequestsWhoseRuleAllowsThem) {
  Balancer balancer;
  std::vector<DeploymentEndpoint> endpoints = {{kA, 2, 0, 1}};
  EXPECT_EQ(Start(balancer, endpoints, 0), kA);
  EXPECT_EQ(Start(balancer, endpoints, 0), kA);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 0, {})) << "at capacity";
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 0, {.burst = true}));
  ASSERT_EQ(balancer.Pick(endpoints, {}, 0, {.burst = true}), 0u);
  balancer.Started(kA);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 0, {.burst = true})) << "the burst slot is taken";
  EXPECT_EQ(balancer.Outstanding(kA), 3);
  // An endpoint without burst slots gives none.
  std::vector<DeploymentEndpoint> plain = {{kB, 1}};
  EXPECT_EQ(Start(balancer, plain, 0), kB);
  EXPECT_FALSE(balancer.HasFreeSlot(plain, 0, {.burst = true}));
}

TEST(BalancerTest, SkipsEndpointsFailingTheActiveCheck) {
  Balancer balancer;
  auto endpoints = Endpoints();
  balancer.HealthCheck(kA, false, 0);
  EXPECT_EQ(balancer.Describe(kA, 0), "healthy");  // one slow answer is no verdict
  balancer.HealthCheck(kA, false, 0);
  EXPECT_EQ(balancer.Describe(kA, 0), "unhealthy (health check failed)");
  EXPECT_EQ(Start(balancer, endpoints, 0), kB);
  EXPECT_EQ(Start(balancer, endpoints, 0), kC);
  EXPECT_EQ(Start(balancer, endpoints, 0), kB);
  balancer.HealthCheck(kA, true, 1);
  EXPECT_EQ(balancer.Describe(kA, 1), "healthy");
  EXPECT_EQ(Start(balancer, endpoints, 1), kA);
}

TEST(BalancerTest, EjectsAfterConsecutiveFailuresForAWhile) {
  BalancerOptions options;
  options.breaker_failures = 0;  // only ejection here
  Balancer balancer(options);
  std::vector<DeploymentEndpoint> endpoints = {{kA, 8}};
  // A success in between resets the count.
  for (int i = 0; i < 2; ++i) {
    balancer.Started(kA);
    balancer.Failed(kA, 100);
  }
  balancer.Started(kA);
  balancer.Succeeded(kA, 100);
  for (int i = 0; i < 2; ++i) {
    balancer.Started(kA);
    balancer.Failed(kA, 100);
  }
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 100, {}));
  balancer.Started(kA);
  balancer.Failed(kA, 100);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 100, {}));
  EXPECT_EQ(balancer.Describe(kA, 100), "ejected until 5100 ms");
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 5099, {}));
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 5100, {}));
  EXPECT_EQ(balancer.Describe(kA, 5100), "healthy");
  EXPECT_EQ(balancer.Outstanding(kA), 0);
}

TEST(BalancerTest, AFullDeploymentIsUpADownOneIsNot) {
  Balancer balancer;
  std::vector<DeploymentEndpoint> endpoints = {{kA, 1}, {kB, 1}};
  EXPECT_TRUE(balancer.AnyUp(endpoints, 0));  // never seen: up
  balancer.Started(kA);
  balancer.Started(kB);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 0, {}));
  EXPECT_TRUE(balancer.AnyUp(endpoints, 0));  // full, not down
  for (int i = 0; i < 2; ++i) {
    balancer.HealthCheck(kA, false, 0);
    balancer.HealthCheck(kB, false, 0);
  }
  EXPECT_FALSE(balancer.AnyUp(endpoints, 0));
  balancer.HealthCheck(kB, true, 0);
  EXPECT_TRUE(balancer.AnyUp(endpoints, 0));
}

TEST(BalancerTest, SaysWhenADownDeploymentMayBeUpAgain) {
  Balancer balancer;
  std::vector<DeploymentEndpoint> endpoints = {{kA, 4}, {kB, 4}};
  for (int i = 0; i < 3; ++i) {  // A ejected until 5100, B until 5300
    balancer.Started(kA);
    balancer.Failed(kA, 100);
    balancer.Started(kB);
    balancer.Failed(kB, 300);
  }
  EXPECT_FALSE(balancer.AnyUp(endpoints, 1000));
  EXPECT_EQ(balancer.UpAgainInMs(endpoints, 1000), 4100);
  EXPECT_TRUE(balancer.AnyUp(endpoints, 5200));
  for (int i = 0; i < 2; ++i) balancer.HealthCheck(kA, false, 5200);
  EXPECT_EQ(balancer.UpAgainInMs(endpoints, 5200), 100);  // B's ejection; A waits for a check
  for (int i = 0; i < 2; ++i) balancer.HealthCheck(kB, false, 5200);
  EXPECT_EQ(balancer.UpAgainInMs(endpoints, 5200), std::nullopt);
}

TEST(BalancerTest, CircuitOpensThenLetsOneTrialThrough) {
  BalancerOptions options;
  options.eject_after_failures = 0;  // only the breaker here
  Balancer balancer(options);
  std::vector<DeploymentEndpoint> endpoints = {{kA, 8}};
  for (int i = 0; i < 4; ++i) {
    balancer.Started(kA);
    balancer.Failed(kA, 1000 + i);
  }
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 1004, {}));
  balancer.Started(kA);
  balancer.Failed(kA, 1004);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 1004, {}));
  EXPECT_EQ(balancer.Describe(kA, 1004), "circuit open until 11004 ms");
  EXPECT_FALSE(balancer.Pick(endpoints, {}, 11003, {}).has_value());
  EXPECT_FALSE(balancer.AnyUp(endpoints, 1004));
  EXPECT_EQ(balancer.UpAgainInMs(endpoints, 1004), 10000);

  // Half-open: one trial, and nothing else while it is out.
  EXPECT_EQ(Start(balancer, endpoints, 11004), kA);
  EXPECT_FALSE(balancer.Pick(endpoints, {}, 11005, {}).has_value());
  EXPECT_TRUE(balancer.AnyUp(endpoints, 11005));  // its trial may bring it back: wait for it
  EXPECT_EQ(balancer.Describe(kA, 11005), "circuit half-open, trial in flight");
  // The trial fails: open for another full period.
  balancer.Failed(kA, 11010);
  EXPECT_FALSE(balancer.Pick(endpoints, {}, 21009, {}).has_value());
  EXPECT_EQ(Start(balancer, endpoints, 21010), kA);
  // This trial succeeds: closed, and load flows again.
  balancer.Succeeded(kA, 21020);
  EXPECT_EQ(balancer.Describe(kA, 21020), "healthy");
  EXPECT_EQ(Start(balancer, endpoints, 21020), kA);
  EXPECT_EQ(Start(balancer, endpoints, 21020), kA);
}

TEST(BalancerTest, AnAbandonedTrialLetsAnotherThrough) {
  BalancerOptions options;
  options.eject_after_failures = 0;
  options.breaker_failures = 1;
  Balancer balancer(options);
  std::vector<DeploymentEndpoint> endpoints = {{kA, 8}};
  balancer.Started(kA);
  balancer.Failed(kA, 0);
  EXPECT_EQ(Start(balancer, endpoints, 10'000), kA);
  EXPECT_FALSE(balancer.HasFreeSlot(endpoints, 10'000, {}));
  balancer.Abandoned(kA);
  EXPECT_EQ(Start(balancer, endpoints, 10'000), kA);
}

TEST(BalancerTest, FailuresOutsideTheWindowDoNotOpenTheCircuit) {
  BalancerOptions options;
  options.eject_after_failures = 0;
  Balancer balancer(options);
  std::vector<DeploymentEndpoint> endpoints = {{kA, 8}};
  for (int i = 0; i < 20; ++i) {
    balancer.Started(kA);
    balancer.Failed(kA, i * 2500);  // four per 10 s window at most
  }
  EXPECT_TRUE(balancer.HasFreeSlot(endpoints, 50'000, {}));
  EXPECT_EQ(balancer.Describe(kA, 50'000), "healthy");
}

TEST(BalancerTest, RoutesAroundABrokenEndpoint) {
  Balancer balancer;
  auto endpoints = Endpoints();
  // Every request to b fails; after the third b is out and a, c take the load.
  for (int i = 0; i < 3; ++i) {
    balancer.Started(kB);
    balancer.Failed(kB, 0);
  }
  for (int i = 0; i < 6; ++i) EXPECT_NE(Start(balancer, endpoints, 1), kB);
  EXPECT_EQ(balancer.Outstanding(kA), 3);
  EXPECT_EQ(balancer.Outstanding(kC), 3);
  // A retry excludes what it already tried.
  EXPECT_FALSE(balancer.Pick(endpoints, {kA, kC}, 1, {}).has_value());
}

TEST(BalancerTest, DescribesEveryProblemAtOnce) {
  BalancerOptions options;
  options.breaker_failures = 3;
  Balancer balancer(options);
  for (int i = 0; i < 3; ++i) {
    balancer.Started(kA);
    balancer.Failed(kA, 0);
  }
  balancer.HealthCheck(kA, false, 0);
  balancer.HealthCheck(kA, false, 0);
  EXPECT_EQ(balancer.Describe(kA, 0),
            "unhealthy (health check failed), ejected until 5000 ms, circuit open until 10000 ms");
  EXPECT_EQ(balancer.Describe("http://never-seen", 0), "healthy");
}

}  // namespace
}  // namespace atrium::gateway
