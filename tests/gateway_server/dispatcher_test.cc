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

// A deployment of model "m" on `endpoints`.
DeploymentRecord TestDeployment(const std::string& id, std::vector<DeploymentEndpoint> endpoints) {
  DeploymentRecord d;
  d.id = id;
  d.model = "m";
  d.endpoints = std::move(endpoints);
  return d;
}

// A streamed request of `tenant` (its key: "<tenant>_key").
SlotRequest StreamedRequest(uint64_t id, const std::string& tenant,
                            const DeploymentRecord* deployment) {
  SlotRequest r = MakeRequest(id, tenant, deployment, 40, 100);
  r.stream = true;
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

TEST_F(DispatcherTest, AQueuedRequestThatLeavesGivesBackTheTokensItReserved) {
  // 250 tokens a minute: two requests reserving 100 each fit, a third not.
  auto limited = [&](const std::string& tenant) {
    SlotRequest r = Request(tenant);
    r.subjects = {{"tenant:a", {.tokens_per_minute = 250}}};
    return r;
  };
  deployment_.endpoints = {{"http://127.0.0.1:1", 1}};
  SlotRequest running = limited("a");
  SlotRequest waiting = limited("a");
  ASSERT_EQ(Admit(running).kind, Admission::Kind::kStarted);
  ASSERT_EQ(Admit(waiting).kind, Admission::Kind::kQueued);
  SlotRequest third = limited("a");
  EXPECT_EQ(Admit(third).http_status, 429);
  // The waiting one's deadline passes (or its client leaves): it ran
  // nothing, so the third fits now.
  ASSERT_TRUE(dispatcher_.Cancel(waiting.id, now_));
  SlotRequest fourth = limited("a");
  EXPECT_EQ(Admit(fourth).kind, Admission::Kind::kQueued);
}

// A gateway stopping under load cut its running request, whose freed slot
// went to the queued request before that one's own cut arrived: it reached a
// model server and was recorded as interrupted instead of leaving its queue.
TEST_F(DispatcherTest, OnceGrantingStopsAFreedSlotGoesToNoQueuedRequest) {
  deployment_.endpoints = {{"http://127.0.0.1:1", 1}};
  SlotRequest running = Request("a");
  SlotRequest waiting = Request("b");
  int woken = 0;
  ASSERT_EQ(Admit(running).kind, Admission::Kind::kStarted);
  ASSERT_EQ(dispatcher_.Admit(waiting, now_, [&] { ++woken; }).kind, Admission::Kind::kQueued);
  dispatcher_.StopGranting();
  Finish(running);
  dispatcher_.Pump(now_ + 1000);
  EXPECT_EQ(woken, 0);
  EXPECT_FALSE(dispatcher_.TakeGrant(waiting.id).has_value());
  EXPECT_EQ(dispatcher_.QueuedFor("dep_1"), 1u);
  // Its cut takes it out of the queue, with nothing granted to finish.
  EXPECT_TRUE(dispatcher_.Cancel(waiting.id, now_));
  EXPECT_EQ(dispatcher_.QueuedFor("dep_1"), 0u);
}

TEST_F(DispatcherTest, ADeploymentWhoseEndpointsAreAllDownIsRefusedAtOnceNotQueued) {
  for (int i = 0; i < 2; ++i) dispatcher_.HealthCheck("dep_1", "http://127.0.0.1:1", false, now_);
  Admission down = Admit(Request("a"));
  EXPECT_EQ(down.kind, Admission::Kind::kRefused);
  EXPECT_EQ(down.http_status, 503);
  EXPECT_EQ(down.retry_after_ms, 1000);  // the next health check may pass
  dispatcher_.HealthCheck("dep_1", "http://127.0.0.1:1", true, now_);
  // Ejected after three failures in a row: back when the ejection ends.
  for (int i = 0; i < 3; ++i) {
    SlotRequest r = Request("a");
    ASSERT_EQ(Admit(r).kind, Admission::Kind::kStarted);
    dispatcher_.Finish(r, "http://127.0.0.1:1", Dispatcher::Outcome::kFailed, {}, now_);
  }
  now_ += 1000;
  Admission ejected = Admit(Request("a"));
  EXPECT_EQ(ejected.http_status, 503);
  EXPECT_EQ(ejected.retry_after_ms, 4000);
}

TEST_F(DispatcherTest, AnExternalDeploymentWithoutEndpointsIsRefusedAManagedOneWaitsForAReplica) {
  deployment_.endpoints.clear();
  EXPECT_EQ(Admit(Request("a")).http_status, 503);
  // Managed, at zero: the request waits until the deployment's first
  // replica is in the newest snapshot, then starts on it.
  deployment_.serving = R"({"template":"engine-sim"})";
  SlotRequest first = Request("a");
  int woken = 0;
  ASSERT_EQ(dispatcher_.Admit(first, now_, [&] { ++woken; }).kind, Admission::Kind::kQueued);
  dispatcher_.Pump(now_ + 100);
  EXPECT_EQ(woken, 0);
  now_ += 2'500;
  std::vector<DeploymentLoadReport> loads = dispatcher_.Loads(now_);
  ASSERT_EQ(loads.size(), 1U);
  EXPECT_EQ(loads[0].deployment_id, "dep_1");
  EXPECT_EQ(loads[0].queued, 1);
  EXPECT_EQ(loads[0].oldest_wait_ms, 2'500);
  EXPECT_EQ(loads[0].in_flight, 0);
  DeploymentRecord ready = deployment_;
  ready.endpoints = {{"http://127.0.0.1:1", 4}};
  dispatcher_.Refresh({ready}, now_);
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(dispatcher_.TakeGrant(first.id), "http://127.0.0.1:1");
  loads = dispatcher_.Loads(now_);
  EXPECT_EQ(loads[0].queued, 0);
  EXPECT_EQ(loads[0].oldest_wait_ms, 0);
  EXPECT_EQ(loads[0].in_flight, 1);
}

TEST_F(DispatcherTest, ATenantBelowItsShareTakesTheNextFreeSlotFirst) {
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
  // One of a's requests ends: a is one below its share, and a tenant below
  // its share goes first, whatever the fair queue's counters say (b has used
  // far less than a; a tenant that has just started flooding has the
  // smaller counter, and would take every slot a light one waits for).
  Finish(a[0]);
  EXPECT_TRUE(dispatcher_.TakeGrant(a[2].id).has_value());
  EXPECT_FALSE(dispatcher_.TakeGrant(burst.id).has_value());
  // One of b's ends: b is below its share, and its burst goes next, ahead
  // of a's backlog.
  Finish(b[0]);
  EXPECT_TRUE(dispatcher_.TakeGrant(burst.id).has_value());
  for (int i = 3; i < 10; ++i) EXPECT_FALSE(dispatcher_.TakeGrant(a[i].id).has_value()) << i;
}

TEST_F(DispatcherTest, BelowItsShareATenantGoesFirstOnlyWithinItsPriorityClass) {
  // b and a run their shares of the 4 slots; a queues a batch request, b
  // an interactive one.
  std::vector<SlotRequest> b = {Request("b"), Request("b")};
  for (const auto& r : b) ASSERT_EQ(Admit(r).kind, Admission::Kind::kStarted);
  std::vector<SlotRequest> a = {Request("a"), Request("a")};
  for (const auto& r : a) ASSERT_EQ(Admit(r).kind, Admission::Kind::kStarted);
  SlotRequest a_batch = Request("a");
  a_batch.priority = gateway::Priority::kBatch;
  EXPECT_EQ(Admit(a_batch).kind, Admission::Kind::kQueued);
  SlotRequest b_interactive = Request("b");
  EXPECT_EQ(Admit(b_interactive).kind, Admission::Kind::kQueued);
  // One of a's ends: a is below its share, but its waiting request is a
  // batch one, and b's interactive request goes first.
  Finish(a[0]);
  EXPECT_TRUE(dispatcher_.TakeGrant(b_interactive.id).has_value());
  EXPECT_FALSE(dispatcher_.TakeGrant(a_batch.id).has_value());
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

// The issue: a tenant whose request had been refused at once (billed 0)
// counted as active for two seconds after it, which kept its share of the
// slots from a flooding tenant; one such request every 1.5 s left 2 of 4
// slots idle throughout.
TEST_F(DispatcherTest, ATenantWithNothingRunningOrWaitingKeepsNoSlotsIdle) {
  SlotRequest refused = Request("b");
  ASSERT_EQ(Admit(refused).kind, Admission::Kind::kStarted);
  dispatcher_.Finish(refused, "http://127.0.0.1:1", Dispatcher::Outcome::kSucceeded, {0, 0, 0},
                     now_);
  now_ += 1;
  std::vector<SlotRequest> a;
  int started = 0;
  for (int i = 0; i < 10; ++i) {
    a.push_back(Request("a"));
    if (Admit(a.back()).kind == Admission::Kind::kStarted) ++started;
  }
  EXPECT_EQ(started, 4) << "b runs and waits for nothing: every slot is a's";
  EXPECT_EQ(dispatcher_.QueuedFor("dep_1"), 6u);
}

// The issue: balancer state was kept per URL, so a tenant's dedicated
// deployment naming a shared deployment's URL took that one's slots outside
// its fair queue (and its failures ejected the endpoint for everyone).
TEST(DispatcherStateTest, EachDeploymentCountsItsOwnSlotsOfAnEndpointItShares) {
  const DeploymentRecord shared = TestDeployment("dep_shared", {{"http://10.0.0.9:8000", 1}});
  DeploymentRecord dedicated = TestDeployment("dep_dedicated", {{"http://10.0.0.9:8000", 1}});
  dedicated.visibility = "dedicated";
  dedicated.tenant_id = "t";
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  SlotRequest own = MakeRequest(1, "t", &dedicated, 40, 100);
  ASSERT_EQ(dispatcher.Admit(own, now, [] {}).kind, Admission::Kind::kStarted);
  SlotRequest other = MakeRequest(2, "u", &shared, 40, 100);
  EXPECT_EQ(dispatcher.Admit(other, now, [] {}).kind, Admission::Kind::kStarted)
      << "the dedicated deployment's request holds none of the shared one's slots";
  EXPECT_EQ(dispatcher.OutstandingOn("dep_shared", "http://10.0.0.9:8000"), 1);
  EXPECT_EQ(dispatcher.OutstandingOn("dep_dedicated", "http://10.0.0.9:8000"), 1);
  // Failures through the dedicated deployment eject it there only.
  dispatcher.Finish(own, "http://10.0.0.9:8000", Dispatcher::Outcome::kFailed, {}, now);
  for (uint64_t id = 3; id < 5; ++id) {
    SlotRequest r = MakeRequest(id, "t", &dedicated, 40, 100);
    ASSERT_EQ(dispatcher.Admit(r, now, [] {}).kind, Admission::Kind::kStarted);
    dispatcher.Finish(r, "http://10.0.0.9:8000", Dispatcher::Outcome::kFailed, {}, now);
  }
  // Routing sees it as the gateway does: of the two deployments, the
  // dedicated one (first) is passed over for the shared one, which is up
  // (were both down, the first of all would be chosen).
  EXPECT_EQ(dispatcher.Choose({&dedicated, &shared}, now), &shared);
  for (int i = 0; i < 2; ++i) {
    dispatcher.HealthCheck("dep_dedicated", "http://10.0.0.9:8000", false, now);
  }
  EXPECT_EQ(dispatcher.Choose({&dedicated, &shared}, now), &shared);
}

TEST(DispatcherPacingTest, TheHeavierTenantsStreamsWaitForTheEndpointsPrefillsALighterOnesDoNot) {
  const DeploymentRecord deployment =
      TestDeployment("dep_paced", {{"http://127.0.0.1:1", 16, 1}});  // one prefill at a time
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  uint64_t next_id = 1;
  auto streamed = [&](const std::string& tenant) {
    return StreamedRequest(next_id++, tenant, &deployment);
  };
  auto admit = [&](const SlotRequest& r) { return dispatcher.Admit(r, now, [] {}).kind; };
  // b alone is not paced: nobody waits behind its prefills.
  std::vector<SlotRequest> b = {streamed("b"), streamed("b")};
  for (const auto& r : b) EXPECT_EQ(admit(r), Admission::Kind::kStarted);
  // a's streams start while a asks for less than its share (8 of the 16
  // slots): one running before, this one included.
  std::vector<SlotRequest> a;
  for (int i = 0; i < 7; ++i) {
    a.push_back(streamed("a"));
    EXPECT_EQ(admit(a.back()), Admission::Kind::kStarted) << i;
  }
  // Its eighth asks for its share while b asks for less: it waits while
  // the endpoint has a request in prefill, although 7 slots are free.
  SlotRequest a8 = streamed("a");
  EXPECT_EQ(admit(a8), Admission::Kind::kQueued);
  EXPECT_FALSE(dispatcher.TakeGrant(a8.id).has_value());
  // b asks for less than a: never paced, prefills or not.
  SlotRequest b3 = streamed("b");
  EXPECT_EQ(admit(b3), Admission::Kind::kQueued);  // behind a8 in the queue, then past it
  EXPECT_TRUE(dispatcher.TakeGrant(b3.id).has_value());
  // The first tokens come back; a's stream starts once none is in prefill.
  std::vector<SlotRequest> started = a;
  started.insert(started.end(), b.begin(), b.end());
  started.push_back(b3);
  for (size_t i = 0; i < started.size(); ++i) {
    EXPECT_FALSE(dispatcher.TakeGrant(a8.id).has_value()) << i;
    dispatcher.FirstToken(started[i], now);
  }
  EXPECT_TRUE(dispatcher.TakeGrant(a8.id).has_value());
}

TEST(DispatcherPacingTest, OfTwoTenantsAboveTheirSharesOnlyTheOneServedLessGoesUnpaced) {
  const std::string url = "http://127.0.0.1:1";
  const DeploymentRecord deployment =
      TestDeployment("dep_both", {{url, 4, 1}});  // shares of 2; one prefill at a time
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  uint64_t next_id = 1;
  auto request = [&](const std::string& tenant, bool stream) {
    SlotRequest r = MakeRequest(next_id++, tenant, &deployment, 40, 100);
    r.stream = stream;
    return r;
  };
  auto serve = [&](const std::string& tenant, int n) {
    for (int i = 0; i < n; ++i) {
      SlotRequest r = request(tenant, false);
      ASSERT_EQ(dispatcher.Admit(r, now, [] {}).kind, Admission::Kind::kStarted);
      dispatcher.Finish(r, url, Dispatcher::Outcome::kSucceeded, {40, 60, 0}, now);
    }
  };
  serve("a", 4);  // a has been served 400 tokens, b 100: b is light
  serve("b", 1);
  // Started at once, or granted from the queue at once.
  auto starts = [&](const SlotRequest& r) {
    return dispatcher.Admit(r, now, [] {}).kind == Admission::Kind::kStarted ||
           dispatcher.TakeGrant(r.id).has_value();
  };
  EXPECT_TRUE(starts(request("a", true)));   // a asks for 1 of its 2
  EXPECT_FALSE(starts(request("a", true)));  // asks for 2, b for less: paced
  EXPECT_TRUE(starts(request("b", true)));   // b asks for 1 of its 2
  // b asks for its share (2) and no more than a (2), and is light: not
  // paced, although two requests are in prefill.
  EXPECT_TRUE(starts(request("b", true)));
  // Now a asks for no more than b (3 each, with this request) but is not
  // light: paced, although a slot is free. (From another of a's keys, so
  // that it does not just queue behind a2.) Were asking for least enough, a
  // tenant served faster, its queue the shorter for it, would be served
  // faster still.
  EXPECT_FALSE(starts(request("b", true)));  // b asks for more than a now
  SlotRequest a3 = request("a", true);
  a3.key_id = "a_other_key";
  EXPECT_FALSE(starts(a3));
}

TEST(DispatcherPacingTest, UnderFifoEveryStreamIsPacedButNotARequestThatDoesNotStream) {
  const std::string url = "http://127.0.0.1:1";
  const DeploymentRecord deployment = TestDeployment("dep_fifo", {{url, 16, 1}});
  DispatcherOptions options;
  options.discipline = QueueDiscipline::kFifo;
  Dispatcher dispatcher(options);
  const int64_t now = 1'000'000;
  auto streamed = [&](uint64_t id, const std::string& tenant) {
    return StreamedRequest(id, tenant, &deployment);
  };
  SlotRequest b1 = streamed(1, "b");
  ASSERT_EQ(dispatcher.Admit(b1, now, [] {}).kind, Admission::Kind::kStarted);  // alone
  // Another tenant is active: a's stream waits for b1's prefill.
  SlotRequest a1 = streamed(2, "a");
  EXPECT_EQ(dispatcher.Admit(a1, now, [] {}).kind, Admission::Kind::kQueued);
  // A request that does not stream is not paced: the gateway cannot see
  // when its prefill ends. (From another key: a key's requests keep their
  // order.)
  SlotRequest plain = MakeRequest(3, "a", &deployment, 40, 100);
  plain.key_id = "a_other_key";
  EXPECT_EQ(dispatcher.Admit(plain, now, [] {}).kind, Admission::Kind::kQueued);
  EXPECT_TRUE(dispatcher.TakeGrant(plain.id).has_value());
  EXPECT_FALSE(dispatcher.TakeGrant(a1.id).has_value());
  // A first token for a request that does not stream changes nothing.
  dispatcher.FirstToken(plain, now);
  EXPECT_FALSE(dispatcher.TakeGrant(a1.id).has_value());
  // A request that ends before its first token ends its prefill too.
  dispatcher.Finish(b1, url, Dispatcher::Outcome::kAbandoned, {40, 0, 0}, now);
  EXPECT_TRUE(dispatcher.TakeGrant(a1.id).has_value());
  // A first token reported twice changes nothing: a1 is in prefill still
  // after the first report, and so a's next stream waits.
  dispatcher.FirstToken(a1, now);
  dispatcher.FirstToken(a1, now);
  SlotRequest a2 = streamed(4, "a");
  SlotRequest b2 = streamed(5, "b");
  EXPECT_EQ(dispatcher.Admit(b2, now, [] {}).kind, Admission::Kind::kStarted);
  EXPECT_EQ(dispatcher.Admit(a2, now, [] {}).kind, Admission::Kind::kQueued);
}

TEST(DispatcherPacingTest, NobodyIsPacedWhileEveryTenantAsksForLessThanItsShare) {
  const DeploymentRecord deployment = TestDeployment("dep_light", {{"http://127.0.0.1:1", 16, 1}});
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  for (uint64_t id = 1; id <= 14; ++id) {
    SlotRequest r = MakeRequest(id, id % 2 ? "a" : "b", &deployment, 40, 100);
    r.stream = true;
    EXPECT_EQ(dispatcher.Admit(r, now, [] {}).kind, Admission::Kind::kStarted) << id;
  }
}

// Tenant a alone on `deployment` runs `served` requests through (so it has
// been served), then fills the endpoint's capacity and queues `queued` more.
std::vector<SlotRequest> FloodAlone(Dispatcher& dispatcher, const DeploymentRecord& deployment,
                                    int served, int capacity, int queued, uint64_t& next_id,
                                    int64_t now) {
  for (int i = 0; i < served; ++i) {
    SlotRequest r = MakeRequest(next_id++, "a", &deployment, 40, 100);
    EXPECT_EQ(dispatcher.Admit(r, now, [] {}).kind, Admission::Kind::kStarted);
    dispatcher.Finish(r, deployment.endpoints[0].url, Dispatcher::Outcome::kSucceeded, {40, 60, 0},
                      now);
  }
  std::vector<SlotRequest> a;
  for (int i = 0; i < capacity + queued; ++i) {
    a.push_back(MakeRequest(next_id++, "a", &deployment, 40, 100));
    EXPECT_EQ(dispatcher.Admit(a.back(), now, [] {}).kind,
              i < capacity ? Admission::Kind::kStarted : Admission::Kind::kQueued)
        << i;
  }
  return a;
}

TEST(DispatcherBurstTest, ALightTenantStartsOnABurstSlotWhileAHeavyOneWaits) {
  const std::string url = "http://127.0.0.1:1";
  const DeploymentRecord deployment =
      TestDeployment("dep_burst", {{url, 4, 0, 3}});  // capacity 4, 3 burst slots
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  uint64_t next_id = 1;
  auto finish = [&](const SlotRequest& r) {
    dispatcher.Finish(r, url, Dispatcher::Outcome::kSucceeded, {40, 60, 0}, now);
  };
  // a has been served 4 requests and fills the 4 slots, 2 more waiting.
  std::vector<SlotRequest> a = FloodAlone(dispatcher, deployment, 4, 4, 2, next_id, now);
  // b arrives with a burst of four, asking for less than a. Its first two
  // run below its share (2), its third at its share but b is light (served
  // 80 tokens against a's 560): all three take the burst slots at once
  // instead of waiting for a's requests to end.
  std::vector<SlotRequest> b;
  for (int i = 0; i < 4; ++i) {
    b.push_back(MakeRequest(next_id++, "b", &deployment, 40, 100));
    EXPECT_EQ(dispatcher.Admit(b.back(), now, [] {}).kind, Admission::Kind::kQueued);
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(dispatcher.TakeGrant(b[i].id).has_value()) << i;
  EXPECT_FALSE(dispatcher.TakeGrant(b[3].id).has_value()) << "the burst slots are used up";
  // A burst slot frees: b's fourth request takes it; a, not light and not
  // below its share, never takes a burst slot.
  finish(b[0]);
  EXPECT_TRUE(dispatcher.TakeGrant(b[3].id).has_value());
  EXPECT_FALSE(dispatcher.TakeGrant(a[4].id).has_value());
  // Seven run on four slots: two of a's ending leaves five, a running its
  // share: still no slot for a.
  finish(a[0]);
  finish(a[1]);
  EXPECT_FALSE(dispatcher.TakeGrant(a[4].id).has_value());
  EXPECT_EQ(dispatcher.QueuedFor("dep_burst"), 2u);
}

TEST(DispatcherBurstTest, NoBurstWithoutBurstSlotsNorUnderFifo) {
  for (QueueDiscipline discipline : {QueueDiscipline::kFair, QueueDiscipline::kFifo}) {
    SCOPED_TRACE(discipline == QueueDiscipline::kFair ? "fair, no burst slots" : "fifo");
    const int64_t burst = discipline == QueueDiscipline::kFair ? 0 : 2;
    const DeploymentRecord deployment =
        TestDeployment("dep_no_burst", {{"http://127.0.0.1:1", 2, 0, burst}});
    DispatcherOptions options;
    options.discipline = discipline;
    Dispatcher dispatcher(options);
    const int64_t now = 1'000'000;
    uint64_t next_id = 1;
    FloodAlone(dispatcher, deployment, 2, 2, 1, next_id, now);
    SlotRequest b = MakeRequest(next_id++, "b", &deployment, 40, 100);
    EXPECT_EQ(dispatcher.Admit(b, now, [] {}).kind, Admission::Kind::kQueued);
    EXPECT_FALSE(dispatcher.TakeGrant(b.id).has_value());
  }
}

TEST(DispatcherPacingTest, ARetryMovesTheRequestsPrefillToTheNextEndpoint) {
  const std::string first = "http://127.0.0.1:1";
  const std::string second = "http://127.0.0.1:2";
  const DeploymentRecord deployment = TestDeployment("dep_retry", {{first, 2, 1}, {second, 2, 1}});
  Dispatcher dispatcher(DispatcherOptions{});
  const int64_t now = 1'000'000;
  auto streamed = [&](uint64_t id, const std::string& tenant) {
    return StreamedRequest(id, tenant, &deployment);
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
  // a asks for its share (2 of 4) with its next stream, b for less: it is
  // paced and finds no endpoint below max_prefill (had the retry not moved the
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
// steps while B's requests never wait for them. Burst slots take away what
// is left of B's wait in the queue: the moments its Poisson bursts outgrow
// its share of the slots.
TEST(DispatcherFloodTest, PacingPrefillsKeepsALightTenantsFirstTokenNearItsAloneFigure) {
  FairnessModelConfig config;
  config.seconds = 120;
  struct Outcome {
    double ratio = 0;       // B's p99 TTFT flooded over alone
    double wait_p99 = 0;    // B's p99 wait in the gateway's queue, flooded
    double throughput = 0;  // requests/s, flooded
  };
  auto run = [&](int max_prefill, int burst, uint32_t seed) {
    config.max_prefill = max_prefill;
    config.burst = burst;
    Outcome out;
    auto capacity = RunFairnessModel(config, 0, 128, seed);
    EXPECT_TRUE(capacity.has_value());
    if (!capacity.has_value()) return out;
    const double b_rate = capacity->completed_per_s / 4;
    auto alone = RunFairnessModel(config, b_rate, 0, seed);
    auto flood = RunFairnessModel(config, b_rate, 128, seed);
    EXPECT_TRUE(alone.has_value() && flood.has_value());
    if (!alone.has_value() || !flood.has_value()) return out;
    EXPECT_GT(flood->b_ttft_ms.size(), 500u);
    out.ratio = PercentileOf(flood->b_ttft_ms, 99) / PercentileOf(alone->b_ttft_ms, 99);
    out.wait_p99 = PercentileOf(flood->b_wait_ms, 99);
    out.throughput = flood->completed_per_s;
    return out;
  };
  double paced_wait_max = 0;
  for (uint32_t seed : {1u, 2u}) {
    const Outcome unpaced = run(0, 0, seed);
    const Outcome paced = run(2, 0, seed);
    const Outcome burst = run(2, 4, seed);
    std::cout << "seed " << seed << ": B's p99 TTFT flooded / alone " << unpaced.ratio
              << "x unpaced, " << paced.ratio << "x with max_prefill 2, " << burst.ratio
              << "x and B's queue wait p99 " << burst.wait_p99
              << " ms with burst 4 too; requests/s " << unpaced.throughput << ", "
              << paced.throughput << ", " << burst.throughput << "\n";
    EXPECT_GT(unpaced.ratio, 2.0);
    EXPECT_LT(paced.ratio, 1.7);
    EXPECT_LT(burst.ratio, 1.5);
    paced_wait_max = std::max(paced_wait_max, paced.wait_p99);
    EXPECT_LT(burst.wait_p99, 1.0);
    // Pacing costs the engine next to nothing here, nor do burst slots.
    EXPECT_GT(paced.throughput, 0.97 * unpaced.throughput);
    EXPECT_GT(burst.throughput, 0.97 * unpaced.throughput);
  }
  // Without burst slots, B does wait in the queue at times.
  EXPECT_GT(paced_wait_max, 1.0);
}

}  // namespace
}  // namespace atrium::gateway_server
