#include "gateway_server/dispatcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gateway_server/fairness_model.h"

namespace atrium::gateway_server {
namespace {

// A request of `tenant` (its key: "<tenant>_key") to `deployment`.
SlotRequest MakeRequest(uint64_t id, const std::string& tenant, const DeploymentRecord* deployment,
                        int64_t input_tokens, int64_t reserved_tokens) {
  SlotRequest r;
  r.id = id;
  r.tenant_id = tenant;
  r.key_id = tenant + "_key";
  r.deployment = deployment;
  r.input_tokens = input_tokens;
  r.reserved_tokens = reserved_tokens;
  return r;
}

// One deployment of 4 slots shared by a flooding tenant and a light one.
class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() : dispatcher_(DispatcherOptions{}) {
    deployment_.id = "dep_1";
    deployment_.model = "m";
    deployment_.endpoints = {{"http://127.0.0.1:1", 4}};
  }

  SlotRequest Request(const std::string& tenant) {
    return MakeRequest(next_id_++, tenant, &deployment_, 40, 100);
  }
  Admission Admit(const SlotRequest& r) {
    return dispatcher_.Admit(r, now_, [] {});
  }
  void Finish(const SlotRequest& r) {
    dispatcher_.Finish(r, "http://127.0.0.1:1", Dispatcher::Outcome::kSucceeded, {40, 60, 0}, now_);
  }

  DeploymentRecord deployment_;
  Dispatcher dispatcher_;
  uint64_t next_id_ = 1;
  int64_t now_ = 1'000'000;
};

TEST_F(DispatcherTest, ALightTenantsBurstTakesTheNextFreeSlotAheadOfAFlood) {
  // b, the light tenant, runs 2 requests: its share of 4.
  std::vector<SlotRequest> b = {Request("b"), Request("b")};
  for (const auto& r : b) ASSERT_EQ(Admit(r).kind, Admission::Kind::kStarted);
  // a floods: it gets the other 2 slots and the rest of its requests wait.
  std::vector<SlotRequest> a;
  for (int i = 0; i < 10; ++i) {
    a.push_back(Request("a"));
    Admission admission = Admit(a.back());
    EXPECT_EQ(admission.kind, i < 2 ? Admission::Kind::kStarted : Admission::Kind::kQueued) << i;
  }
  // b bursts above its share: its third request waits too.
  SlotRequest burst = Request("b");
  ASSERT_EQ(Admit(burst).kind, Admission::Kind::kQueued);
  // One of a's requests ends. The freed slot goes to b's burst (b has used
  // far less than a, within the fair queue's credit), not to a's backlog,
  // although a is now one below its share: a's requests wait in the queue
  // anyway, so no slot is kept for them.
  Finish(a[0]);
  EXPECT_TRUE(dispatcher_.TakeGrant(burst.id).has_value());
  for (int i = 2; i < 10; ++i) EXPECT_FALSE(dispatcher_.TakeGrant(a[i].id).has_value()) << i;
  // The next slot to free goes to a.
  Finish(b[0]);
  EXPECT_TRUE(dispatcher_.TakeGrant(a[2].id).has_value());
}

TEST_F(DispatcherTest, ALightTenantWithNothingWaitingStillFindsItsShareFree) {
  std::vector<SlotRequest> a;
  SlotRequest b1 = Request("b");
  ASSERT_EQ(Admit(b1).kind, Admission::Kind::kStarted);
  for (int i = 0; i < 6; ++i) {
    a.push_back(Request("a"));
    Admit(a.back());
  }
  // a holds its share (2); the slot b has not used stays free for b.
  EXPECT_EQ(dispatcher_.QueuedFor("dep_1"), 4u);
  SlotRequest b2 = Request("b");
  EXPECT_EQ(Admit(b2).kind, Admission::Kind::kQueued);    // behind a's backlog in the queue...
  EXPECT_TRUE(dispatcher_.TakeGrant(b2.id).has_value());  // ...but granted at once
}

TEST(DispatcherPacingTest, TheHeavierTenantsStreamsWaitForTheEndpointsPrefillsALighterOnesDoNot) {
  DeploymentRecord deployment;
  deployment.id = "dep_paced";
  deployment.model = "m";
  deployment.endpoints = {{"http://127.0.0.1:1", 16, 1}};  // one prefill at a time
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  uint64_t next_id = 1;
  auto streamed = [&](const std::string& tenant) {
    SlotRequest r = MakeRequest(next_id++, tenant, &deployment, 40, 100);
    r.stream = true;
    return r;
  };
  auto admit = [&](const SlotRequest& r) { return dispatcher.Admit(r, now, [] {}).kind; };
  // a alone is not paced: nobody waits behind its prefills.
  std::vector<SlotRequest> a;
  for (int i = 0; i < 4; ++i) {
    a.push_back(streamed("a"));
    EXPECT_EQ(admit(a.back()), Admission::Kind::kStarted) << i;
  }
  // b arrives and runs fewer than its share of what runs: never paced.
  std::vector<SlotRequest> b = {streamed("b"), streamed("b")};
  for (const auto& r : b) EXPECT_EQ(admit(r), Admission::Kind::kStarted);
  // a runs more than its share of what runs (4 of 6): its next stream waits
  // while the endpoint has a request in prefill.
  SlotRequest a5 = streamed("a");
  EXPECT_EQ(admit(a5), Admission::Kind::kQueued);
  EXPECT_FALSE(dispatcher.TakeGrant(a5.id).has_value());
  // A request that does not stream is not paced: the gateway cannot see
  // when its prefill ends.
  SlotRequest plain = MakeRequest(next_id++, "a", &deployment, 40, 100);
  // (It would start, but it queues behind a's waiting stream: FIFO per key.)
  EXPECT_EQ(admit(plain), Admission::Kind::kQueued);
  // The first tokens come back; a's stream starts once none is in prefill.
  std::vector<SlotRequest> started = a;
  started.insert(started.end(), b.begin(), b.end());
  for (size_t i = 0; i < started.size(); ++i) {
    EXPECT_FALSE(dispatcher.TakeGrant(a5.id).has_value()) << i;
    dispatcher.FirstToken(started[i], now);
  }
  EXPECT_TRUE(dispatcher.TakeGrant(a5.id).has_value());
  EXPECT_TRUE(dispatcher.TakeGrant(plain.id).has_value());
  // A first token reported twice, or for a request that does not stream,
  // changes nothing.
  dispatcher.FirstToken(started[0], now);
  dispatcher.FirstToken(plain, now);
  // a5 is in prefill: a's next stream waits again, and b's does not.
  SlotRequest a6 = streamed("a");
  EXPECT_EQ(admit(a6), Admission::Kind::kQueued);
  EXPECT_FALSE(dispatcher.TakeGrant(a6.id).has_value());
  SlotRequest b3 = streamed("b");
  EXPECT_EQ(admit(b3), Admission::Kind::kQueued);  // behind a6 in the queue, then past it
  EXPECT_TRUE(dispatcher.TakeGrant(b3.id).has_value());
  EXPECT_FALSE(dispatcher.TakeGrant(a6.id).has_value());
  // A request that ends before its first token ends its prefill too.
  dispatcher.Finish(a5, "http://127.0.0.1:1", Dispatcher::Outcome::kAbandoned, {40, 0, 0}, now);
  EXPECT_FALSE(dispatcher.TakeGrant(a6.id).has_value());  // b3 is still in prefill
  dispatcher.FirstToken(b3, now);
  EXPECT_TRUE(dispatcher.TakeGrant(a6.id).has_value());
}

TEST(DispatcherPacingTest, ARetryMovesTheRequestsPrefillToTheNextEndpoint) {
  DeploymentRecord deployment;
  deployment.id = "dep_retry";
  deployment.model = "m";
  deployment.endpoints = {{"http://127.0.0.1:1", 8, 1}, {"http://127.0.0.1:2", 8, 1}};
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  SlotRequest r = MakeRequest(1, "a", &deployment, 40, 100);
  r.stream = true;
  Admission admission = dispatcher.Admit(r, now, [] {});
  ASSERT_EQ(admission.kind, Admission::Kind::kStarted);
  auto next = dispatcher.Retry(r, admission.endpoint, {admission.endpoint}, now);
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(*next, admission.endpoint);
  // Another tenant's stream and a's second: a runs 1 of 2, its share; the
  // only prefill is on the endpoint it moved to, so a's next goes to the
  // first endpoint.
  SlotRequest b = MakeRequest(2, "b", &deployment, 40, 100);
  b.stream = true;
  ASSERT_EQ(dispatcher.Admit(b, now, [] {}).kind, Admission::Kind::kStarted);
  dispatcher.FirstToken(b, now);
  SlotRequest a2 = MakeRequest(3, "a", &deployment, 40, 100);
  a2.stream = true;
  Admission second = dispatcher.Admit(a2, now, [] {});
  ASSERT_EQ(second.kind, Admission::Kind::kStarted);
  EXPECT_NE(second.endpoint, *next);
}

// A millisecond-stepped run of the dispatcher alone: one deployment of 16
// slots, every request holds its slot for 420 ms (as the h100 engine
// simulator does for a 32-token answer). Tenant B arrives at random (Poisson)
// at `b_rate` per second throughout; for the first `b_alone` seconds it is
// alone, then tenant A keeps 200 requests waiting. Returns B's waits in the
// queue while A floods, in ms.
std::vector<int64_t> SimulateFlood(double b_rate, int64_t b_alone, int64_t seconds, uint32_t seed,
                                   DispatcherOptions options = {}) {
  DeploymentRecord deployment;
  deployment.id = "dep_sim";
  deployment.model = "m";
  deployment.endpoints = {{"http://127.0.0.1:1", 16}};
  Dispatcher dispatcher(options);
  constexpr int64_t kServiceMs = 420;
  uint64_t next_id = 1;
  auto make = [&](const std::string& tenant) {
    return MakeRequest(next_id++, tenant, &deployment, 37, 37 + 32);
  };
  struct Running {
    SlotRequest request;
    int64_t ends;
  };
  std::vector<Running> running;
  std::map<uint64_t, std::pair<SlotRequest, int64_t>> waiting;  // id -> (request, since)
  std::vector<int64_t> b_waits;
  std::mt19937 rng(seed);
  std::exponential_distribution<double> gap(b_rate / 1000.0);
  int64_t now = 1'000'000;
  const int64_t flood_from = now + b_alone * 1000;
  const int64_t end = flood_from + seconds * 1000;
  double next_b = static_cast<double>(now) + gap(rng);
  auto collect_grants = [&] {
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (dispatcher.TakeGrant(it->first)) {
        if (it->second.first.tenant_id == "b" && it->second.second >= flood_from) {
          b_waits.push_back(now - it->second.second);
        }
        running.push_back({it->second.first, now + kServiceMs});
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto admit = [&](const std::string& tenant) {
    SlotRequest r = make(tenant);
    Admission a = dispatcher.Admit(r, now, [] {});
    if (a.kind == Admission::Kind::kStarted) {
      if (tenant == "b" && now >= flood_from) b_waits.push_back(0);
      running.push_back({r, now + kServiceMs});
    } else if (a.kind == Admission::Kind::kQueued) {
      waiting.emplace(r.id, std::make_pair(r, now));
      collect_grants();
    }
  };
  for (; now < end; ++now) {
    for (size_t i = 0; i < running.size();) {
      if (running[i].ends <= now) {
        dispatcher.Finish(running[i].request, "http://127.0.0.1:1", Dispatcher::Outcome::kSucceeded,
                          {37, 32, 0}, now);
        running[i] = running.back();
        running.pop_back();
        collect_grants();
      } else {
        ++i;
      }
    }
    int a_waiting = 0;
    for (const auto& [id, w] : waiting) a_waiting += w.first.tenant_id == "a" ? 1 : 0;
    while (now >= flood_from && a_waiting++ < 200) admit("a");
    while (next_b <= static_cast<double>(now)) {
      admit("b");
      next_b += gap(rng);
    }
  }
  return b_waits;
}

int64_t Percentile(std::vector<int64_t> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * v.size()))];
}

TEST(DispatcherFloodTest, ALightTenantWaitsOnlyWhenItBurstsAboveItsShare) {
  // B sends half its share (16 slots / 420 ms = 38 requests/s, B's share half
  // of that), alone for 20 s (so its fair-queue counter is far ahead of A's
  // when A arrives), then A floods for 120 s.
  const double rate = 38.1 / 4;
  std::vector<int64_t> waits = SimulateFlood(rate, 20, 120, 7);
  ASSERT_GT(waits.size(), 1000u);
  // B runs 4 requests on average, above its 8 slots ~5% of the time (Poisson):
  // only then does it wait, for the next slot to free.
  EXPECT_EQ(Percentile(waits, 90), 0);
  EXPECT_LE(Percentile(waits, 99), 250);
  // The credit is what puts B's bursts first: without it they alternate with
  // A's backlog and wait longer.
  DispatcherOptions no_credit;
  no_credit.fair.max_credit = 0;
  std::vector<int64_t> plain = SimulateFlood(38.1 / 3, 20, 120, 7, no_credit);
  std::vector<int64_t> credited = SimulateFlood(38.1 / 3, 20, 120, 7);
  EXPECT_LT(Percentile(credited, 95), Percentile(plain, 95));
  std::cout << "B's waits at half its share: p99 " << Percentile(waits, 99)
            << " ms; at 2/3 of its share p95 " << Percentile(credited, 95)
            << " ms (without the credit " << Percentile(plain, 95) << " ms)\n";
}

// The fairness scenario in virtual time: the dispatcher in front of
// the engine simulator's core (h100-llama3-8b, batch 64, a deployment of 32
// slots), B at half its share, A flooding. Without pacing, A's requests (all
// of one length) end and are replaced in clumps, and each clump's prefills
// stall the engine's whole batch: B's p99 time to first token is several
// times its alone figure. With max_prefill 2, A's refills are spread over the
// steps while B's requests never wait for them.
TEST(DispatcherFloodTest, PacingPrefillsKeepsALightTenantsFirstTokenNearItsAloneFigure) {
  FairnessModelConfig config;
  config.seconds = 60;
  auto ratio = [&](int max_prefill, uint32_t seed, double* throughput) {
    config.max_prefill = max_prefill;
    auto capacity = RunFairnessModel(config, 0, 128, seed);
    EXPECT_TRUE(capacity.has_value());
    const double b_rate = capacity->completed_per_s / 4;
    auto alone = RunFairnessModel(config, b_rate, 0, seed);
    auto flood = RunFairnessModel(config, b_rate, 128, seed);
    EXPECT_TRUE(alone.has_value() && flood.has_value());
    EXPECT_GT(flood->b_ttft_ms.size(), 500u);
    *throughput = flood->completed_per_s;
    return PercentileOf(flood->b_ttft_ms, 99) / PercentileOf(alone->b_ttft_ms, 99);
  };
  for (uint32_t seed : {1u, 2u}) {
    double unpaced_rps = 0;
    double paced_rps = 0;
    const double unpaced = ratio(0, seed, &unpaced_rps);
    const double paced = ratio(2, seed, &paced_rps);
    std::cout << "seed " << seed << ": B's p99 TTFT flooded / alone " << unpaced << "x unpaced, "
              << paced << "x with max_prefill 2; requests/s " << unpaced_rps << " and " << paced_rps
              << "\n";
    EXPECT_GT(unpaced, 2.0);
    EXPECT_LT(paced, 1.6);
    // Pacing costs the engine next to nothing here.
    EXPECT_GT(paced_rps, 0.97 * unpaced_rps);
  }
}

}  // namespace
}  // namespace atrium::gateway_server
