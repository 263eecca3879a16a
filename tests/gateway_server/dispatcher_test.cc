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
  const std::string first = "http://127.0.0.1:1";
  const std::string second = "http://127.0.0.1:2";
  deployment.endpoints = {{first, 8, 1}, {second, 8, 1}};
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  auto streamed = [&](uint64_t id, const std::string& tenant) {
    SlotRequest r = MakeRequest(id, tenant, &deployment, 40, 100);
    r.stream = true;
    return r;
  };
  SlotRequest r = streamed(1, "a");
  Admission admission = dispatcher.Admit(r, now, [] {});
  ASSERT_EQ(admission.kind, Admission::Kind::kStarted);
  ASSERT_EQ(admission.endpoint, first);
  // The first endpoint fails before any byte: the request and its prefill
  // move to the second.
  ASSERT_EQ(dispatcher.Retry(r, first, {first}, now), second);
  // b's stream goes to the first endpoint (fewer outstanding) and is in
  // prefill there: each endpoint now has one prefill.
  SlotRequest b = streamed(2, "b");
  Admission for_b = dispatcher.Admit(b, now, [] {});
  ASSERT_EQ(for_b.kind, Admission::Kind::kStarted);
  ASSERT_EQ(for_b.endpoint, first);
  // a runs its share of what runs (1 of 2): its next stream is paced and
  // finds no endpoint below max_prefill (had the retry not moved the
  // prefill, the second endpoint would take it).
  SlotRequest a2 = streamed(3, "a");
  EXPECT_EQ(dispatcher.Admit(a2, now, [] {}).kind, Admission::Kind::kQueued);
  // b's first token frees the first endpoint's prefill (had the retry left
  // the failed attempt's prefill there, it would still be full).
  dispatcher.FirstToken(b, now);
  EXPECT_EQ(dispatcher.TakeGrant(a2.id), first);
}

// The fairness benchmark's scenario in virtual time: the dispatcher in front of
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
