#include "gateway/slot_rules.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace atrium::gateway {
namespace {

constexpr int64_t kNowMs = 10'000;

// One tenant of the deployment, as a row sets it up.
struct TenantRow {
  std::string name;
  double weight = 1;
  int64_t running = 0;
  int64_t queued = 0;       // waiting in the deployment's queue
  double served = 0;        // tokens served just now (SlotShares::Light)
  int64_t seen_ms_ago = 0;  // when its newest request arrived
};

struct Verdict {
  bool may_take_slot = false;
  bool paced = false;
  bool burst = false;
  bool goes_first = false;
  bool burst_slots_open = false;
};

// The deployment, its tenants and the request asking (of the first tenant)
// → what the rules say.
struct Row {
  const char* name;
  int64_t capacity = 4;
  bool paces = false;   // an endpoint sets max_prefill
  bool bursts = false;  // an endpoint has burst slots
  bool fair = true;     // the fair discipline, else FIFO
  std::vector<TenantRow> tenants;
  bool stream = true;    // the request streams
  bool waiting = false;  // the request is in the queue (counted in `queued`)
  Verdict expect;
};

const std::vector<Row> kRows = {
    // Slots within the capacity.
    {.name = "a lone tenant takes any free slot",
     .tenants = {{.name = "a", .running = 3}},
     .expect = {.may_take_slot = true, .goes_first = true}},
    {.name = "a lone tenant at the capacity waits, burst slots or not",
     .bursts = true,
     .tenants = {{.name = "a", .running = 4}},
     .expect = {}},
    {.name = "the last free slot is kept for another active tenant's share",
     .tenants = {{.name = "a", .running = 2}, {.name = "b", .running = 1}},
     .expect = {}},
    {.name = "another tenant's waiting request fills the slot kept for it",
     .tenants = {{.name = "a", .running = 2}, {.name = "b", .running = 1, .queued = 1}},
     .expect = {.may_take_slot = true}},
    {.name = "a tenant below its share takes a slot and goes first",
     .tenants = {{.name = "b", .running = 1}, {.name = "a", .running = 2}},
     .expect = {.may_take_slot = true, .goes_first = true}},
    {.name = "weights set the shares",
     .tenants = {{.name = "a", .weight = 3, .running = 2}, {.name = "b", .running = 1}},
     .expect = {.may_take_slot = true, .goes_first = true}},
    {.name = "FIFO keeps no slot for anyone",
     .fair = false,
     .tenants = {{.name = "a", .running = 2}, {.name = "b", .running = 1}},
     .expect = {.may_take_slot = true}},
    {.name = "a tenant seen lately but running nothing holds no slot back, yet counts for order",
     .tenants = {{.name = "a", .running = 3}, {.name = "b", .seen_ms_ago = 500}},
     .expect = {.may_take_slot = true}},

    // Pacing: waits for the endpoint's prefills.
    {.name = "a request that does not stream is not paced",
     .paces = true,
     .tenants = {{.name = "a", .running = 3, .queued = 5}, {.name = "b", .running = 1}},
     .stream = false,
     .waiting = true,
     .expect = {}},
    {.name = "nothing is paced where no endpoint sets max_prefill",
     .tenants = {{.name = "a", .running = 3, .queued = 5}, {.name = "b", .running = 1}},
     .waiting = true,
     .expect = {}},
    {.name = "a lone tenant is not paced",
     .paces = true,
     .tenants = {{.name = "a", .running = 3, .queued = 5}},
     .waiting = true,
     .expect = {.may_take_slot = true, .goes_first = true}},
    {.name = "under FIFO every streamed request is paced while another tenant is present",
     .paces = true,
     .fair = false,
     .tenants = {{.name = "a"}, {.name = "b", .running = 3}},
     .expect = {.may_take_slot = true, .paced = true, .goes_first = true}},
    {.name = "a tenant running nothing is not paced",
     .paces = true,
     .tenants = {{.name = "a"}, {.name = "b", .running = 3, .queued = 4}},
     .expect = {.may_take_slot = true, .goes_first = true}},
    {.name = "a flooding tenant at its share is paced",
     .paces = true,
     .tenants = {{.name = "a", .running = 3, .queued = 5}, {.name = "b", .running = 1}},
     .waiting = true,
     .expect = {.paced = true}},
    {.name = "the request asking counts towards its tenant's share before it queues",
     .paces = true,
     .tenants = {{.name = "a", .running = 1, .served = 10'000},
                 {.name = "b", .running = 2, .served = 100}},
     .expect = {.may_take_slot = true, .paced = true, .goes_first = true}},
    {.name = "a light tenant's burst above its share is not paced",
     .paces = true,
     .tenants = {{.name = "a", .running = 2, .served = 100},
                 {.name = "b", .running = 2, .queued = 10, .served = 10'000}},
     .expect = {}},
    {.name = "a tenant asking least but served more than its share is paced",
     .paces = true,
     .tenants = {{.name = "a", .running = 2, .served = 10'000},
                 {.name = "b", .running = 2, .queued = 10, .served = 100}},
     .expect = {.paced = true}},
    {.name = "a tenant seen lately still has the flooder paced",
     .paces = true,
     .tenants = {{.name = "a", .running = 3}, {.name = "b", .seen_ms_ago = 500}},
     .expect = {.may_take_slot = true, .paced = true}},
    {.name = "a tenant seen longer ago than the presence window is gone",
     .paces = true,
     .tenants = {{.name = "a", .running = 3}, {.name = "b", .seen_ms_ago = 3000}},
     .expect = {.may_take_slot = true, .goes_first = true}},

    // Burst slots above the capacity.
    {.name = "at the capacity a light tenant asking least takes a burst slot",
     .bursts = true,
     .tenants = {{.name = "a", .running = 2, .served = 100},
                 {.name = "b", .running = 2, .queued = 10, .served = 10'000}},
     .expect = {.may_take_slot = true, .burst = true, .burst_slots_open = true}},
    {.name = "a light tenant asking more than another takes no burst slot",
     .bursts = true,
     .tenants = {{.name = "a", .running = 2, .queued = 3, .served = 100},
                 {.name = "b", .running = 2, .served = 10'000}},
     .waiting = true,
     .expect = {.burst_slots_open = true}},
    {.name = "a heavy tenant at its share takes no burst slot",
     .bursts = true,
     .tenants = {{.name = "a", .running = 2, .served = 10'000},
                 {.name = "b", .running = 2, .queued = 10, .served = 100}},
     .expect = {.burst_slots_open = true}},
    {.name = "a tenant below its share of the capacity takes a burst slot, light or not",
     .bursts = true,
     .tenants = {{.name = "a", .running = 1, .served = 10'000},
                 {.name = "b", .running = 3, .queued = 5, .served = 100}},
     .expect =
         {.may_take_slot = true, .burst = true, .goes_first = true, .burst_slots_open = true}},
    {.name = "FIFO has no burst slots",
     .bursts = true,
     .fair = false,
     .tenants = {{.name = "a", .running = 2, .served = 100},
                 {.name = "b", .running = 2, .queued = 10, .served = 10'000}},
     .expect = {.may_take_slot = true}},
};

TEST(SlotRulesTest, Table) {
  for (const Row& row : kRows) {
    SCOPED_TRACE(row.name);
    SlotShares shares;
    DeploymentLoad load{
        .capacity = row.capacity, .paces = row.paces, .bursts = row.bursts, .fair = row.fair};
    std::map<std::string, int64_t> queued;
    for (const TenantRow& t : row.tenants) {
      shares.Seen(t.name, t.weight, kNowMs - t.seen_ms_ago);
      for (int64_t i = 0; i < t.running; ++i) shares.Started(t.name);
      for (int64_t i = 0; i < t.queued; ++i) shares.Queued(t.name);
      if (t.served > 0) shares.Served(t.name, t.served, kNowMs);
      load.in_flight += t.running;
      queued[t.name] = t.queued;
    }
    const SlotShares::QueuedFn queued_fn = [&queued](const std::string& tenant) {
      auto it = queued.find(tenant);
      return it == queued.end() ? 0 : it->second;
    };
    const SlotRules rules(shares, load, queued_fn, kNowMs);
    const std::string& tenant = row.tenants.front().name;
    EXPECT_EQ(rules.MayTakeSlot(tenant), row.expect.may_take_slot);
    EXPECT_EQ(rules.Paced(tenant, row.stream, row.waiting), row.expect.paced);
    EXPECT_EQ(rules.Burst(tenant), row.expect.burst);
    const PickRule rule = rules.RuleFor(tenant, row.stream, row.waiting);
    EXPECT_EQ(rule.paced, row.expect.paced);
    EXPECT_EQ(rule.burst, row.expect.burst);
    EXPECT_EQ(rules.GoesFirst(tenant), row.expect.goes_first);
    EXPECT_EQ(rules.BurstSlotsOpen(), row.expect.burst_slots_open);
  }
}

// The view reads the state it refers to when asked: the Dispatcher makes one
// per pump and starts requests under it.
TEST(SlotRulesTest, SeesTheLoadChangeUnderIt) {
  SlotShares shares;
  shares.Seen("a", 1, kNowMs);
  DeploymentLoad load{.capacity = 2};
  const SlotShares::QueuedFn none = [](const std::string&) { return int64_t{0}; };
  const SlotRules rules(shares, load, none, kNowMs);
  EXPECT_TRUE(rules.MayTakeSlot("a"));
  shares.Started("a");
  shares.Started("a");
  load.in_flight = 2;
  EXPECT_FALSE(rules.MayTakeSlot("a"));
}

}  // namespace
}  // namespace atrium::gateway
