#include "gateway/fair_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace atrium::gateway {
namespace {

const CanStartFn kAny = [](const QueuedItem&) { return true; };

QueuedItem Item(uint64_t id, std::string tenant, int64_t input_tokens = 10, double weight = 1,
                Priority priority = Priority::kInteractive, std::string key = "k") {
  QueuedItem item;
  item.id = id;
  item.tenant = std::move(tenant);
  item.key_id = std::move(key);
  item.weight = weight;
  item.priority = priority;
  item.input_tokens = input_tokens;
  return item;
}

uint64_t PopId(FairQueue& q, const CanStartFn& can_start = kAny) {
  auto item = q.Pop(can_start, nullptr);
  EXPECT_TRUE(item.has_value());
  return item ? item->id : 0;
}

TEST(FairQueueTest, ServesATenantInArrivalOrder) {
  FairQueue q;
  for (uint64_t id = 1; id <= 5; ++id) q.Push(Item(id, "a"));
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(q.QueuedFor("a"), 5u);
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_EQ(PopId(q), id);
  EXPECT_FALSE(q.Pop(kAny, nullptr).has_value());
  EXPECT_EQ(q.size(), 0u);
}

TEST(FairQueueTest, ServesTheSmallestCounterAndChargesInputAtPop) {
  FairQueue q({.input_weight = 1, .output_weight = 2});
  q.Push(Item(1, "a", 100));
  q.Push(Item(2, "a", 100));
  q.Push(Item(3, "b", 10));
  q.Push(Item(4, "b", 10));
  // Equal counters: ties go by tenant name.
  EXPECT_EQ(PopId(q), 1u);
  EXPECT_DOUBLE_EQ(q.Counter("a"), 100);
  EXPECT_EQ(PopId(q), 3u);
  EXPECT_EQ(PopId(q), 4u);
  EXPECT_DOUBLE_EQ(q.Counter("b"), 20);
  q.ChargeOutput("b", 1, 50);  // b's answer was long: 2 * 50
  EXPECT_DOUBLE_EQ(q.Counter("b"), 120);
  q.Push(Item(5, "b", 10));
  EXPECT_EQ(PopId(q), 2u);
}

TEST(FairQueueTest, ChargeInputCorrectsTheEstimate) {
  FairQueue q;
  q.Push(Item(1, "a", 100));
  q.Push(Item(2, "a", 1));
  q.Push(Item(3, "b", 50));
  EXPECT_EQ(PopId(q), 1u);
  // The real prompt was 20 tokens, not 100.
  q.ChargeInput("a", 1, -80);
  EXPECT_DOUBLE_EQ(q.Counter("a"), 20);
  EXPECT_EQ(PopId(q), 3u);
  EXPECT_EQ(PopId(q), 2u);
}

// Service as VTC measures it, counted independently of the queue.
struct Service {
  double input_weight = 1, output_weight = 2;
  std::map<std::string, double> by_tenant;
  void Add(const std::string& tenant, int64_t input, int64_t output) {
    by_tenant[tenant] +=
        input_weight * static_cast<double>(input) + output_weight * static_cast<double>(output);
  }
};

TEST(FairQueueTest, TwoBackloggedTenantsStayWithinTheVtcBound) {
  // Sequential serving: each request is served whole before the next.
  constexpr int64_t kMaxInput = 200, kMaxOutput = 100;
  const double bound = 2 * std::max(1.0 * kMaxInput, 2.0 * kMaxOutput);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> input(1, kMaxInput), output(1, kMaxOutput);
  FairQueue q;
  Service service;
  uint64_t next_id = 1;
  for (int i = 0; i < 20; ++i) {
    q.Push(Item(next_id++, "a", input(rng)));
    q.Push(Item(next_id++, "b", input(rng)));
  }
  for (int step = 0; step < 5000; ++step) {
    auto item = q.Pop(kAny, nullptr);
    ASSERT_TRUE(item.has_value());
    int64_t out = output(rng);
    q.ChargeOutput(item->tenant, item->weight, out);
    service.Add(item->tenant, item->input_tokens, out);
    // Both stay backlogged.
    q.Push(Item(next_id++, item->tenant, input(rng)));
    ASSERT_LE(std::abs(service.by_tenant["a"] - service.by_tenant["b"]), bound) << "step " << step;
  }
}

TEST(FairQueueTest, ContinuousBatchingStaysWithinTheVtcBound) {
  // A batch of 8 slots decoding one token per step, output charged per token
  // as it streams — the setting of the VTC paper.
  constexpr int64_t kMaxInput = 300, kMaxOutput = 120;
  const double bound = 2 * std::max(1.0 * kMaxInput, 2.0 * kMaxOutput);
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> input(1, kMaxInput), output(1, kMaxOutput);
  FairQueue q;
  Service service;
  uint64_t next_id = 1;
  for (int i = 0; i < 50; ++i) {
    q.Push(Item(next_id++, "a", input(rng)));
    q.Push(Item(next_id++, "b", input(rng)));
  }
  struct Running {
    std::string tenant;
    int64_t left;
  };
  std::vector<Running> batch;
  for (int step = 0; step < 20000; ++step) {
    while (batch.size() < 8) {
      auto item = q.Pop(kAny, nullptr);
      ASSERT_TRUE(item.has_value());
      service.Add(item->tenant, item->input_tokens, 0);
      batch.push_back({item->tenant, output(rng)});
      q.Push(Item(next_id++, item->tenant, input(rng)));
    }
    for (Running& r : batch) {
      q.ChargeOutput(r.tenant, 1, 1);
      service.Add(r.tenant, 0, 1);
      --r.left;
    }
    std::erase_if(batch, [](const Running& r) { return r.left == 0; });
    ASSERT_LE(std::abs(service.by_tenant["a"] - service.by_tenant["b"]), bound) << "step " << step;
  }
}

TEST(FairQueueTest, WeightsSplitServiceInProportion) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> input(1, 100), output(1, 100);
  FairQueue q;
  Service service;
  uint64_t next_id = 1;
  for (int i = 0; i < 10; ++i) {
    q.Push(Item(next_id++, "heavy", input(rng), 2));
    q.Push(Item(next_id++, "light", input(rng), 1));
  }
  for (int step = 0; step < 20000; ++step) {
    auto item = q.Pop(kAny, nullptr);
    ASSERT_TRUE(item.has_value());
    int64_t out = output(rng);
    q.ChargeOutput(item->tenant, item->weight, out);
    service.Add(item->tenant, item->input_tokens, out);
    q.Push(Item(next_id++, item->tenant, input(rng), item->weight));
  }
  double ratio = service.by_tenant["heavy"] / service.by_tenant["light"];
  EXPECT_NEAR(ratio, 2.0, 0.02);
}

TEST(FairQueueTest, AnIdleTenantBanksNoCredit) {
  FairQueue q;
  uint64_t next_id = 1;
  // a is served alone for a long time.
  for (int i = 0; i < 100; ++i) {
    q.Push(Item(next_id++, "a", 100));
    q.Push(Item(next_id++, "a", 100));
    ASSERT_TRUE(q.Pop(kAny, nullptr).has_value());
  }
  double a_counter = q.Counter("a");
  ASSERT_GT(a_counter, 9000);
  // b arrives: lifted to a's counter, so it does not get the next 90 requests.
  q.Push(Item(next_id++, "b", 100));
  EXPECT_DOUBLE_EQ(q.Counter("b"), a_counter);
  for (int i = 0; i < 20; ++i) q.Push(Item(next_id++, "b", 100));
  std::map<std::string, int> served;
  for (int i = 0; i < 40; ++i) {
    auto item = q.Pop(kAny, nullptr);
    ASSERT_TRUE(item.has_value());
    ++served[item->tenant];
  }
  EXPECT_NEAR(served["a"], 20, 1);
  EXPECT_NEAR(served["b"], 20, 1);
}

TEST(FairQueueTest, LiftsToTheLastTenantToLeaveWhenNobodyWaits) {
  FairQueue q;
  q.Push(Item(1, "a", 500));
  ASSERT_TRUE(q.Pop(kAny, nullptr).has_value());
  q.ChargeOutput("a", 1, 100);
  EXPECT_DOUBLE_EQ(q.Counter("a"), 700);
  // The queue is empty; b arrives and starts level with a, not at 0.
  q.Push(Item(2, "b", 10));
  EXPECT_DOUBLE_EQ(q.Counter("b"), 700);
  // A lift never lowers a counter.
  q.ChargeOutput("c", 1, 1000);
  q.Push(Item(3, "c", 10));
  EXPECT_DOUBLE_EQ(q.Counter("c"), 2000);
}

TEST(FairQueueTest, ACreditLetsALightTenantsBurstGoFirstButNoFurther) {
  FairQueueOptions options;
  options.max_credit = 250;
  FairQueue q(options);
  uint64_t next_id = 1;
  for (int i = 0; i < 100; ++i) {  // a is backlogged and served for a long time
    q.Push(Item(next_id++, "a", 100));
    q.Push(Item(next_id++, "a", 100));
    ASSERT_TRUE(q.Pop(kAny, nullptr).has_value());
  }
  const double a_counter = q.Counter("a");
  // b arrives far behind: lifted to a's counter less the credit, not to a's.
  q.Push(Item(next_id++, "b", 100));
  EXPECT_DOUBLE_EQ(q.Counter("b"), a_counter - 250);
  for (int i = 0; i < 5; ++i) q.Push(Item(next_id++, "b", 100));
  // b's burst goes first until the credit is spent (3 requests of 100), then
  // the two alternate as before.
  std::string order;
  for (int i = 0; i < 7; ++i) order += q.Pop(kAny, nullptr)->tenant;
  EXPECT_EQ(order.substr(0, 3), "bbb");
  EXPECT_NE(order.substr(3).find('a'), std::string::npos);
  // A lift never lowers a counter that is already within the credit.
  FairQueue fresh(options);
  fresh.ChargeOutput("c", 1, 1000);
  fresh.Push(Item(1, "c", 10));
  EXPECT_DOUBLE_EQ(fresh.Counter("c"), 2000);
}

TEST(FairQueueTest, InteractiveBeforeBatch) {
  FairQueue q;
  q.ChargeOutput("b", 1, 1000);  // b has had far more service...
  q.Push(Item(1, "a", 10, 1, Priority::kBatch));
  q.Push(Item(2, "b", 10, 1, Priority::kInteractive));
  q.Push(Item(3, "a", 10, 1, Priority::kBatch));
  q.Push(Item(4, "c", 10, 1, Priority::kBatch));
  EXPECT_EQ(PopId(q), 2u);  // ...yet its interactive item goes first
  EXPECT_EQ(PopId(q), 1u);
  EXPECT_EQ(PopId(q), 4u);
  EXPECT_EQ(PopId(q), 3u);
}

TEST(FairQueueTest, ItemsFirstAcceptsGoFirstWithinTheirClass) {
  FairQueue q;
  q.ChargeOutput("b", 1, 100);  // b comes after a by counter
  q.Push(Item(1, "a"));
  q.Push(Item(2, "b"));
  q.Push(Item(3, "c", 10, 1, Priority::kBatch));
  q.Push(Item(4, "a"));
  auto b_or_c = [](const QueuedItem& item) { return item.tenant != "a"; };
  EXPECT_EQ(q.Pop(kAny, b_or_c)->id, 2u);  // ahead of a's smaller counter
  EXPECT_EQ(q.Pop(kAny, b_or_c)->id, 1u);  // the class order still comes first
  EXPECT_EQ(q.Pop(kAny, b_or_c)->id, 4u);
  EXPECT_EQ(q.Pop(kAny, b_or_c)->id, 3u);
}

TEST(FairQueueTest, RemoveTakesAnItemOutOfEveryIndex) {
  FairQueue q;
  q.Push(Item(1, "a"));
  q.Push(Item(2, "a"));
  q.Push(Item(3, "b"));
  EXPECT_TRUE(q.Remove(1));
  EXPECT_FALSE(q.Remove(1));
  EXPECT_FALSE(q.Remove(42));
  EXPECT_TRUE(q.Remove(3));
  EXPECT_EQ(q.QueuedFor("b"), 0u);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(PopId(q), 2u);
  EXPECT_FALSE(q.Pop(kAny, nullptr).has_value());
}

TEST(FairQueueTest, SkipsTenantsAndKeysThatCannotStart) {
  FairQueue q;
  q.ChargeOutput("b", 1, 100);  // b comes after a by counter
  q.Push(Item(1, "a", 10, 1, Priority::kInteractive, "a-busy"));
  q.Push(Item(2, "a", 10, 1, Priority::kInteractive, "a-busy"));
  q.Push(Item(3, "a", 10, 1, Priority::kInteractive, "a-free"));
  q.Push(Item(4, "b", 10, 1, Priority::kInteractive, "b-key"));
  int offered_busy = 0;
  auto not_a_busy = [&](const QueuedItem& item) {
    if (item.key_id != "a-busy") return true;
    ++offered_busy;
    return false;
  };
  // a has the smallest counter; its busy key is skipped (offered once, not
  // once per item) and its other key's later item served.
  EXPECT_EQ(PopId(q, not_a_busy), 3u);
  EXPECT_EQ(offered_busy, 1);
  // Now a tenant-wide refusal: the next tenant by counter is served.
  auto not_a = [](const QueuedItem& item) { return item.tenant != "a"; };
  EXPECT_EQ(PopId(q, not_a), 4u);
  // Nothing may start: nothing is taken.
  EXPECT_FALSE(q.Pop([](const QueuedItem&) { return false; }, nullptr).has_value());
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(PopId(q), 1u);
  EXPECT_EQ(PopId(q), 2u);
}

TEST(FairQueueTest, ManyTenantsEachServedOncePerRound) {
  FairQueue q;
  constexpr int kTenants = 2000;
  uint64_t next_id = 1;
  for (int round = 0; round < 3; ++round) {
    for (int t = 0; t < kTenants; ++t) q.Push(Item(next_id++, "t" + std::to_string(t), 10));
  }
  for (int round = 0; round < 3; ++round) {
    std::map<std::string, int> served;
    for (int i = 0; i < kTenants; ++i) {
      auto item = q.Pop(kAny, nullptr);
      ASSERT_TRUE(item.has_value());
      ++served[item->tenant];
    }
    EXPECT_EQ(served.size(), static_cast<size_t>(kTenants));
  }
  EXPECT_EQ(q.size(), 0u);
}

TEST(FifoQueueTest, ServesInArrivalOrderSkippingWhatCannotStart) {
  FifoQueue q;
  q.Push(Item(1, "a", 10, 1, Priority::kBatch, "k1"));
  q.Push(Item(2, "b", 10, 1, Priority::kInteractive, "k2"));
  q.Push(Item(3, "a", 10, 1, Priority::kInteractive, "k1"));
  q.Push(Item(4, "c", 10, 1, Priority::kInteractive, "k3"));
  EXPECT_EQ(q.size(), 4u);
  int offered_k1 = 0;
  auto not_k1 = [&](const QueuedItem& item) {
    if (item.key_id == "k1") ++offered_k1;
    return item.key_id != "k1";
  };
  EXPECT_EQ(q.Pop(not_k1, nullptr)->id, 2u);
  EXPECT_EQ(q.Pop(not_k1, nullptr)->id, 4u);
  EXPECT_EQ(offered_k1, 2);  // once per Pop
  EXPECT_FALSE(q.Pop(not_k1, nullptr).has_value());
  EXPECT_TRUE(q.Remove(3));
  EXPECT_FALSE(q.Remove(3));
  EXPECT_EQ(q.Pop(kAny, nullptr)->id, 1u);
  EXPECT_EQ(q.size(), 0u);
}

TEST(FifoQueueTest, ServesInArrivalOrderWithoutAskingFirst) {
  FifoQueue q;
  q.Push(Item(1, "a"));
  q.Push(Item(2, "b"));
  int asked = 0;
  auto b_first = [&asked](const QueuedItem& item) {
    ++asked;
    return item.tenant == "b";
  };
  EXPECT_EQ(q.Pop(kAny, b_first)->id, 1u);
  EXPECT_EQ(q.Pop(kAny, b_first)->id, 2u);
  EXPECT_EQ(asked, 0);
}

// Both disciplines behind the one interface the dispatcher holds.
TEST(RequestQueueTest, EitherDisciplineCountsEachTenantsItems) {
  FairQueue fair;
  FifoQueue fifo;
  for (RequestQueue* q : {static_cast<RequestQueue*>(&fair), static_cast<RequestQueue*>(&fifo)}) {
    q->Push(Item(1, "a"));
    q->Push(Item(2, "b"));
    q->Push(Item(3, "a"));
    EXPECT_EQ(q->size(), 3u);
    EXPECT_EQ(q->QueuedFor("a"), 2u);
    EXPECT_EQ(q->QueuedFor("b"), 1u);
    EXPECT_EQ(q->QueuedFor("c"), 0u);
    EXPECT_TRUE(q->Remove(3));
    EXPECT_EQ(q->QueuedFor("a"), 1u);
    ASSERT_TRUE(q->Pop(kAny, nullptr).has_value());
    EXPECT_EQ(q->size(), 1u);
    EXPECT_EQ(q->QueuedFor("a") + q->QueuedFor("b"), 1u);
  }
}

}  // namespace
}  // namespace atrium::gateway
