// The pure engine model, driven by hand-picked times (microseconds).
#include "engine_sim/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "support/result_matchers.h"

namespace atrium::engine_sim {
namespace {

constexpr Micros kMs = 1000;

Profile TestProfile(int max_batch, double decode_ms, double per_seq_ms = 0,
                    double prefill_tokens_per_s = 0) {
  return {.name = "test",
          .max_batch = max_batch,
          .prefill_tokens_per_s = prefill_tokens_per_s,
          .decode_base_ms = decode_ms,
          .decode_per_seq_ms = per_seq_ms,
          .max_context = 8192};
}

RequestId MustSubmit(Engine& engine, EngineRequest request, Micros now) {
  auto id = engine.Submit(request, now);
  EXPECT_TRUE(id.has_value());
  return id.has_value() ? *id : 0;
}

// Runs the engine until it is idle; returns every event.
std::vector<EngineEvent> RunToIdle(Engine& engine) {
  std::vector<EngineEvent> all;
  while (auto next = engine.NextEventTime()) {
    auto events = engine.Advance(*next);
    all.insert(all.end(), events.begin(), events.end());
  }
  return all;
}

std::vector<RequestId> FinishOrder(const std::vector<EngineEvent>& events) {
  std::vector<RequestId> order;
  for (const auto& e : events) {
    if (e.kind == EngineEvent::Kind::kFinished) order.push_back(e.id);
  }
  return order;
}

// Time of the first token of each request.
std::map<RequestId, Micros> FirstTokenTimes(const std::vector<EngineEvent>& events) {
  std::map<RequestId, Micros> first;
  for (const auto& e : events) {
    if (e.kind == EngineEvent::Kind::kToken && e.token_index == 0) first[e.id] = e.time;
  }
  return first;
}

TEST(ProfileTest, BuiltinProfilesHaveTheirDocumentedShape) {
  ASSERT_OK(FindProfile("h100-llama3-8b"));
  Profile h100 = *FindProfile("h100-llama3-8b");
  EXPECT_EQ(h100.max_batch, 64);
  EXPECT_NEAR(h100.DecodeStepMicros(1), 12 * kMs, 200);
  EXPECT_NEAR(h100.DecodeStepMicros(64), 30 * kMs, 500);
  EXPECT_EQ(h100.PrefillMicros(12'000), 1'000 * kMs);
  EXPECT_FALSE(h100.IsInstant());

  ASSERT_OK(FindProfile("a100-llama3-8b"));
  EXPECT_GT(FindProfile("a100-llama3-8b")->DecodeStepMicros(1), h100.DecodeStepMicros(1));

  Profile instant = *FindProfile("instant");
  EXPECT_TRUE(instant.IsInstant());
  EXPECT_EQ(instant.DecodeStepMicros(1000), 0);
  EXPECT_EQ(instant.PrefillMicros(100'000), 0);

  Profile slow = *FindProfile("slow");
  EXPECT_EQ(slow.DecodeStepMicros(1), 1000 * kMs);
  EXPECT_EQ(slow.DecodeStepMicros(10'000), 1000 * kMs);
  EXPECT_GE(slow.max_batch, 10'000);  // idle-stream tests hold 10,000 streams at once
}

TEST(ProfileTest, UnknownProfileNamesTheKnownOnes) {
  auto missing = FindProfile("b200-llama3-405b");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("h100-llama3-8b"), std::string::npos);
  EXPECT_EQ(BuiltinProfileNames(), "h100-llama3-8b, a100-llama3-8b, instant, slow, idle");
}

TEST(TokenCountTest, FourBytesPerTokenRoundedUp) {
  EXPECT_EQ(CountTextTokens(""), 0);
  EXPECT_EQ(CountTextTokens("abcd"), 1);
  EXPECT_EQ(CountTextTokens("abcde"), 2);
  EXPECT_EQ(CountTextTokens(std::string(4000, 'x')), 1000);
}

TEST(TextTest, SamePromptGivesSameTextAndSeedChangesIt) {
  TextHasher a(7), b(7), c(8);
  a.Add("user");
  a.Add("Say hello");
  b.Add("user");
  b.Add("Say hello");
  c.Add("user");
  c.Add("Say hello");
  EXPECT_EQ(a.value(), b.value());
  EXPECT_NE(a.value(), c.value());

  TextHasher split1, split2;
  split1.Add("ab");
  split1.Add("c");
  split2.Add("a");
  split2.Add("bc");
  EXPECT_NE(split1.value(), split2.value());

  const std::string text = CompletionText(a.value(), 12);
  EXPECT_EQ(text, CompletionText(b.value(), 12));
  EXPECT_NE(text, CompletionText(c.value(), 12));
  std::string joined;
  for (int i = 0; i < 12; ++i) joined += TokenText(a.value(), i);
  EXPECT_EQ(joined, text);
  EXPECT_NE(TokenText(a.value(), 0).front(), ' ');
  EXPECT_EQ(TokenText(a.value(), 1).front(), ' ');
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 11);
}

TEST(TextTest, NaturalLengthIsDeterministicAndInRange) {
  EXPECT_EQ(NaturalLength(123, 0), 0);
  for (uint64_t h = 0; h < 200; ++h) {
    const int n = NaturalLength(h, 10);
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 10);
    EXPECT_EQ(n, NaturalLength(h, 10));
  }
}

TEST(EngineTest, PrefillThenOneTokenPerDecodeStep) {
  Engine engine(TestProfile(4, /*decode_ms=*/10, 0, /*prefill_tokens_per_s=*/1000));
  const RequestId id = MustSubmit(engine, {.prompt_tokens = 100, .max_tokens = 3}, 0);
  EXPECT_TRUE(engine.Advance(0).empty());
  EXPECT_EQ(engine.running(), 1);
  ASSERT_TRUE(engine.NextEventTime().has_value());
  EXPECT_EQ(*engine.NextEventTime(), 110 * kMs);  // 100 ms prefill + 10 ms decode
  EXPECT_TRUE(engine.Advance(109 * kMs).empty());

  auto events = engine.Advance(110 * kMs);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EngineEvent::Kind::kToken);
  EXPECT_EQ(events[0].id, id);
  EXPECT_EQ(events[0].token_index, 0);
  EXPECT_EQ(*engine.NextEventTime(), 120 * kMs);

  events = engine.Advance(10'000 * kMs);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].time, 120 * kMs);
  EXPECT_EQ(events[1].time, 130 * kMs);
  EXPECT_EQ(events[1].token_index, 2);
  EXPECT_EQ(events[2].kind, EngineEvent::Kind::kFinished);
  EXPECT_EQ(events[2].completion_tokens, 3);
  EXPECT_EQ(events[2].reason, FinishReason::kLength);
  EXPECT_FALSE(engine.NextEventTime().has_value());
  EXPECT_EQ(engine.running(), 0);
}

TEST(EngineTest, RequestArrivingMidStepJoinsAtTheNextBoundary) {
  Engine engine(TestProfile(4, /*decode_ms=*/10));
  const RequestId a = MustSubmit(engine, {.max_tokens = 5}, 0);
  EXPECT_TRUE(engine.Advance(0).empty());
  const RequestId b = MustSubmit(engine, {.max_tokens = 1}, 5 * kMs);
  EXPECT_TRUE(engine.Advance(5 * kMs).empty());
  EXPECT_EQ(engine.waiting(), 1);
  EXPECT_EQ(*engine.NextEventTime(), 10 * kMs);  // the step in progress, not B's arrival

  auto first = FirstTokenTimes(RunToIdle(engine));
  EXPECT_EQ(first[a], 10 * kMs);
  EXPECT_EQ(first[b], 20 * kMs);
}

TEST(EngineTest, IdleEngineStartsAStepWhenARequestArrives) {
  Engine engine(TestProfile(4, /*decode_ms=*/10));
  MustSubmit(engine, {.max_tokens = 1}, 0);
  RunToIdle(engine);
  const RequestId late = MustSubmit(engine, {.max_tokens = 1}, 500 * kMs);
  EXPECT_EQ(*engine.NextEventTime(), 500 * kMs);
  // Even when Advance is called late, the step started at the arrival.
  auto events = engine.Advance(600 * kMs);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id, late);
  EXPECT_EQ(events[0].time, 510 * kMs);
}

TEST(EngineTest, MaxBatchLimitsTheBatchAndTheRestWaitInOrder) {
  Engine engine(TestProfile(/*max_batch=*/2, /*decode_ms=*/10));
  std::vector<RequestId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(MustSubmit(engine, {.max_tokens = 2}, 0));
  EXPECT_TRUE(engine.Advance(0).empty());
  EXPECT_EQ(engine.running(), 2);
  EXPECT_EQ(engine.waiting(), 2);

  auto events = RunToIdle(engine);
  EXPECT_EQ(FinishOrder(events), ids);
  auto first = FirstTokenTimes(events);
  EXPECT_EQ(first[ids[0]], 10 * kMs);
  EXPECT_EQ(first[ids[1]], 10 * kMs);
  EXPECT_EQ(first[ids[2]], 30 * kMs);  // after the first two finished at 20 ms
  EXPECT_EQ(first[ids[3]], 30 * kMs);
  EXPECT_EQ(engine.stats().max_batch_seen, 2);
  EXPECT_EQ(engine.stats().tokens_generated, 8);
}

TEST(EngineTest, AdmissionIsFifo) {
  Engine engine(TestProfile(/*max_batch=*/1, /*decode_ms=*/10));
  const RequestId a = MustSubmit(engine, {.max_tokens = 1}, 0);
  const RequestId b = MustSubmit(engine, {.max_tokens = 3}, 1);
  const RequestId c = MustSubmit(engine, {.max_tokens = 1}, 2);
  auto events = RunToIdle(engine);
  EXPECT_EQ(FinishOrder(events), (std::vector<RequestId>{a, b, c}));
  auto first = FirstTokenTimes(events);
  EXPECT_EQ(first[a], 10 * kMs);
  EXPECT_EQ(first[b], 20 * kMs);
  EXPECT_EQ(first[c], 50 * kMs);
}

TEST(EngineTest, ThroughputGrowsWithTheBatch) {
  const Profile h100 = *FindProfile("h100-llama3-8b");
  auto tokens_per_second = [&](int concurrent) {
    Engine engine(h100);
    for (int i = 0; i < concurrent; ++i) MustSubmit(engine, {.max_tokens = 100}, 0);
    Micros end = 0;
    for (const auto& e : RunToIdle(engine)) end = std::max(end, e.time);
    return static_cast<double>(concurrent) * 100 / (static_cast<double>(end) / 1e6);
  };
  const double one = tokens_per_second(1);
  const double sixty_four = tokens_per_second(64);
  EXPECT_NEAR(one, 1e6 / h100.DecodeStepMicros(1), 1);
  EXPECT_GT(sixty_four, 20 * one);  // ~2,100 tokens/s against ~83
  // Beyond max_batch the batch stops growing: throughput stays, latency doubles.
  EXPECT_NEAR(tokens_per_second(128), sixty_four, sixty_four * 0.01);
}

TEST(EngineTest, PrefillOfAJoiningRequestStallsTheBatch) {
  Engine engine(TestProfile(4, /*decode_ms=*/10, 0, /*prefill_tokens_per_s=*/1000));
  const RequestId a = MustSubmit(engine, {.max_tokens = 3}, 0);
  EXPECT_EQ(engine.Advance(10 * kMs).size(), 1u);  // A's first token
  const RequestId b = MustSubmit(engine, {.prompt_tokens = 500, .max_tokens = 1}, 15 * kMs);
  auto events = RunToIdle(engine);
  // A's second token (step 10-20 ms) is on time; B joins at 20 ms and its
  // 500 ms of prefill delay A's third token too.
  std::map<std::pair<RequestId, int>, Micros> at;
  for (const auto& e : events) {
    if (e.kind == EngineEvent::Kind::kToken) at[{e.id, e.token_index}] = e.time;
  }
  EXPECT_EQ((at[{a, 1}]), 20 * kMs);
  EXPECT_EQ((at[{b, 0}]), 530 * kMs);
  EXPECT_EQ((at[{a, 2}]), 530 * kMs);
  EXPECT_EQ(engine.stats().prompt_tokens_prefilled, 500);
}

TEST(EngineTest, CancellingARunningRequestFreesItsSlotForTheNextStep) {
  Engine engine(TestProfile(/*max_batch=*/1, /*decode_ms=*/10));
  const RequestId a = MustSubmit(engine, {.max_tokens = 100}, 0);
  const RequestId b = MustSubmit(engine, {.max_tokens = 1}, 0);
  EXPECT_EQ(engine.Advance(10 * kMs).size(), 1u);  // A's first token; A's second step began
  EXPECT_TRUE(engine.Cancel(a));
  EXPECT_FALSE(engine.Cancel(a));
  EXPECT_EQ(engine.running(), 0);
  auto events = RunToIdle(engine);
  ASSERT_EQ(events.size(), 2u);
  for (const auto& e : events) EXPECT_EQ(e.id, b);
  EXPECT_EQ(events[0].time, 30 * kMs);  // the step in progress ends at 20 ms, B's at 30
  EXPECT_EQ(engine.stats().cancelled, 1);
}

TEST(EngineTest, CancelledWaitingRequestNeverRuns) {
  Engine engine(TestProfile(/*max_batch=*/1, /*decode_ms=*/10));
  const RequestId a = MustSubmit(engine, {.max_tokens = 2}, 0);
  const RequestId b = MustSubmit(engine, {.max_tokens = 2}, 0);
  const RequestId c = MustSubmit(engine, {.max_tokens = 2}, 0);
  engine.Advance(0);
  EXPECT_EQ(engine.waiting(), 2);
  EXPECT_TRUE(engine.Cancel(b));
  EXPECT_EQ(engine.waiting(), 1);
  auto events = RunToIdle(engine);
  EXPECT_EQ(FinishOrder(events), (std::vector<RequestId>{a, c}));
  for (const auto& e : events) EXPECT_NE(e.id, b);
  EXPECT_FALSE(engine.Cancel(a));  // finished
}

TEST(EngineTest, CancellingTheFrontOfTheQueueLetsTheNextOneStart) {
  Engine engine(TestProfile(/*max_batch=*/1, /*decode_ms=*/10));
  const RequestId a = MustSubmit(engine, {.max_tokens = 1}, 0);
  EXPECT_TRUE(engine.Cancel(a));  // cancelled before any step
  EXPECT_FALSE(engine.NextEventTime().has_value());
  const RequestId b = MustSubmit(engine, {.max_tokens = 1}, 3 * kMs);
  auto events = RunToIdle(engine);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id, b);
  EXPECT_EQ(events[0].time, 13 * kMs);
}

TEST(EngineTest, InstantProfileFinishesAtSubmitTime) {
  Engine engine(*FindProfile("instant"));
  const RequestId id = MustSubmit(engine, {.prompt_tokens = 5000, .max_tokens = 5}, 42);
  auto events = engine.Advance(42);
  ASSERT_EQ(events.size(), 6u);
  for (const auto& e : events) {
    EXPECT_EQ(e.id, id);
    EXPECT_EQ(e.time, 42);
  }
  EXPECT_EQ(events.back().kind, EngineEvent::Kind::kFinished);
  EXPECT_FALSE(engine.NextEventTime().has_value());
}

TEST(EngineTest, StopLengthFinishesEarlyWithStop) {
  Engine engine(TestProfile(4, 10));
  const RequestId early = MustSubmit(engine, {.max_tokens = 10, .stop_after = 3}, 0);
  const RequestId capped = MustSubmit(engine, {.max_tokens = 2, .stop_after = 5}, 0);
  std::map<RequestId, EngineEvent> finished;
  for (const auto& e : RunToIdle(engine)) {
    if (e.kind == EngineEvent::Kind::kFinished) finished[e.id] = e;
  }
  EXPECT_EQ(finished[early].completion_tokens, 3);
  EXPECT_EQ(finished[early].reason, FinishReason::kStop);
  EXPECT_EQ(finished[capped].completion_tokens, 2);
  EXPECT_EQ(finished[capped].reason, FinishReason::kLength);
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
}

TEST(EngineTest, RejectsRequestsBeyondTheContextAndEmptyOnes) {
  Engine engine(*FindProfile("h100-llama3-8b"));
  EXPECT_ERROR(engine.Submit({.prompt_tokens = 8000, .max_tokens = 500}, 0),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(engine.Submit({.prompt_tokens = 1, .max_tokens = 0}, 0),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(engine.Submit({.prompt_tokens = -1, .max_tokens = 1}, 0),
               ErrorCode::kInvalidArgument);
  EXPECT_OK(engine.Submit({.prompt_tokens = 8000, .max_tokens = 192}, 0));
}

}  // namespace
}  // namespace atrium::engine_sim
